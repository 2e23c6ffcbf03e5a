"""``family=`` in the Python package: the normalization family's suites (layer_norm, rms_norm,
group_norm) judged (in process where the extension module is built, else through the binary;
test_inproc_family.py compares the two). A textbook numpy kernel of each family conforms, the
same kernel with a doubled variance is rejected, the optional statistics may be left out, a
missing required output is not conforming, the family's case fields are there, and bad
arguments raise ValueError naming them."""

import numpy as np
import pytest

import bnconf


def numpy_family(case, var_factor=1.0, stats=True):
    """Every op of the family in float64, two-pass statistics (``var_factor`` 2: a defect)."""
    x = case.inputs["x"].astype(np.float64)
    gamma = case.inputs.get("gamma")
    beta = case.inputs.get("beta")
    centred = case.family != "rms_norm"
    if case.layout == "last":
        k = case.normalized_ndim
        stat = tuple(range(x.ndim - k, x.ndim))
        xs = x
        pshape = x.shape[x.ndim - k:]
        psum = tuple(range(x.ndim - k))
    else:
        # [N, C, *spatial] with the channel axis at 1, then [N, G, C/G * spatial].
        xs = np.moveaxis(x, case.channel_axis, 1)
        stat = None
        pshape = (1, xs.shape[1]) + (1,) * (xs.ndim - 2)
        psum = (0,) + tuple(range(2, xs.ndim))

    def grouped(a):
        return a.reshape(a.shape[0], case.groups, -1) if stat is None else a

    def back(a, like):
        return a.reshape(like.shape)

    axes = 2 if stat is None else stat
    xg = grouped(xs)
    mean = xg.mean(axis=axes, keepdims=True) if centred else 0.0
    xc = xg - mean
    var = var_factor * (xc * xc).mean(axis=axes, keepdims=True)
    r = 1.0 / np.sqrt(var + case.eps)
    xhat = back(xc * r, xs)
    w = np.ones(pshape) if gamma is None else gamma.astype(np.float64).reshape(pshape)
    if case.convention == "offset":
        w = 1.0 + w
    unmove = (lambda a: a) if stat is not None else (lambda a: np.moveaxis(a, 1, case.channel_axis))
    if not case.op.endswith("_backward"):
        y = w * xhat
        if beta is not None:
            y = y + beta.astype(np.float64).reshape(pshape)
        out = {"y": unmove(y)}
        if stats:
            # [*batch] (layout "last") or [N, groups] (group_norm), as FORMAT.md says.
            sshape = x.shape[: x.ndim - case.normalized_ndim] if stat is not None else (x.shape[0], case.groups)
            if centred:
                out["mean"] = mean.reshape(sshape)
            out["rstd"] = r.reshape(sshape)
        return out
    dy = case.inputs["dy"].astype(np.float64)
    dys = dy if stat is not None else np.moveaxis(dy, case.channel_axis, 1)
    g = grouped(w * dys)
    xh = grouped(xhat)
    proj = (g * xh).mean(axis=axes, keepdims=True)
    inner = g - xh * proj
    if centred:
        inner = inner - g.mean(axis=axes, keepdims=True)
    out = {"dx": unmove(back(r * inner, xs))}
    if gamma is not None:
        out["dgamma"] = (dys * xhat).sum(axis=psum).reshape(gamma.shape)
    if case.affine == "weight_bias":
        out["dbeta"] = dys.sum(axis=psum).reshape(gamma.shape)
    return out


@pytest.mark.parametrize("family", ["layer_norm", "rms_norm", "group_norm"])
@pytest.mark.parametrize("dtype", ["float32", "float64", "bfloat16+float32"])
def test_a_numpy_kernel_of_each_family_conforms(family, dtype):
    r = bnconf.check(numpy_family, dtype=dtype, family=family)
    assert r.ok, r.describe()
    assert not r.unsupported


@pytest.mark.parametrize("family", ["layer_norm", "rms_norm", "group_norm"])
def test_a_doubled_variance_is_rejected(family):
    r = bnconf.check(lambda c: numpy_family(c, var_factor=2.0), dtype="float32", family=family)
    assert not r.ok
    assert len(r.failures) > 10


def test_optional_statistics_may_be_left_out_and_a_missing_output_is_not_conforming():
    r = bnconf.check(lambda c: numpy_family(c, stats=False), dtype="float64", family="layer_norm")
    assert r.ok, r.describe()

    def no_dgamma(case):
        out = numpy_family(case)
        out.pop("dgamma", None)
        return out

    r = bnconf.check(no_dgamma, dtype="float64", family="layer_norm", ops=["layer_norm_backward"])
    assert not r.ok


def test_family_case_fields():
    seen = {}

    def record(case):
        seen[case.id] = case
        return None

    bnconf.check(record, dtype="float32", family="all")
    families = {c.family for c in seen.values()}
    assert families == {"layer_norm", "rms_norm", "group_norm"}
    for c in seen.values():
        assert c.affine in ("weight_bias", "weight", "none")
        if c.layout == "last":
            assert c.groups is None and 1 <= c.normalized_ndim <= 3
            assert c.reduce_axes == tuple(range(len(c.shape) - c.normalized_ndim, len(c.shape)))
        else:
            assert c.family == "group_norm" and c.shape[c.channel_axis] % c.groups == 0
        if not c.op.endswith("_backward"):
            assert set(c.optional_outputs) <= {"mean", "rstd"} and c.optional_outputs
        assert set(c.inputs) >= {"x"}


def test_bad_family_arguments_raise_value_error():
    with pytest.raises(ValueError, match="family 'batchnorm'"):
        bnconf.check(numpy_family, family="batchnorm")
    for in_process in (False, True):
        with pytest.raises(ValueError, match="--suite"):
            bnconf.check(numpy_family, family="layer_norm", suite="replicated", in_process=in_process)
        with pytest.raises(ValueError, match="--ops"):
            bnconf.check(numpy_family, family="rms_norm", ops=["layer_norm"], in_process=in_process)
