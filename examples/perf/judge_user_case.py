#!/usr/bin/env python3
"""A user's own large case, judged by `bnconf check --case` or by numpy float64 + np.allclose.

Two subcommands (numpy only; run with any python that has numpy, e.g. adapters/.venv/bin/python):

  judge_user_case.py prepare KIND SHAPE OUTDIR [--seed S]
      KIND: layer_norm | rms_norm (SHAPE = ROWS,K, normalized over the last axis)
            batch_norm            (SHAPE = N,C,H,W, layout nchw, training statistics)
      Writes, in OUTDIR:
        x.npy, dy.npy, gamma.npy[, beta.npy]    the inputs (float32)
        forward.json, backward.json             `bnconf-case/1` files, one op each, inputs as
                                                {"npy": "<name>.npy"} (paths relative to the file)
        out/forward/<output>.npy                the outputs of a float32 numpy kernel (the
        out/backward/<output>.npy               obvious two-pass implementation, as a user's)
      Data: x ~ N(0, 1) plus an offset ~ U(-3, 3) per row (layer/rms norm) or channel
      (batch_norm), dy ~ N(0, 1), gamma ~ U(0.5, 2), beta ~ U(-1, 1), eps 1e-5, fixed seed.

  judge_user_case.py numpy CASE.json OUTPUTS_DIR
      The baseline a user would run instead of `bnconf check --case CASE.json --outputs
      OUTPUTS_DIR`: load the case's inputs and the kernel's outputs, compute a float64
      two-pass reference, and np.allclose(out, ref, rtol=1e-4, atol=1e-5) per output.
      Prints what it accepted; exit 0 if every output is accepted, 1 otherwise.

Measuring the two side by side (each under /usr/bin/time -f "%e %U %S %M"):

  python judge_user_case.py prepare layer_norm 8192,4096 /tmp/item4/ln
  bnconf check --case /tmp/item4/ln/forward.json --outputs /tmp/item4/ln/out/forward
  python judge_user_case.py numpy /tmp/item4/ln/forward.json /tmp/item4/ln/out/forward

A tensor of more than 2^27 elements (batch_norm 256,64,112,112) needs `check --case ...
--max-elems 268435456`. docs/PERF.md has the figures.
"""

import json
import os
import sys

import numpy as np

EPS = "1e-5"
RTOL, ATOL = 1e-4, 1e-5
DEFAULT_SEED = 20261206

# Family cases: op names and outputs per direction (docs/FORMAT.md, "the normalization family
# in the protocol"); batch_norm's ops are `forward` / `backward` (section "Ops and layouts").
OPS = {
    "layer_norm": ("layer_norm", "layer_norm_backward"),
    "rms_norm": ("rms_norm", "rms_norm_backward"),
    "batch_norm": ("forward", "backward"),
}


def usage():
    sys.stderr.write(__doc__)
    sys.exit(2)


# ---------------------------------------------------------------------------------------------
# prepare
# ---------------------------------------------------------------------------------------------

def save(path, arr):
    np.save(path, np.ascontiguousarray(arr))


def kernel_rows_f32(kind, x, dy, gamma, beta, eps):
    """A user's float32 LayerNorm / RMSNorm over the last axis: two passes, float32 throughout.
    Yields (direction, name, array) as each output is ready (to keep the peak low)."""
    k = np.float32(x.shape[-1])
    if kind == "layer_norm":
        mean = x.mean(axis=-1, keepdims=True)            # pass 1
        xc = x - mean
        var = (xc * xc).mean(axis=-1, keepdims=True)     # pass 2
        rstd = np.float32(1) / np.sqrt(var + eps)
        xhat = xc
        xhat *= rstd
        del xc
        yield "forward", "mean", mean.reshape(-1)
    else:
        ms = (x * x).mean(axis=-1, keepdims=True)
        rstd = np.float32(1) / np.sqrt(ms + eps)
        xhat = x * rstd
    yield "forward", "rstd", rstd.reshape(-1)
    y = xhat * gamma
    if kind == "layer_norm":
        y += beta
    yield "forward", "y", y
    del y
    # backward: dx = rstd * (g - mean(g) - xhat * mean(g * xhat)), g = gamma * dy
    yield "backward", "dgamma", (dy * xhat).sum(axis=0)
    if kind == "layer_norm":
        yield "backward", "dbeta", dy.sum(axis=0)
    g = dy * gamma
    c2 = (g * xhat).sum(axis=-1, keepdims=True) / k
    dx = xhat
    dx *= c2
    np.subtract(g, dx, out=dx)
    if kind == "layer_norm":
        dx -= g.sum(axis=-1, keepdims=True) / k
    del g
    dx *= rstd
    yield "backward", "dx", dx


def kernel_bn_f32(x, dy, gamma, beta, eps):
    """A user's float32 training BatchNorm on nchw: two passes, float32 throughout."""
    axes = (0, 2, 3)
    bc = (1, -1, 1, 1)
    m = np.float32(x.size // x.shape[1])
    mean = x.mean(axis=axes)                                # pass 1
    xc = x - mean.reshape(bc)
    var = np.square(xc).mean(axis=axes)                     # pass 2
    rstd = np.float32(1) / np.sqrt(var + eps)
    yield "forward", "mean", mean
    yield "forward", "var", var
    xhat = xc
    xhat *= rstd.reshape(bc)
    del xc
    y = xhat * gamma.reshape(bc)
    y += beta.reshape(bc)
    yield "forward", "y", y
    del y
    # backward: dx = gamma * rstd * (dy - mean(dy) - xhat * mean(dy * xhat))
    dbeta = dy.sum(axis=axes)
    dgamma = (dy * xhat).sum(axis=axes)
    yield "backward", "dbeta", dbeta
    yield "backward", "dgamma", dgamma
    dx = xhat
    dx *= (dgamma / m).reshape(bc)
    np.subtract(dy, dx, out=dx)
    dx -= (dbeta / m).reshape(bc)
    dx *= (gamma * rstd).reshape(bc)
    yield "backward", "dx", dx


def prepare(kind, shape, outdir, seed):
    if kind not in OPS:
        sys.exit(f"unknown KIND {kind!r} (layer_norm, rms_norm, batch_norm)")
    if kind == "batch_norm" and len(shape) != 4:
        sys.exit("batch_norm takes SHAPE = N,C,H,W")
    if kind != "batch_norm" and len(shape) != 2:
        sys.exit(f"{kind} takes SHAPE = ROWS,K")
    os.makedirs(os.path.join(outdir, "out", "forward"), exist_ok=True)
    os.makedirs(os.path.join(outdir, "out", "backward"), exist_ok=True)
    rng = np.random.default_rng(seed)
    f32 = np.float32

    # inputs
    x = rng.standard_normal(size=tuple(shape), dtype=f32)
    if kind == "batch_norm":
        x += rng.uniform(-3, 3, size=shape[1]).astype(f32).reshape(1, -1, 1, 1)
        pshape = (shape[1],)
    else:
        x += rng.uniform(-3, 3, size=(shape[0], 1)).astype(f32)
        pshape = (shape[1],)
    dy = rng.standard_normal(size=tuple(shape), dtype=f32)
    gamma = rng.uniform(0.5, 2.0, size=pshape).astype(f32)
    beta = rng.uniform(-1.0, 1.0, size=pshape).astype(f32)
    save(os.path.join(outdir, "x.npy"), x)
    save(os.path.join(outdir, "dy.npy"), dy)
    save(os.path.join(outdir, "gamma.npy"), gamma)
    if kind != "rms_norm":
        save(os.path.join(outdir, "beta.npy"), beta)

    # case files
    fwd_op, bwd_op = OPS[kind]
    tag = "x".join(str(s) for s in shape)
    for direction, op in (("forward", fwd_op), ("backward", bwd_op)):
        if direction == "forward":
            names = ["x", "gamma"] + (["beta"] if kind != "rms_norm" else [])
        else:
            names = ["x", "dy", "gamma"]
        case = {
            "format": "bnconf-case/1",
            "id": f"user.{kind}.{tag}.{direction}",
            "op": op,
            "layout": "nchw" if kind == "batch_norm" else "last",
            "shape": list(shape),
            "dtype": "f32",
            "eps": EPS,
        }
        if kind != "batch_norm":
            case.update({
                "family": kind,
                "normalized_ndim": 1,
                "affine": "weight" if kind == "rms_norm" else "weight_bias",
                "convention": "standard",
            })
        case["inputs"] = {n: {"npy": f"{n}.npy"} for n in names}
        with open(os.path.join(outdir, f"{direction}.json"), "w") as f:
            json.dump(case, f, indent=2)
            f.write("\n")

    # the user's float32 kernel
    eps = f32(float(EPS))
    outs = (kernel_bn_f32(x, dy, gamma, beta, eps) if kind == "batch_norm"
            else kernel_rows_f32(kind, x, dy, gamma, beta, eps))
    written = []
    for direction, name, arr in outs:
        assert arr.dtype == f32, (name, arr.dtype)
        save(os.path.join(outdir, "out", direction, name + ".npy"), arr)
        written.append(f"{direction}/{name}{list(arr.shape)}")
        del arr
    print(f"prepared {kind} {tag} in {outdir}: cases forward.json, backward.json; "
          f"outputs {', '.join(written)}")


# ---------------------------------------------------------------------------------------------
# numpy baseline
# ---------------------------------------------------------------------------------------------

def numpy_check(case_path, outputs):
    with open(case_path) as f:
        case = json.load(f)
    base = os.path.dirname(os.path.abspath(case_path))
    op = case["op"]
    eps = float(case["eps"])

    def inp(name):
        return np.load(os.path.join(base, case["inputs"][name]["npy"])).astype(np.float64)

    verdicts = {}

    def judge(name, ref):
        got = np.load(os.path.join(outputs, name + ".npy")).astype(np.float64)
        verdicts[name] = bool(np.allclose(got, ref.reshape(got.shape), rtol=RTOL, atol=ATOL))

    if op in ("forward", "backward"):                       # batch_norm, nchw
        axes, bc = (0, 2, 3), (1, -1, 1, 1)
        x = inp("x")
        g = inp("gamma").reshape(bc)
        m = x.size // x.shape[1]
        mean = x.mean(axis=axes, keepdims=True)
        xc = x - mean
        del x
        var = (xc * xc).mean(axis=axes, keepdims=True)
        r = 1.0 / np.sqrt(var + eps)
        xh = xc
        xh *= r
        del xc
        if op == "forward":
            judge("mean", mean)
            judge("var", var)
            y = xh * g
            del xh
            y += inp("beta").reshape(bc)
            judge("y", y)
        else:
            dy = inp("dy")
            db = dy.sum(axis=axes, keepdims=True)
            dg = (dy * xh).sum(axis=axes, keepdims=True)
            judge("dgamma", dg)
            judge("dbeta", db)
            dx = dy - db / m - xh * (dg / m)
            del dy, xh
            dx *= g * r
            judge("dx", dx)
    elif op in ("layer_norm", "layer_norm_backward", "rms_norm", "rms_norm_backward"):
        x = inp("x")
        k = x.shape[-1]
        if op.startswith("layer_norm"):
            mean = x.mean(axis=-1, keepdims=True)
            xc = x - mean
            del x
            var = (xc * xc).mean(axis=-1, keepdims=True)
            r = 1.0 / np.sqrt(var + eps)
            xh = xc
            xh *= r
            del xc
        else:
            r = 1.0 / np.sqrt((x * x).mean(axis=-1, keepdims=True) + eps)
            xh = x
            xh *= r
            del x
        gamma = inp("gamma")
        if not op.endswith("_backward"):
            if op == "layer_norm":
                judge("mean", mean)
            judge("rstd", r)
            y = xh * gamma
            del xh
            if op == "layer_norm":
                y += inp("beta")
            judge("y", y)
        else:
            dy = inp("dy")
            judge("dgamma", (dy * xh).sum(axis=0))
            if op == "layer_norm_backward":
                judge("dbeta", dy.sum(axis=0))
            gd = dy * gamma
            del dy
            dx = gd - xh * ((gd * xh).mean(axis=-1, keepdims=True))
            if op == "layer_norm_backward":
                dx -= gd.mean(axis=-1, keepdims=True)
            del gd, xh
            dx *= r
            judge("dx", dx)
    else:
        sys.exit(f"op {op!r} is not handled by this baseline")

    ok = all(verdicts.values())
    detail = ", ".join(f"{n} {'ok' if v else 'REJECTED'}" for n, v in verdicts.items())
    print(f"numpy float64 + allclose(rtol={RTOL:g}, atol={ATOL:g}) on {case.get('id', case_path)}: "
          f"{detail} -> {'accepted' if ok else 'rejected'}")
    return 0 if ok else 1


def main(argv):
    if len(argv) < 2:
        usage()
    cmd = argv[1]
    if cmd == "prepare":
        args = argv[2:]
        seed = DEFAULT_SEED
        if "--seed" in args:
            i = args.index("--seed")
            seed = int(args[i + 1])
            del args[i:i + 2]
        if len(args) != 3:
            usage()
        kind, shape, outdir = args
        prepare(kind, [int(s) for s in shape.split(",")], outdir, seed)
        return 0
    if cmd == "numpy":
        if len(argv) != 4:
            usage()
        return numpy_check(argv[2], argv[3])
    usage()


if __name__ == "__main__":
    sys.exit(main(sys.argv))
