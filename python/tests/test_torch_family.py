"""Tests of `bnconf.torch` on the normalization family: torch.nn.LayerNorm, RMSNorm, GroupNorm
and InstanceNorm2d conform on the default family suites (the statistics of torch's own
LayerNorm/GroupNorm judged, RMSNorm's offset convention and InstanceNorm's groups != C
unsupported with the reason), mixed precision as adapters/torch_family.py finds it (LayerNorm's
backward sums the float32 dgamma/dbeta in the half type), and users' own modules through a
callable: a one-pass-variance LayerNorm and one without eps are rejected naming the output,
a Gemma-style offset RMSNorm conforms on the offset cases.

Skipped, with the reason printed (pytest -rs), when PyTorch is not installed."""

import pytest

torch = pytest.importorskip(
    "torch", reason="bnconf.torch's tests need PyTorch (pip install torch)"
)
nn = torch.nn

import bnconf  # noqa: E402
import bnconf.torch  # noqa: E402


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """One intra-op thread, as adapters/torch_family.py runs (ratios independent of cores)."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def _judged(report, case_id):
    """Names of the outputs judged for a case (from the report document)."""
    c = next(c for c in report.json["cases"] if c["id"] == case_id)
    return {o["name"] for o in c.get("outputs") or []}, c.get("not_given") or []


def test_layer_norm_conforms_on_default_suite_f32():
    r = bnconf.torch.check_module(nn.LayerNorm, dtype="float32")
    assert r.ok, r
    assert r.summary["unsupported"] == 0 and r.summary["conforming"] > 15
    ops = {c.op for c in r.conforming}
    assert ops == {"layer_norm", "layer_norm_backward"}
    # torch's own LayerNorm: its statistics (native_layer_norm's, the kernel its forward runs)
    # are judged too
    fwd = [c for c in r.cases if c.op == "layer_norm"]
    for c in fwd:
        judged, not_given = _judged(r, c.id)
        assert judged == {"y", "mean", "rstd"} and not not_given, (c.id, judged)
    same = bnconf.torch.check_module(nn.LayerNorm, family="layer_norm", dtype="float32")
    assert same.json == r.json


def test_modules_are_built_from_the_case():
    # every affine of the suite: weight_bias, weight (bias=False), none (elementwise_affine=False)
    seen = {}

    def build(case):
        m = bnconf.torch.build_module(nn.LayerNorm, case)
        seen[case.affine] = m
        assert tuple(m.normalized_shape) == case.inputs["x"].shape[-case.normalized_ndim:]
        assert m.eps == case.eps
        return m

    r = bnconf.torch.check_module(build, family="layer_norm")
    assert r.ok, r
    assert set(seen) == {"weight_bias", "weight", "none"}, set(seen)
    assert seen["weight_bias"].bias is not None and seen["weight"].bias is None
    assert seen["none"].weight is None
    g = bnconf.torch.build_module(nn.GroupNorm, next(iter(_cases("group_norm"))))
    assert isinstance(g, nn.GroupNorm) and g.num_groups >= 1


def _cases(family):
    out = []
    bnconf.check(lambda c: out.append(c), family=family)
    return out


def test_group_norm_conforms_channels_last_included():
    r = bnconf.torch.check_module(nn.GroupNorm, dtype="float32")
    assert r.ok, r
    assert r.summary["unsupported"] == 0
    layouts = {c.layout for c in r.conforming}
    assert {"nchw", "nhwc"} <= layouts, layouts


def test_rms_norm_conforms_and_says_why_offset_is_unsupported():
    r = bnconf.torch.check_module(nn.RMSNorm, dtype="float32")
    assert r.ok, r
    assert r.unsupported
    for c in r.unsupported:
        assert c.id.split(".")[0] in ("rms_norm", "rms_norm_backward")
        assert "convention standard" in c.reason and "offset" in c.reason, c.reason
    # nn.RMSNorm's forward returns y only: rstd is not given (never recomputed by bnconf)
    fwd = [c for c in r.conforming if c.op == "rms_norm"]
    assert fwd
    for c in fwd:
        judged, not_given = _judged(r, c.id)
        assert judged == {"y"} and not_given == ["rstd"], (judged, not_given)


def test_instance_norm_takes_the_groups_equal_c_cases():
    r = bnconf.torch.check_module(nn.InstanceNorm2d, dtype="float32")
    assert r.summary["not_conforming"] == 0 and r.conforming, r
    for c in r.unsupported:
        assert (
            "InstanceNorm normalizes each channel" in c.reason
            or "Expected more than 1 spatial element" in c.reason
            or "InstanceNorm2d takes [N, C, ...] of rank 4" in c.reason
        ), c.reason
    for c in r.conforming:
        assert c.layout in ("nchw", "nhwc"), c.id


@pytest.mark.parametrize("dtype", ["float64", "float16", "bfloat16"])
def test_family_classes_conform_in_other_dtypes(dtype):
    for cls in (nn.LayerNorm, nn.GroupNorm, nn.RMSNorm):
        r = bnconf.torch.check_module(cls, dtype=dtype)
        assert r.ok, r


def test_mixed_precision_layer_norm_backward_sums_in_the_half_type():
    # adapters/torch_family.py's finding: the float32 dgamma/dbeta of layer_norm_backward are
    # summed over the rows in the half type; the forward and GroupNorm conform.
    r = bnconf.torch.check_module(nn.LayerNorm, dtype="bfloat16+float32")
    assert not r.ok
    assert r.failures and all(c.op == "layer_norm_backward" for c in r.failures)
    assert {c.worst_output.name for c in r.failures} <= {"dgamma", "dbeta"}
    assert any(c.op == "layer_norm" and c.ok for c in r.cases)
    g = bnconf.torch.check_module(nn.GroupNorm, dtype="float16+float32")
    assert g.ok, g


# ---------------------------------------------------------------------------------------------
# Users' own modules through a callable case -> nn.Module.


class OnePassLayerNorm(nn.LayerNorm):
    """Defective: variance as E[x²] - mean² in the input dtype (float32)."""

    def forward(self, x):
        k = len(self.normalized_shape)
        dims = tuple(range(x.dim() - k, x.dim()))
        mean = x.mean(dims, keepdim=True)
        var = (x * x).mean(dims, keepdim=True) - mean * mean
        y = (x - mean) / torch.sqrt(var + self.eps)
        if self.weight is not None:
            y = y * self.weight
        if self.bias is not None:
            y = y + self.bias
        return y


class NoEpsLayerNorm(nn.LayerNorm):
    """Defective: torch's layer_norm with eps dropped."""

    def forward(self, x):
        return nn.functional.layer_norm(x, self.normalized_shape, self.weight, self.bias, 0.0)


def _own_ln(cls):
    def build(case):
        shape = case.inputs["x"].shape[-case.normalized_ndim:]
        return cls(shape, eps=case.eps, elementwise_affine=case.affine != "none",
                   bias=case.affine == "weight_bias")  # fmt: skip

    build.__name__ = cls.__name__
    return build


def test_one_pass_layer_norm_is_rejected_naming_y():
    r = bnconf.torch.check_module(_own_ln(OnePassLayerNorm), family="layer_norm")
    assert not r.ok
    assert r.failures and {c.op for c in r.failures} <= {"layer_norm", "layer_norm_backward"}
    fwd = [c for c in r.failures if c.op == "layer_norm"]
    assert fwd and all(c.worst_output.name == "y" for c in fwd)
    assert any("cancel" in c.class_ or "offset" in c.class_ for c in fwd), [c.id for c in fwd]
    # its own forward: the statistics are not observable, so not given (never faked)
    for c in r.cases:
        if c.op == "layer_norm" and c.verdict in ("pass", "fail"):
            assert _judged(r, c.id)[1] == ["mean", "rstd"]


def test_layer_norm_without_eps_is_rejected():
    with pytest.raises(AssertionError) as e:
        bnconf.torch.assert_module_conforms(_own_ln(NoEpsLayerNorm), family="layer_norm")
    msg = str(e.value)
    assert "NoEpsLayerNorm does not conform" in msg and "DOES NOT CONFORM" in msg
    assert "layer_norm" in msg and "worst ratio" in msg


class OffsetRMSNorm(nn.Module):
    """Gemma's RMSNorm: (1 + weight)·x·rstd."""

    def __init__(self, shape, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(shape))
        self.eps = eps

    def forward(self, x):
        dims = tuple(range(x.dim() - self.weight.dim(), x.dim()))
        rstd = torch.rsqrt((x.double() ** 2).mean(dims, keepdim=True) + self.eps)
        return ((1 + self.weight.double()) * x.double() * rstd).to(x.dtype)


def test_users_offset_rms_norm_through_a_callable():
    conventions = {}

    def build(case):
        conventions[case.id] = case.convention
        shape = case.inputs["x"].shape[-case.normalized_ndim:]
        if case.convention == "offset":
            return OffsetRMSNorm(shape, case.eps)
        return nn.RMSNorm(shape, eps=case.eps, elementwise_affine=case.affine != "none")

    r = bnconf.torch.check_module(build, family="rms_norm")
    assert r.ok, r
    assert r.summary["unsupported"] == 0
    assert {conventions[c.id] for c in r.conforming} == {"standard", "offset"}

    # the Gemma module on every case: the standard cases fail
    wrong = bnconf.torch.check_module(
        lambda case: OffsetRMSNorm(case.inputs["x"].shape[-case.normalized_ndim:], case.eps),
        family="rms_norm", ops=["rms_norm"],
    )  # fmt: skip
    assert not wrong.ok and wrong.failures


def test_module_without_weight_cannot_take_gamma():
    def build(case):
        return nn.LayerNorm(case.inputs["x"].shape[-case.normalized_ndim:], eps=case.eps,
                            elementwise_affine=False)  # fmt: skip

    r = bnconf.torch.check_module(build, family="layer_norm", ops=["layer_norm_backward"])
    reasons = [c.reason for c in r.unsupported]
    assert reasons and all("no weight" in s or "no bias" in s for s in reasons), reasons
    assert r.summary["not_conforming"] == 0


def test_family_arguments():
    with pytest.raises(ValueError, match="LayerNorm is a layer_norm module"):
        bnconf.torch.check_module(nn.LayerNorm, family="group_norm")
    with pytest.raises(ValueError, match="family 'all'"):
        bnconf.torch.check_module(nn.LayerNorm, family="all")
    with pytest.raises(ValueError, match="--ops"):
        bnconf.torch.check_module(nn.LayerNorm, ops=["group_norm"])
    m = bnconf.torch.module_kernel(nn.GroupNorm)
    assert m.bnconf_family == "group_norm"
