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
    with pytest.raises(ValueError, match=r"family 'layer_norm' \(planned for bnconf 0.4\)"):
        bnconf.jax.check_function(two_pass_bn, family="layer_norm")
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
        bnconf.jax.check_flax_module(nn.LayerNorm)
    with pytest.raises(ValueError, match="family 'group_norm'"):
        bnconf.jax.check_flax_module(nn.BatchNorm, family="group_norm")
