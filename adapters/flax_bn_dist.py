#!/usr/bin/env python3
"""Flax's cross-device BatchNorm across two real processes: `jax.distributed.initialize` on
127.0.0.1 with 2 CPU processes, speaking the replicated kernel directory protocol
(docs/FORMAT.md, "Replicated suites"; plumbing in adapters/_replicated.py).

Usage: python adapters/flax_bn_dist.py DIR     (launches the 2 processes itself)

The launcher starts `python flax_bn_dist.py --worker P PORT DIR` for P = 0, 1 (process 0 is
also the coordinator, on a free port of 127.0.0.1), each with 4 local CPU devices
(`XLA_FLAGS=--xla_force_host_platform_device_count=4`) and CPU collectives over gloo
(`jax_cpu_collectives_implementation`).  A case with R ranks runs on a mesh of R of the 8
global devices: ranks 0..ceil(R/2)-1 on process 0's first devices, the others on process 1's,
so every collective crosses the process boundary.  The computation is flax_bn_sync.py's
(the same `nn.BatchNorm(axis_name="r")` functions, default use_fast_variance=True, padding
plus Flax's `mask=` for unequal shards) under `jax.shard_map` over that mesh instead of
`jax.pmap`; inputs are global arrays made with `jax.make_array_from_single_device_arrays`
from each process's own ranks, and each process writes the outputs of the ranks it holds."""

import os
import socket
import subprocess
import sys
import time

WORKER = len(sys.argv) == 5 and sys.argv[1] == "--worker"
if WORKER:
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=4").strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")

NAME = "flax_bn_dist"
NPROC = 2


def launcher():
    if len(sys.argv) != 2:
        sys.exit(f"usage: {sys.argv[0]} DIR")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = [subprocess.Popen([sys.executable, os.path.abspath(__file__), "--worker", str(p), str(port), sys.argv[1]])
             for p in range(NPROC)]
    rcs = [p.wait() for p in procs]
    if any(rcs):
        print(f"{NAME}: worker exit codes {rcs}", file=sys.stderr)
    return max(rcs)


def worker(pid, port, root):
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

    try:
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
    except Exception as e:  # the option's name or default differs across versions
        print(f"{NAME}: jax_cpu_collectives_implementation=gloo not set: {e}", file=sys.stderr)
    jax.distributed.initialize(coordinator_address=f"127.0.0.1:{port}", num_processes=NPROC, process_id=pid,
                               initialization_timeout=120)
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import flax_bn_sync as fs
    from _replicated import (CHANNEL_AXIS, Unsupported, case_dirs, check_case, load_rank, read_case,
                             report_error, write_rank, write_unsupported)

    jax.config.update("jax_enable_x64", True)
    devs = {p: sorted((d for d in jax.devices() if d.process_index == p), key=lambda d: d.id) for p in range(NPROC)}
    nloc = len(devs[pid])
    cache = {}
    n_ok = n_unsup = n_err = 0

    def layout_ranks(R):
        h = (R + 1) // 2
        if h > min(len(v) for v in devs.values()):
            raise Unsupported(f"{NAME}: {R} ranks, {nloc} devices per process")
        owner = [0] * h + [1] * (R - h)
        mesh_devs = devs[0][:h] + devs[1][: R - h]
        return owner, mesh_devs

    for d in case_dirs(root):
        try:
            case = read_case(d)
            check_case(case, NAME)
            op, R = case["op"], int(case["ranks"])
            if op == "running_update" and case["convention"] != "onnx":
                raise Unsupported(f"{NAME}: Flax's running statistics follow the onnx convention (biased variance), not {case['convention']}")
            owner, mesh_devs = layout_ranks(R)
            mine = [r for r in range(R) if owner[r] == pid]
            mesh = Mesh(np.array(mesh_devs), ("r",))
            sizes = [int(n) for n in case["shard_sizes"]]
            nmax, equal = max(sizes), len(set(sizes)) == 1
            cax = CHANNEL_AXIS[case["layout"]]
            eps = float(case["eps"])
            inp = {r: load_rank(d, case, r) for r in mine}
            tail = list(case["shape"][1:])

            def glob(name, per_rank):
                """Global [R, ...] array sharded over the mesh, from this process's ranks."""
                blocks = [per_rank(r) for r in mine]
                shape = (R,) + blocks[0].shape[1:]
                sh = NamedSharding(mesh, P("r"))
                arrs = [jax.device_put(b, mesh_devs[r]) for r, b in zip(mine, blocks)]
                return jax.make_array_from_single_device_arrays(shape, sh, arrs)

            def padded(name):
                def f(r):
                    a = inp[r][name]
                    pad = np.zeros([nmax - sizes[r]] + tail, a.dtype)
                    return np.concatenate([a, pad])[None]
                return glob(name, f)

            def mask_of(r):
                m = np.zeros([1, nmax] + tail, bool)
                m[0, : sizes[r]] = True
                return m

            def rep(name):
                return glob(name, lambda r: inp[r][name][None])

            x = padded("x")
            mask = None if equal else glob("mask", mask_of)
            if op == "forward":
                fn, args, static = fs._forward, [x, mask, rep("gamma"), rep("beta")], {"eps": eps, "cax": cax}
                names = ["y", "mean", "var"]
            elif op == "backward":
                fn, args, static = fs._backward, [x, padded("dy"), mask, rep("gamma")], {"eps": eps, "cax": cax}
                names = ["dx", "dgamma", "dbeta", "dgamma_local", "dbeta_local"]
            else:
                fn, args = fs._running_update, [x, mask, rep("running_mean"), rep("running_var")]
                static = {"eps": eps, "cax": cax, "momentum": float(case["momentum"])}
                names = ["new_mean", "new_var"]
            key = (fn, R, equal, tuple(sorted(static.items())), tuple(mesh_devs))
            if key not in cache:
                def body(*a, fn=fn, static=static):
                    a = [None if t is None else t[0] for t in a]  # drop the per-device leading 1
                    outs = fn(*a, **static)
                    return tuple(o[None] for o in outs)
                specs = tuple(P() if a is None else P("r") for a in args)
                cache[key] = jax.jit(jax.shard_map(body, mesh=mesh, in_specs=specs, out_specs=P("r")))
            outs = cache[key](*args)
            per = {r: {} for r in mine}
            for n, o in zip(names, outs):
                for s in o.addressable_shards:
                    r = s.index[0].start
                    v = np.asarray(s.data)[0]
                    per[r][n] = v[: sizes[r]] if n in ("y", "dx") else v
            for r in mine:
                write_rank(d, case, r, per[r], NAME)
            n_ok += 1
        except Unsupported as e:
            if pid == 0:
                write_unsupported(d, str(e))
            n_unsup += 1
        except Exception:
            report_error(NAME, d, f"s of process {pid}")
            n_err += 1
    print(f"{NAME} process {pid}: {n_ok} cases computed, {n_unsup} unsupported, {n_err} raised", file=sys.stderr)
    jax.distributed.shutdown()
    return 0


if __name__ == "__main__":
    if WORKER:
        t0 = time.time()
        sys.exit(worker(int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]))
    sys.exit(launcher())
