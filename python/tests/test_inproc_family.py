"""In-process judging of the normalization family (bnconf._native's FamilySuite/FamilyCase):
the inputs and case.json are what `bnconf export --family` writes, the verdicts, ratios and
whole reports are those of `bnconf check DIR` for the same outputs (built-in family kernels,
good and known-bad, on the default family suite in f32, f16 and bf16+f32), `bnconf.check(...,
family=)` gives the same report either way (kernel errors, unsupported cases, optional
statistics left out included), and `bnconf.judge` on single family cases."""

import json
import os
import subprocess

import numpy as np
import pytest

import bnconf
from test_family import numpy_family

if not bnconf.NATIVE:  # pragma: no cover - the wheel always has it
    pytest.skip("bnconf._native is not built", allow_module_level=True)

from bnconf import _native  # noqa: E402

EXE = bnconf.find_bnconf_bin()


def _bin(*args, ok=(0,)):
    p = subprocess.run([EXE, *args], capture_output=True, text=True)
    assert p.returncode in ok, (args, p.returncode, p.stderr)
    return p


def _export(tmp, dtype, family="all", *extra):
    d = str(tmp / f"suite-{family}-{dtype}")
    _bin("export", "--family", family, "--suite", "default", "--dtype", dtype, *extra, "--out", d)
    return d


@pytest.mark.parametrize("dtype", ["f32", "bf16+f32"])
def test_inputs_and_case_json_are_the_exported_ones(tmp_path, dtype):
    d = _export(tmp_path, dtype)
    s = _native.open_family_suite("all", "default", dtype)
    ids = json.load(open(os.path.join(d, "manifest.json")))["cases"]
    assert len(s) == len(ids) > 60
    for i in range(0, len(s), 3):
        nc = s.case(i)
        j = json.loads(nc.json())
        assert j["id"] == ids[i]
        assert j == json.load(open(os.path.join(d, ids[i], "case.json")))
        arrays = nc.inputs()
        assert sorted(n for n, *_ in arrays) == sorted(j["inputs"])
        for name, descr, shape, data in arrays:
            path = os.path.join(d, ids[i], name + ".npy")
            on_disk = np.load(path)
            assert on_disk.dtype.str == descr and list(on_disk.shape) == list(shape)
            assert open(path, "rb").read().endswith(data), (ids[i], name)


def _outputs_from_dir(case_dir, outputs):
    out = os.path.join(case_dir, "out")
    if os.path.exists(os.path.join(out, "unsupported")):
        return "unsupported", open(os.path.join(out, "unsupported")).read(), []
    arrays = []
    for name in outputs:
        p = os.path.join(out, name + ".npy")
        if os.path.exists(p):  # the optional statistics may be absent
            a = np.load(p)
            arrays.append((name, a.dtype.str, tuple(a.shape), a.tobytes()))
    return "outputs", "", arrays


@pytest.mark.parametrize(
    "dtype, kernel, conforms",
    [
        ("f32", "ln-twopass", True), ("f32", "bad-ln-onepass", False),
        ("f32", "gn-twopass", True), ("f32", "bad-gn-onepass", False),
        ("f32", "rms-twopass", True), ("f32", "bad-rms-offset-ignored", False),
        ("f16", "ln-half-f32acc", True), ("f16", "bad-rms-f16-sumsq-overflow", False),
        ("bf16+f32", "gn-twopass", True), ("bf16+f32", "bad-gn-var-doubled", False),
    ],
)  # fmt: skip
def test_same_report_as_bnconf_check_dir(tmp_path, dtype, kernel, conforms):
    # Every case of the default suite of every family: a built-in family kernel writes its
    # outputs (`bnconf kernel`), `bnconf check DIR` judges them, and the same outputs judged in
    # memory give the same verdicts, worst ratios, report document and printed report.
    d = _export(tmp_path, dtype)
    _bin("kernel", kernel, d)
    rpath = str(tmp_path / "report.json")
    p = _bin("check", d, "--report", rpath, ok=(0, 1))
    want = json.load(open(rpath))
    s = _native.open_family_suite("all", "default", dtype)
    assert len(s) == len(want["cases"]) > 60
    for i in range(len(s)):
        j = json.loads(s.case(i).json())
        verdict = s.judge(i, *_outputs_from_dir(os.path.join(d, j["id"]), j["outputs"]))
        assert verdict == want["cases"][i]["verdict"], j["id"]
    doc, text, ok = s.report()
    got = json.loads(doc)
    for g, w in zip(got["cases"], want["cases"]):
        assert (g["id"], g["verdict"], g["worst_ratio"], g["not_given"]) == (
            w["id"], w["verdict"], w["worst_ratio"], w["not_given"]
        )  # fmt: skip
    assert got == want
    assert text == p.stdout
    assert ok == (p.returncode == 0) == conforms, want["summary"]


def _flaky(case):
    """Breaks some cases the ways a kernel can: raises, declines, returns None, leaves out a
    required output, returns one of the wrong shape, leaves out the optional statistics."""
    if case.family == "rms_norm" and case.op == "rms_norm":
        raise ZeroDivisionError("kernel bug")
    if case.family == "rms_norm":
        raise bnconf.Unsupported("no rms backward")
    if case.layout == "nhwc":
        return None
    out = numpy_family(case, stats=case.layout != "nchw")
    if case.op == "group_norm_backward" and case.layout == "ncl":
        out.pop("dx")
    if case.op == "layer_norm" and case.normalized_ndim == 2:
        out["y"] = out["y"].reshape(-1)
    return out


@pytest.mark.parametrize(
    "kernel, kwargs",
    [
        (numpy_family, dict(family="layer_norm", dtype="float32")),
        (numpy_family, dict(family="all", dtype="bfloat16+float32", seed=5)),
        (lambda c: numpy_family(c, stats=False), dict(family="group_norm", dtype="float16")),
        (lambda c: numpy_family(c, var_factor=2.0), dict(family="rms_norm", dtype="float64")),
        (_flaky, dict(family="all", dtype="float32")),
        (_flaky, dict(family="all", dtype="float32", require_all=True)),
        (numpy_family, dict(family="group_norm", ops="group_norm", layouts=["nhwc", "nc"])),
    ],
)
def test_check_in_process_equals_the_binary(kernel, kwargs):
    a = bnconf.check(kernel, in_process=True, **kwargs)
    b = bnconf.check(kernel, in_process=False, **kwargs)
    assert a.json == b.json
    assert a.text == b.text and a.ok == b.ok and a.returncode == b.returncode
    assert str(a) == str(b)


def test_flaky_kernel_verdicts():
    r = bnconf.check(_flaky, family="all", in_process=True)
    assert not r.ok
    verdicts = {c.verdict for c in r.cases}
    assert {"malformed", "unsupported", "pass"} <= verdicts, verdicts
    reasons = " ".join(c.reason or "" for c in r.cases)
    assert "kernel error: ZeroDivisionError: kernel bug" in reasons
    assert "no rms backward" in reasons and "dx.npy: missing" in reasons
    ng = [c for c in r.json["cases"] if c["not_given"]]
    assert ng and all(c["id"].split(".")[1] == "nchw" for c in ng)


# ---------------------------------------------------------------------------------------------
# bnconf.judge on one family case.


@pytest.fixture(scope="module")
def ln_cases():
    cases = []
    bnconf.check(lambda c: cases.append(c), family="layer_norm", dtype="f32")
    return cases


def test_judge_one_family_case(ln_cases):
    fwd = [c for c in ln_cases if c.op == "layer_norm"]
    case = fwd[0]
    good = bnconf.judge(case, numpy_family(case))
    assert isinstance(good, bnconf.CaseReport)
    assert good.ok and good.verdict == "pass" and good.worst_ratio <= good.k
    assert {o.name for o in good.outputs} == {"y", "mean", "rstd"}
    only_y = bnconf.judge(case, numpy_family(case, stats=False))
    assert only_y.ok and {o.name for o in only_y.outputs} == {"y"}
    bad = bnconf.judge(case, numpy_family(case, var_factor=2.0))
    assert not bad.ok and bad.verdict == "fail" and bad.worst_ratio > bad.k
    text = str(bad)
    assert text.startswith(case.id) and "expected" in text, text
    assert bad.worst_output.name in ("y", "rstd")


def test_judge_one_family_case_malformed_and_unsupported(ln_cases):
    case = next(c for c in ln_cases if c.op == "layer_norm_backward" and "dgamma" in c.outputs)
    out = numpy_family(case)
    del out["dgamma"]
    r = bnconf.judge(case, out)
    assert r.verdict == "malformed" and not r.ok and "dgamma.npy: missing" in r.reason
    r = bnconf.judge(case, None)
    assert r.verdict == "unsupported" and not r.ok


# ---------------------------------------------------------------------------------------------
# The hypothesis strategy of family cases.

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402

import bnconf.hypothesis as bh  # noqa: E402

EXAMPLES = int(os.environ.get("BNCONF_HYPOTHESIS_EXAMPLES", "200"))
SETTINGS = dict(deadline=None, database=None, suppress_health_check=list(HealthCheck))


@pytest.mark.parametrize("family", ["layer_norm", "rms_norm", "group_norm"])
def test_numpy_family_kernel_passes_generated_cases(family):
    seen = []

    @settings(max_examples=max(EXAMPLES // 2, 30), **SETTINGS)
    @given(bh.cases(family=family))
    def prop(case):
        assert case.family == family
        seen.append((case.op, case.layout, case.class_))
        r = bnconf.judge(case, numpy_family(case))
        assert r.ok, r

    prop()
    assert len({op for op, _, _ in seen}) == 2 and len({cl for *_, cl in seen}) > 5, seen
    if family == "group_norm":
        assert len({lay for _, lay, _ in seen}) > 2


@pytest.mark.parametrize("dtype", ["bfloat16+float32", "float16"])
def test_numpy_family_kernel_passes_in_other_dtypes(dtype):
    @settings(max_examples=max(EXAMPLES // 4, 20), **SETTINGS)
    @given(bh.cases(family="group_norm", layouts="nhwc,nchw", dtype=dtype))
    def prop(case):
        assert case.dtype == dtype.split("+")[0] and case.layout in ("nhwc", "nchw")
        r = bnconf.judge(case, numpy_family(case))
        assert r.ok, r

    prop()


def _one_pass_ln(case):
    """Defective: layer_norm's variance as E[x²] - mean² in the case dtype (float32)."""
    out = numpy_family(case)
    if case.op != "layer_norm":
        return out
    x = case.inputs["x"]
    ax = case.reduce_axes
    mean = x.mean(axis=ax, keepdims=True)
    var = (x * x).mean(axis=ax, keepdims=True) - mean * mean
    with np.errstate(invalid="ignore"):  # a cancelled variance may come out negative
        y = (x - mean) / np.sqrt(var + x.dtype.type(case.eps))
    if "gamma" in case.inputs:
        y = y * case.inputs["gamma"]
    if "beta" in case.inputs:
        y = y + case.inputs["beta"]
    return {"y": y}


def test_defective_family_kernel_is_found_and_shrunk():
    seen = []

    @settings(max_examples=EXAMPLES, **SETTINGS)
    @given(bh.cases(family="layer_norm", ops=["layer_norm"]))
    def prop(case):
        seen.append(case)
        r = bnconf.judge(case, _one_pass_ln(case))
        assert r.ok, r

    with pytest.raises(AssertionError) as e:
        prop()
    assert "worst ratio" in str(e.value) and " in y[" in str(e.value), str(e.value)
    last = seen[-1]  # hypothesis replays the shrunk example last
    assert bnconf.judge(last, _one_pass_ln(last)).verdict == "fail"
    assert last.seed < 2**16, last.seed  # shrunk towards seed 0
    assert "offset" in last.class_ or "cancel" in last.class_, last.class_


def test_family_strategy_arguments():
    with pytest.raises(ValueError, match="ops: unknown name 'group_norm'"):
        bh.cases(family="layer_norm", ops=["group_norm"])
    with pytest.raises(ValueError, match="layouts: unknown name 'diagonal'"):
        bh.cases(family="group_norm", layouts="diagonal")
    with pytest.raises(ValueError, match="no case of ops"):
        bh.cases(family="rms_norm", layouts="nchw")
    with pytest.raises(ValueError, match="dtype"):
        bh.cases(family="rms_norm", dtype="int8")
