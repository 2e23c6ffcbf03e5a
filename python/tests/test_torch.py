"""Tests of `bnconf.torch`: torch's own BatchNorm classes conform, a user's module with a wrong
forward (Bessel-corrected variance) or an inverted momentum is rejected, what a module cannot
express is unsupported with the reason, the family guard, and assert_module_conforms' message.

Skipped, with the reason printed (pytest -rs), when PyTorch is not installed."""

import pytest

torch = pytest.importorskip(
    "torch", reason="bnconf.torch's tests need PyTorch (pip install torch)"
)
F = torch.nn.functional

import bnconf  # noqa: E402
import bnconf.torch  # noqa: E402

SYNC_OPS = ("sync_backward", "sync_stats")


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """One intra-op thread, as adapters/torch_bn.py runs (reports independent of core count)."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture(scope="module")
def bn2d_f32():
    return bnconf.torch.check_module(torch.nn.BatchNorm2d, dtype="float32", suite="default")


def test_batchnorm2d_conforms_on_default_suite_f32(bn2d_f32):
    r = bn2d_f32
    assert r.ok, r
    passed = {(c.op, c.layout) for c in r.conforming}
    for op in ("forward", "backward", "eval", "sync_forward"):
        for layout in ("nchw", "nhwc", "chw"):
            assert (op, layout) in passed, (op, layout)
    # the suite's pytorch-convention running updates are on chw and nhwc (nchw has onnx's)
    assert ("running_update", "chw") in passed and ("running_update", "nhwc") in passed
    assert r.summary["not_conforming"] == 0 and r.summary["malformed"] == 0


def test_unsupported_cases_say_why(bn2d_f32):
    reasons = {c.id: c.reason for c in bn2d_f32.unsupported}
    assert reasons
    for c in bn2d_f32.unsupported:
        r = c.reason
        assert r.startswith("BatchNorm2d: "), r
        if c.op in SYNC_OPS:
            assert "SyncBatchNorm's kernels" in r, r
        elif c.op == "running_update" and "convention" in r:
            assert r == "BatchNorm2d: PyTorch implements only the pytorch convention, not onnx"
        elif c.layout in ("rows", "flat", "nc", "ncl", "ncdhw", "ndhwc"):
            # [C, m] is viewed as [1, C, m] (BatchNorm1d's input); nc, ncl, ncdhw, ndhwc are
            # BatchNorm1d's and BatchNorm3d's ranks
            assert f"BatchNorm2d cannot take layout {c.layout}" in r and "expected 4D input" in r, r
        else:  # one value per channel in training mode: torch refuses, with its message
            assert "F.batch_norm refuses this case: Expected more than 1 value per channel" in r, r
    kinds = {c.op for c in bn2d_f32.unsupported}
    assert {"sync_backward", "sync_stats", "running_update"} <= kinds


def test_batchnorm1d_takes_rows_and_flat():
    r = bnconf.torch.check_module(
        torch.nn.BatchNorm1d, ops=["forward", "backward", "eval"], layouts=["rows", "flat"]
    )
    assert r.ok, r
    assert r.summary["conforming"] > 0
    assert all(c.layout in ("rows", "flat") for c in r.cases)


def test_batchnorm3d_takes_no_layout_of_this_bnconf():
    r = bnconf.torch.check_module(torch.nn.BatchNorm3d, ops=["eval"], layouts=["nchw"])
    assert not r.ok
    assert r.summary["conforming"] == 0 and r.unsupported
    assert all("BatchNorm3d cannot take layout nchw" in c.reason for c in r.unsupported)


def test_float64_conforms():
    r = bnconf.torch.check_module(
        torch.nn.BatchNorm2d, dtype="float64", ops=["forward", "backward", "running_update"],
        layouts=["nhwc"],
    )  # fmt: skip
    assert r.ok, r
    assert r.dtype == "f64" and r.summary["conforming"] > 0


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float16+float32", "bfloat16+float32"])
def test_half_and_mixed_precision_conform(dtype):
    r = bnconf.torch.check_module(
        torch.nn.BatchNorm2d, dtype=dtype, ops=["forward", "backward", "eval", "running_update"],
        layouts=["nhwc"],
    )  # fmt: skip
    assert r.ok, r
    assert r.summary["conforming"] > 0 and r.dtype == bnconf.normalize_dtype(dtype)


def test_users_own_batchnorm_through_a_callable():
    seen = []

    def build(case):
        seen.append(case.id)
        c = case.inputs["x"].shape[case.channel_axis]
        return torch.nn.BatchNorm2d(c, eps=case.eps)  # float32, bnconf sets momentum per case

    r = bnconf.torch.check_module(build, ops=["eval", "running_update"], layouts=["nchw"])
    assert r.ok, r
    assert seen and r.summary["conforming"] > 0


class UnbiasedBN(torch.nn.BatchNorm2d):
    """Defective: the training forward normalizes with Bessel's correction (m - 1)."""

    def forward(self, x):
        if not self.training:
            return super().forward(x)
        mean = x.mean(dim=(0, 2, 3), keepdim=True)
        var = x.var(dim=(0, 2, 3), keepdim=True, correction=1)
        shape = (1, -1, 1, 1)
        xhat = (x - mean) / torch.sqrt(var + self.eps)
        return self.weight.reshape(shape) * xhat + self.bias.reshape(shape)


class InvertedMomentumBN(torch.nn.BatchNorm2d):
    """Defective: torch's forward with the momentum inverted (ONNX's weight on the old value)."""

    def forward(self, x):
        return F.batch_norm(
            x, self.running_mean, self.running_var, self.weight, self.bias, self.training,
            1.0 - self.momentum, self.eps,
        )  # fmt: skip


def _own(cls):
    def build(case):
        return cls(case.inputs["x"].shape[case.channel_axis], eps=case.eps)

    build.__name__ = cls.__name__
    return build


@pytest.mark.filterwarnings("ignore:var\\(\\)")  # one value per channel: m - 1 = 0
def test_unbiased_variance_module_is_rejected():
    r = bnconf.torch.check_module(
        _own(UnbiasedBN), ops=["forward", "backward", "eval"], layouts=["nchw"]
    )
    assert not r.ok
    bad = {c.op for c in r.failures}
    assert "backward" in bad, r
    assert all(c.op == "backward" for c in r.failures)
    # its eval path is torch's own: conforms
    assert any(c.op == "eval" and c.ok for c in r.cases)
    # a forward it overrides returns only y: the statistics are not observable, never faked
    fwd = [c for c in r.cases if c.op == "forward"]
    assert fwd and all(c.verdict == "unsupported" for c in fwd)
    assert all("not observable" in c.reason for c in fwd)


def test_inverted_momentum_module_is_rejected():
    r = bnconf.torch.check_module(
        _own(InvertedMomentumBN), ops=["running_update", "eval"], layouts=["nhwc"]
    )
    assert not r.ok
    assert r.failures and all(c.op == "running_update" for c in r.failures)
    worst = r.failures[0].worst_output
    assert worst.name in ("new_mean", "new_var")
    assert any(c.op == "eval" and c.ok for c in r.cases)


def test_assert_module_conforms_names_the_worst_cases():
    with pytest.raises(AssertionError) as e:
        bnconf.torch.assert_module_conforms(
            _own(InvertedMomentumBN), ops=["running_update"], layouts=["nhwc"]
        )
    msg = str(e.value)
    assert "does not conform" in msg and "DOES NOT CONFORM" in msg
    assert "running_update.nhwc.f32." in msg and "worst ratio" in msg and "new_" in msg


def test_assert_module_conforms_returns_the_report():
    r = bnconf.torch.assert_module_conforms(torch.nn.BatchNorm2d, ops=["eval"], layouts=["nhwc"])
    assert r.ok and r.summary["conforming"] > 0


def test_module_without_running_stats_takes_no_handed_in_statistics():
    def build(case):
        c = case.inputs["x"].shape[case.channel_axis]
        return torch.nn.BatchNorm2d(c, eps=case.eps, track_running_stats=False)

    r = bnconf.torch.check_module(build, ops=["eval", "running_update"], layouts=["nchw"])
    assert not r.ok and r.summary["conforming"] == 0
    reasons = [c.reason for c in r.unsupported if c.op == "eval"]
    assert reasons and all("track_running_stats=False" in s for s in reasons)


def test_module_without_affine_cannot_take_gamma():
    def build(case):
        return torch.nn.BatchNorm2d(case.inputs["x"].shape[case.channel_axis], affine=False)

    r = bnconf.torch.check_module(build, ops=["backward"], layouts=["nchw"])
    assert r.summary["conforming"] == 0
    assert all("affine=False" in c.reason for c in r.unsupported)


def test_callable_returning_something_else_is_a_kernel_error():
    r = bnconf.torch.check_module(lambda case: "not a module", ops=["eval"], layouts=["nchw"])
    assert not r.ok and r.failures
    assert all("not a torch.nn.Module" in (c.reason or "") for c in r.failures)


@pytest.mark.parametrize(
    "cls, family",
    [("LayerNorm", "layer_norm"), ("GroupNorm", "group_norm"), ("InstanceNorm2d", "group_norm"),
     ("RMSNorm", "rms_norm")],
)  # fmt: skip
def test_family_modules_take_their_family_only(cls, family):
    # (their checks: test_torch_family.py)
    module = getattr(torch.nn, cls, None)
    if module is None:
        pytest.skip(f"this torch has no nn.{cls}")
    assert bnconf.torch.family_of(module) == family
    with pytest.raises(ValueError, match=f"{cls} is a {family} module"):
        bnconf.torch.check_module(module, family="batch_norm")
    with pytest.raises(ValueError, match="BatchNorm2d is a batch_norm module"):
        bnconf.torch.check_module(torch.nn.BatchNorm2d, family=family)


def test_other_arguments_are_refused():
    with pytest.raises(ValueError, match="not a torch.nn normalization class"):
        bnconf.torch.check_module(torch.nn.Linear)
    with pytest.raises(ValueError, match="family 'all'"):
        bnconf.torch.check_module(torch.nn.BatchNorm2d, family="all")
    with pytest.raises(TypeError, match="callable"):
        bnconf.torch.check_module(42)
    with pytest.raises(ValueError, match="ops"):  # "--ops: ..." (binary), "ops: ..." (in process)
        bnconf.torch.check_module(torch.nn.BatchNorm2d, ops=["no_such_op"])
