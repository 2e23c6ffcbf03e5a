#!/usr/bin/env python3
"""Sync BatchNorm across real processes with torch.distributed (gloo, localhost), speaking the
replicated kernel directory protocol (docs/FORMAT.md, "Replicated suites"; plumbing in
adapters/_replicated.py).

Usage: python adapters/torch_dist_bn.py DIR
       TORCH_DIST_BN=syncbn python adapters/torch_dist_bn.py DIR     (row torch_syncbn)

The launcher groups the cases by R and, once per distinct R, starts R worker processes
(`torch.multiprocessing.start_processes(..., start_method="fork")`, or "spawn" with
TORCH_DIST_BN_START=spawn), one per rank, joined in a
gloo process group over TCP on 127.0.0.1 (a free port per launch, timeout 120 s so a hung
collective fails instead of blocking); every worker visits all cases of its R in manifest
order and handles its own rank's shard.  Tensors are in the case dtype (gloo all-reduces
float32 and float64); nhwc shards are viewed as [n, C, H, W] with `permute(0, 3, 1, 2)`.

Row torch_dist_bn (default): a count-weighted sync BN written here from differentiable
collectives (`torch.distributed.nn.functional.all_reduce`, SUM):
  m    = all_reduce(cells of the shard)                    (cells of the channel, all ranks)
  mean = all_reduce(Σ_shard x) / m
  var  = all_reduce(Σ_shard (x - mean)²) / m               (two-pass over the global mean; biased)
  y    = (x - mean) · rsqrt(var + eps) · gamma + beta
An empty shard contributes zeros and a count of 0.  backward: autograd of the rank's Σ y·dy
(the all-reduces' backward all-reduces the cotangents, so x.grad is the whole batch's VJP
restricted to the shard); gamma.grad/beta.grad are the rank's part (dgamma_local,
dbeta_local), and dgamma/dbeta are `torch.distributed.all_reduce(SUM)` of those (DDP's
gradient all-reduce for a summed loss; DDP itself averages).  running_update: from the same
all-reduced mean/var, convention pytorch `(1-a)·old + a·var·m/(m-1)` (what nn.SyncBatchNorm
does with its all-gathered counts), onnx `a·old + (1-a)·var`.  No batch-norm kernel of
PyTorch is involved: this row judges the collective plumbing and this formulation.

Row torch_syncbn (TORCH_DIST_BN=syncbn): PyTorch's own `torch.nn.SyncBatchNorm` (training
mode, in the process group) on each rank's shard; forward's mean is its running_mean after
momentum=1 (exactly the batch mean), var its running_var (unbiased) times (m-1)/m (glue).  On CPU it refuses to run: the first case's
forward raises, and every case is written unsupported with PyTorch's own message.  Where CUDA
is available each rank uses `cuda:<rank % device_count>` and the nccl backend; that path is
written but has not been run here (no GPU on this machine), and NCCL does not allow two ranks
on one GPU, so R must not exceed the number of GPUs."""

import datetime
import os
import socket
import sys
import time
import traceback
import warnings

import numpy as np
import torch
import torch.distributed as dist
import torch.distributed.nn.functional as dnnf
import torch.multiprocessing as tmp

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _replicated import (  # noqa: E402
    CHANNEL_AXIS, Unsupported, cases_by_ranks, check_case, load_rank, read_case, report_error,
    root_arg, write_rank, write_unsupported)

MODE = os.environ.get("TORCH_DIST_BN", "written")
NAME = "torch_syncbn" if MODE == "syncbn" else "torch_dist_bn"
# fork: the launcher has imported torch but run no op (no thread pool yet), and a forked worker
# skips re-importing torch (seconds per process here); TORCH_DIST_BN_START=spawn for the safe way
START = os.environ.get("TORCH_DIST_BN_START", "fork")
TIMEOUT = datetime.timedelta(seconds=int(os.environ.get("TORCH_DIST_BN_TIMEOUT", "120")))


def nc(a, layout, dev):
    t = torch.from_numpy(np.ascontiguousarray(a)).to(dev)
    return t.permute(0, 3, 1, 2) if layout == "nhwc" else t


def back(t, layout):
    if layout == "nhwc":
        t = t.permute(0, 2, 3, 1)
    return t.detach().cpu().contiguous().numpy()


def written_stats(x):
    """Global (mean, biased var, m) of x [n, C, H, W] over every rank, differentiable."""
    dims = (0, 2, 3)
    cells = x.shape[0] * x.shape[2] * x.shape[3]
    m = dnnf.all_reduce(torch.full((x.shape[1],), float(cells), dtype=x.dtype, device=x.device))
    mean = dnnf.all_reduce(x.sum(dims)) / m
    var = dnnf.all_reduce(((x - mean[None, :, None, None]) ** 2).sum(dims)) / m
    return mean, var, m


def written_forward(x, gamma, beta, eps):
    mean, var, m = written_stats(x)
    inv = torch.rsqrt(var + eps)
    y = (x - mean[None, :, None, None]) * (inv * gamma)[None, :, None, None] + beta[None, :, None, None]
    return y, mean, var, m


def syncbn_forward(x, gamma, beta, eps, momentum=None, rmean=None, rvar=None):
    c = x.shape[1]
    bn = torch.nn.SyncBatchNorm(c, eps=eps, momentum=momentum if momentum is not None else 0.1,
                                device=x.device, dtype=x.dtype)
    with torch.no_grad():
        bn.weight.copy_(gamma)
        bn.bias.copy_(beta)
        if rmean is not None:
            bn.running_mean.copy_(rmean)
            bn.running_var.copy_(rvar)
    bn.train()
    return bn, bn(x)


def run_rank(case, inp, dev):
    op, layout = case["op"], case["layout"]
    eps = float(case["eps"])
    x = nc(inp["x"], layout, dev)
    c = x.shape[1]
    vec = lambda a: torch.from_numpy(np.ascontiguousarray(a)).to(dev)  # noqa: E731
    if op == "forward":
        g, b = vec(inp["gamma"]), vec(inp["beta"])
        if MODE == "syncbn":
            # batch statistics are not returned by SyncBatchNorm: momentum=1 puts the batch mean
            # (and the unbiased variance) into the running buffers
            bn, y = syncbn_forward(x, g, b, eps, momentum=1.0,
                                   rmean=torch.zeros(c, dtype=x.dtype, device=dev), rvar=torch.ones(c, dtype=x.dtype, device=dev))
            m = torch.tensor([float(x.numel() // c)], dtype=x.dtype, device=dev)
            dist.all_reduce(m)
            var = bn.running_var.detach() * (m - 1) / m  # unbiased -> biased (glue)
            return {"y": back(y, layout), "mean": bn.running_mean.detach().cpu().numpy(), "var": var.cpu().numpy()}
        with torch.no_grad():
            y, mean, var, _ = written_forward(x, g, b, eps)
        return {"y": back(y, layout), "mean": mean.cpu().numpy(), "var": var.cpu().numpy()}
    if op == "backward":
        xg = x.detach().clone().requires_grad_(True)
        g = vec(inp["gamma"]).clone().requires_grad_(True)
        b = torch.zeros(c, dtype=x.dtype, device=dev, requires_grad=True)
        dy = nc(inp["dy"], layout, dev)
        if MODE == "syncbn":
            bn, y = syncbn_forward(xg, g.detach(), b.detach(), eps)
            (y * dy).sum().backward()
            dg_local, db_local = bn.weight.grad.detach().clone(), bn.bias.grad.detach().clone()
        else:
            y, _, _, _ = written_forward(xg, g, b, eps)
            (y * dy).sum().backward()
            dg_local, db_local = g.grad.detach().clone(), b.grad.detach().clone()
        dg, db = dg_local.clone(), db_local.clone()
        dist.all_reduce(dg)
        dist.all_reduce(db)
        return {"dx": back(xg.grad, layout), "dgamma": dg.cpu().numpy(), "dbeta": db.cpu().numpy(),
                "dgamma_local": dg_local.cpu().numpy(), "dbeta_local": db_local.cpu().numpy()}
    # running_update
    a = float(case["momentum"])
    rm, rv = vec(inp["running_mean"]), vec(inp["running_var"])
    if MODE == "syncbn":
        if case["convention"] != "pytorch":
            raise Unsupported(f"{NAME}: nn.SyncBatchNorm implements only the pytorch convention, not {case['convention']}")
        with torch.no_grad():
            bn, _ = syncbn_forward(x, torch.ones(c, dtype=x.dtype, device=dev), torch.zeros(c, dtype=x.dtype, device=dev),
                                   eps, momentum=a, rmean=rm, rvar=rv)
        return {"new_mean": bn.running_mean.cpu().numpy(), "new_var": bn.running_var.cpu().numpy()}
    with torch.no_grad():
        mean, var, m = written_stats(x)
        if case["convention"] == "pytorch":
            nm, nv = (1 - a) * rm + a * mean, (1 - a) * rv + a * (var * m / (m - 1))
        elif case["convention"] == "onnx":
            nm, nv = a * rm + (1 - a) * mean, a * rv + (1 - a) * var
        else:
            raise Unsupported(f"{NAME}: convention {case['convention']} not implemented")
    return {"new_mean": nm.cpu().numpy(), "new_var": nv.cpu().numpy()}


def agree(flag, dev):
    """All ranks learn whether any rank set flag (max all-reduce): 0 ok, 1 unsupported, 2 error."""
    t = torch.tensor([float(flag)], dtype=torch.float64, device=dev)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return int(t.item())


def worker(rank, R, dirs, port):
    # torch.distributed.nn.functional.all_reduce warns that it is deprecated (in favour of the
    # private torch.distributed._functional_collectives); it is the documented differentiable one
    warnings.filterwarnings("ignore", message=".*torch.distributed.nn.functional.all_reduce is deprecated")
    torch.set_num_threads(1)
    cuda = MODE == "syncbn" and torch.cuda.is_available()
    dev = torch.device(f"cuda:{rank % torch.cuda.device_count()}") if cuda else torch.device("cpu")
    dist.init_process_group("nccl" if cuda else "gloo", init_method=f"tcp://127.0.0.1:{port}",
                            rank=rank, world_size=R, timeout=TIMEOUT)
    t0 = time.time()
    refusal = None  # SyncBatchNorm's CPU refusal, once seen
    n_ok = n_unsup = n_err = 0
    try:
        for d in dirs:
            flag, reason, inp, case = 0, None, None, None
            try:
                case = read_case(d)
                check_case(case, NAME)
                if refusal is not None:
                    raise Unsupported(refusal)
                inp = load_rank(d, case, rank)
            except Unsupported as e:
                flag, reason = 1, str(e)
            except Exception:
                report_error(NAME, d, rank)
                flag = 2
            flag = agree(flag, dev)
            if flag == 1:
                if rank == 0 and reason is not None:
                    write_unsupported(d, reason)
                n_unsup += 1
                continue
            if flag == 2:
                n_err += 1
                continue
            try:
                with np.errstate(all="ignore"):
                    outs = run_rank(case, inp, dev)
                flag = 0
            except Unsupported as e:
                flag, reason = 1, str(e)
            except ValueError as e:
                if MODE == "syncbn" and "SyncBatchNorm expected input tensor to be on" in str(e):
                    refusal = f"{NAME}: torch.nn.SyncBatchNorm on {dev.type}: ValueError: {e}"
                    flag, reason = 1, refusal
                else:
                    report_error(NAME, d, rank)
                    flag = 2
            except Exception:
                report_error(NAME, d, rank)
                flag = 2
            flag = agree(flag, dev)
            if flag == 0:
                try:
                    write_rank(d, case, rank, outs, NAME)
                    n_ok += 1
                except Exception:
                    report_error(NAME, d, rank)
                    n_err += 1
            elif flag == 1:
                if rank == 0:
                    write_unsupported(d, reason or f"{NAME}: another rank declined this case")
                n_unsup += 1
            else:
                n_err += 1
    finally:
        if rank == 0:
            print(f"{NAME} R={R}: {n_ok} cases computed, {n_unsup} unsupported, {n_err} raised "
                  f"({time.time() - t0:.1f} s after the process group formed)", file=sys.stderr)
        dist.destroy_process_group()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    root = root_arg()
    by, bad = cases_by_ranks(root)
    for d in bad:
        try:
            read_case(d)
        except Exception:
            report_error(NAME, d)
    failed = 0
    for R in sorted(by):
        t0 = time.time()
        try:
            ctx = tmp.start_processes(worker, args=(R, by[R], free_port()), nprocs=R, join=True, start_method=START)
        except Exception:
            print(f"{NAME}: the R={R} launch failed; its cases may lack outputs:", file=sys.stderr)
            traceback.print_exc()
            failed += 1
        else:
            del ctx
        print(f"{NAME}: R={R} launch: {time.time() - t0:.1f} s", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
