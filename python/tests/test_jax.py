"""Tests of `bnconf.jax`: a two-pass JAX BatchNorm function conforms and a Bessel-corrected one
is rejected; Flax's BatchNorm with its two-pass variance conforms and with its default one-pass
variance is rejected (the finding of adapters/results/flax_bn-*.json); what a function or module
cannot express is unsupported with the reason; the family guard; the assert helpers' messages.

Skipped, with the reason printed (pytest -rs), when JAX (or, for the Flax tests, Flax) is not
installed."""

import os

import pytest

os.environ.setdefault("JAX_PLATFORMS", "cpu")
jax = pytest.importorskip("jax", reason="bnconf.jax's tests need JAX (pip install jax)")
jnp = jax.numpy

import bnconf  # noqa: E402
import bnconf.jax  # noqa: E402


def _b(v, x, cax):
    shape = [1] * x.ndim
    shape[cax] = -1
    return v.reshape(shape)


def two_pass_bn(x, gamma, beta, *, axes, channel_axis, eps, mean=None, var=None):
    """A correct BatchNorm: two-pass statistics; the handed-in ones in eval."""
    given = mean is not None
    if not given:
        mean = jnp.mean(x, axes)
        var = jnp.mean(jnp.square(x - _b(mean, x, channel_axis)), axes)
    xhat = (x - _b(mean, x, channel_axis)) / jnp.sqrt(_b(var, x, channel_axis) + eps)
    y = _b(gamma, x, channel_axis) * xhat + _b(beta, x, channel_axis)
    return y if given else (y, mean, var)


def bessel_bn(x, gamma, beta, *, axes, channel_axis, eps):
    """Defective: Bessel's correction (jnp.var(ddof=1)) in the training forward."""
    mean, var = jnp.mean(x, axes), jnp.var(x, axes, ddof=1)
    xhat = (x - _b(mean, x, channel_axis)) / jnp.sqrt(_b(var, x, channel_axis) + eps)
    return _b(gamma, x, channel_axis) * xhat + _b(beta, x, channel_axis), mean, var


def y_only_bn(x, gamma, beta, *, axes, channel_axis, eps):
    """Correct, but returns only y and takes no handed-in statistics."""
    return two_pass_bn(x, gamma, beta, axes=axes, channel_axis=channel_axis, eps=eps)[0]


@pytest.fixture(scope="module")
def two_pass_f32():
    return bnconf.jax.check_function(two_pass_bn, dtype="float32", suite="default")


def test_two_pass_function_conforms_on_default_suite_f32(two_pass_f32):
    r = two_pass_f32
    assert r.ok, r
    passed = {(c.op, c.layout) for c in r.conforming}
    for op in ("forward", "backward", "eval", "sync_forward"):
        for layout in ("rows", "chw", "nchw", "nhwc"):
            assert (op, layout) in passed, (op, layout)
    reasons = {c.op: c.reason for c in r.unsupported}
    assert set(reasons) == {"running_update", "sync_backward", "sync_stats"}
    want = "two_pass_bn: JAX keeps no running statistics (user or Flax code does)"
    assert reasons["running_update"] == want
    assert "lax.pmean" in reasons["sync_backward"] and "lax.pmean" in reasons["sync_stats"]


def test_float64_conforms():
    r = bnconf.jax.check_function(
        two_pass_bn, dtype="float64", ops=["forward", "backward"], layouts=["nhwc"]
    )
    assert r.ok, r
    assert r.dtype == "f64" and r.summary["conforming"] > 0


def test_bessel_corrected_function_is_rejected():
    r = bnconf.jax.check_function(bessel_bn, ops=["forward", "backward"], layouts=["nchw"])
    assert not r.ok
    assert {c.op for c in r.failures} == {"forward", "backward"}
    worst = r.failures[0]
    assert worst.worst_output.name in ("y", "var", "dx", "dgamma")
    # no mean=/var= keywords: eval is unsupported, with the reason
    r = bnconf.jax.check_function(bessel_bn, ops=["eval"], layouts=["nchw"])
    assert r.summary["conforming"] == 0
    assert all("no mean=/var= keywords" in c.reason for c in r.unsupported)


def test_function_returning_only_y_cannot_show_its_statistics():
    r = bnconf.jax.check_function(y_only_bn, ops=["forward", "backward"], layouts=["nchw"])
    assert r.ok, r  # backward conforms; forward is unsupported, never faked
    fwd = [c for c in r.cases if c.op == "forward"]
    assert fwd and all(c.verdict == "unsupported" and "not observable" in c.reason for c in fwd)
    assert any(c.op == "backward" and c.ok for c in r.cases)


def test_assert_function_conforms():
    with pytest.raises(AssertionError) as e:
        bnconf.jax.assert_function_conforms(bessel_bn, ops=["forward"], layouts=["rows"])
    msg = str(e.value)
    assert msg.startswith("bessel_bn does not conform") and "forward.rows.f32." in msg
    assert "worst ratio" in msg
    r = bnconf.jax.assert_function_conforms(two_pass_bn, ops=["eval"], layouts=["nhwc"])
    assert r.ok


def test_family_and_arguments_are_checked():
    with pytest.raises(ValueError, match=r"family 'all'"):
        bnconf.jax.check_function(two_pass_bn, family="all")
    with pytest.raises(TypeError, match="JAX function"):
        bnconf.jax.check_function(3)


# ---------------------------------------------------------------------------------------------
# Flax


@pytest.fixture(scope="module")
def nn():
    linen = pytest.importorskip("flax.linen", reason="the Flax tests need Flax (pip install flax)")
    return linen


def test_flax_two_pass_batchnorm_conforms(nn):
    def build(case):
        return nn.BatchNorm(axis=case.channel_axis, epsilon=case.eps, use_fast_variance=False)

    r = bnconf.jax.check_flax_module(build, ops=["forward", "backward", "eval", "running_update"],
                                     layouts=["nchw", "rows"])  # fmt: skip
    assert r.ok, r
    passed = {c.op for c in r.conforming}
    assert passed == {"forward", "backward", "eval", "running_update"}
    pytorch = [c for c in r.unsupported if c.op == "running_update"]
    assert pytorch
    assert all("onnx convention (biased variance), not pytorch" in c.reason for c in pytorch)


def test_flax_default_batchnorm_is_rejected(nn):
    """Flax's default use_fast_variance=True (one-pass E[x^2] - E[x]^2) fails the conditioning
    cases: what adapters/results/flax_bn-f32.json records."""
    r = bnconf.jax.check_flax_module(nn.BatchNorm, ops=["forward"], layouts=["nchw"])
    assert not r.ok
    assert r.failures and all(c.op == "forward" for c in r.failures)
    assert r.failures[0].worst_ratio > 1e3
    with pytest.raises(AssertionError, match="BatchNorm does not conform"):
        bnconf.jax.assert_flax_module_conforms(nn.BatchNorm, ops=["forward"], layouts=["nchw"])


def test_flax_module_without_scale_or_momentum(nn):
    def no_scale(case):
        return nn.BatchNorm(axis=case.channel_axis, epsilon=case.eps, use_scale=False)

    r = bnconf.jax.check_flax_module(no_scale, ops=["eval"], layouts=["nchw"])
    assert r.summary["conforming"] == 0
    assert all("use_scale/use_bias=False" in c.reason for c in r.unsupported)

    class Plain(nn.Module):  # no momentum field: its batch statistics cannot be read
        @nn.compact
        def __call__(self, x, use_running_average=False):
            return x

    r = bnconf.jax.check_flax_module(lambda case: Plain(), ops=["forward"], layouts=["nchw"])
    assert r.summary["conforming"] == 0
    assert all("no momentum field" in c.reason for c in r.unsupported)


def test_flax_class_and_family_checks(nn):
    with pytest.raises(ValueError, match="not a batch_norm module"):
        bnconf.jax.check_flax_module(nn.LayerNorm, family="batch_norm")
    with pytest.raises(ValueError, match="not a group_norm module"):
        bnconf.jax.check_flax_module(nn.BatchNorm, family="group_norm")
    with pytest.raises(ValueError, match="family 'all'"):
        bnconf.jax.check_flax_module(nn.BatchNorm, family="all")


# ---------------------------------------------------------------------------------------------
# The normalization family.


def two_pass_norm(x, gamma, beta, *, axes, eps, channel_axis=None, groups=None):
    """A correct layer_norm / group_norm: two-pass statistics; y only (mean, rstd optional)."""
    shape = x.shape
    if groups is not None:  # [N, ..., C, ...] -> channels at 1, then [N, G, C/G * spatial]
        xs = jnp.moveaxis(x, channel_axis, 1)
        xg = xs.reshape(xs.shape[0], groups, -1)
        mean = xg.mean(2, keepdims=True)
        var = ((xg - mean) ** 2).mean(2, keepdims=True)
        xhat = jnp.moveaxis(((xg - mean) / jnp.sqrt(var + eps)).reshape(xs.shape), 1, channel_axis)
        pshape = [1] * len(shape)
        pshape[channel_axis] = -1
    else:
        mean = x.mean(axes, keepdims=True)
        var = ((x - mean) ** 2).mean(axes, keepdims=True)
        xhat = (x - mean) / jnp.sqrt(var + eps)
        pshape = None
    y = xhat
    if gamma is not None:
        y = y * (gamma if pshape is None else gamma.reshape(pshape))
    if beta is not None:
        y = y + (beta if pshape is None else beta.reshape(pshape))
    return y


def rms(x, gamma, beta, *, axes, eps):
    y = x * jax.lax.rsqrt((x * x).mean(axes, keepdims=True) + eps)
    return y if gamma is None else y * gamma


@pytest.mark.parametrize("family, fn", [("layer_norm", two_pass_norm), ("group_norm", two_pass_norm)])
def test_family_functions_conform(family, fn):
    r = bnconf.jax.check_function(fn, family=family, dtype="float32")
    assert r.ok, r
    assert r.summary["unsupported"] == 0 and r.summary["conforming"] > 15
    # y only: the statistics are not given (optional), never recomputed
    assert all(c["not_given"] for c in r.json["cases"] if not c["op"].endswith("_backward"))


def test_rms_function_is_judged_in_its_convention():
    r = bnconf.jax.check_function(rms, family="rms_norm", dtype="float32")
    # the offset-convention cases ((1 + gamma)·xhat, which rms() does not compute) fail, the
    # standard ones conform
    seen = {}
    bnconf.check(lambda c: seen.update({c.id: c.convention}), family="rms_norm")
    assert not r.ok and r.failures
    assert {seen[c.id] for c in r.failures} == {"offset"}
    assert {seen[c.id] for c in r.conforming} == {"standard"}


def one_pass_ln(x, gamma, beta, *, axes, eps):
    """Defective: E[x²] - mean² in the input dtype."""
    mean = x.mean(axes, keepdims=True)
    var = (x * x).mean(axes, keepdims=True) - mean * mean
    y = (x - mean) * jax.lax.rsqrt(var + eps)
    y = y if gamma is None else y * gamma
    return y if beta is None else y + beta


def test_one_pass_layer_norm_function_is_rejected():
    r = bnconf.jax.check_function(one_pass_ln, family="layer_norm", dtype="float32")
    assert not r.ok
    assert {c.worst_output.name for c in r.failures} <= {"y", "dx", "dgamma"}
    assert any("cancel" in c.id or "offset" in c.id for c in r.failures)


def test_flax_family_modules(nn):
    # Flax's LayerNorm and GroupNorm default to use_fast_variance=True (E[x²] - mean²): the
    # cancellation cases fail, as nn.BatchNorm's default does; two-pass, they conform.
    for cls in (nn.LayerNorm, nn.GroupNorm):
        r = bnconf.jax.check_flax_module(cls, dtype="float32")
        assert not r.ok and r.failures, cls
        assert all("cancel" in c.id or "constant" in c.id or "offset" in c.id
                   for c in r.failures), [c.id for c in r.failures]  # fmt: skip
    rms_r = bnconf.jax.check_flax_module(nn.RMSNorm, dtype="float32")
    assert rms_r.ok, rms_r
    assert rms_r.unsupported and all("convention standard" in c.reason for c in rms_r.unsupported)

    def two_pass_ln(case):
        k = case.normalized_ndim
        axes = tuple(range(-k, 0))
        return nn.LayerNorm(epsilon=case.eps, use_fast_variance=False, reduction_axes=axes,
                            feature_axes=axes, use_scale=case.affine != "none",
                            use_bias=case.affine == "weight_bias")  # fmt: skip

    r = bnconf.jax.check_flax_module(two_pass_ln, family="layer_norm", dtype="float32")
    assert r.ok, r
    assert r.summary["unsupported"] == 0

    def two_pass_gn(case):
        return nn.GroupNorm(num_groups=case.groups, epsilon=case.eps, use_fast_variance=False,
                            use_scale=case.affine != "none", use_bias=case.affine == "weight_bias")  # fmt: skip

    r = bnconf.jax.check_flax_module(two_pass_gn, family="group_norm", dtype="float32")
    assert r.ok, r
    assert {"nchw", "nhwc"} <= {c.layout for c in r.conforming}
    with pytest.raises(ValueError, match="not a group_norm module"):
        bnconf.jax.check_flax_module(nn.LayerNorm, family="group_norm")


def test_flax_mixed_precision(nn):
    # bf16 x with float32 params: bnconf builds Flax's mixed-precision module (dtype=bfloat16,
    # param_dtype=float32), whose y is bfloat16: every standard-convention case runs
    r = bnconf.jax.check_flax_module(nn.RMSNorm, dtype="bfloat16+float32")
    assert r.summary["not_conforming"] == 0 and r.summary["malformed"] == 0
    assert r.conforming and all("convention standard" in c.reason for c in r.unsupported)

    # a user's module with dtype=None: Flax computes and returns y in float32 (dtype
    # promotion), not the case's bfloat16: unsupported with the reason, never cast by bnconf
    def promoting(case):
        k = case.normalized_ndim
        axes = tuple(range(-k, 0))
        return nn.RMSNorm(epsilon=case.eps, use_scale=case.affine != "none",
                          reduction_axes=axes, feature_axes=axes)  # fmt: skip

    r = bnconf.jax.check_flax_module(promoting, family="rms_norm", dtype="bfloat16+float32")
    assert r.summary["not_conforming"] == 0 and r.summary["malformed"] == 0
    promoted = [c for c in r.unsupported if "returns y as float32" in c.reason]
    assert promoted and {c.op for c in promoted} == {"rms_norm", "rms_norm_backward"}


def test_flax_family_module_sets_fields(nn):
    # flax_family_module: the module check_flax_module builds, with a field changed
    def two_pass(case):
        return bnconf.jax.flax_family_module(nn.LayerNorm, case, use_fast_variance=False)

    r = bnconf.jax.check_flax_module(two_pass, family="layer_norm", dtype="float32")
    assert r.ok, r
    assert r.summary["unsupported"] == 0
    with pytest.raises(ValueError, match="not flax.linen.LayerNorm"):
        bnconf.jax.flax_family_module(nn.BatchNorm, None)
