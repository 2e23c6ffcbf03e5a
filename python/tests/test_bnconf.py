"""Tests of the bnconf Python package: a correct numpy kernel conforms, a defective one is
rejected with the worst cases named, unsupported and malformed results, dtype names, the
bfloat16 conversions, suite filters, and the binary's discovery.

The full default suite runs once per dtype (session fixtures); the other checks use
filtered suites to stay fast."""

import json
import math
import os
import subprocess
import sys
import tempfile

import numpy as np
import pytest

import bnconf

# ---------------------------------------------------------------------------------------------
# Kernels: a textbook two-pass numpy BatchNorm (ported from adapters/numpy_bn.py), a defective
# variant and one that supports nothing.


def _bcast(case, x):
    shape = [1] * x.ndim
    shape[case.channel_axis] = -1
    return lambda v: v.reshape(shape)


def sync_stats(inp):
    n, smean, sm2 = inp["shard_count"], inp["shard_mean"], inp["shard_m2"]  # [R], [C, R], [C, R]
    dt = smean.dtype.type
    live = n > 0
    total = n.sum()
    mean = np.where(live, n * smean, dt(0)).sum(axis=1) / total
    m2 = np.where(live, n * sm2, dt(0)).sum(axis=1) / total
    return {"mean": mean, "m2": m2, "var": m2 - mean * mean}


def numpy_bn(case, unbiased_forward=False):
    """Every op of the suite, in the case dtype, two-pass statistics."""
    inp = case.inputs
    if case.op == "sync_stats":
        return sync_stats(inp)
    x = inp["x"]
    dt = x.dtype.type
    axes = case.reduce_axes
    b = _bcast(case, x)
    eps = dt(case.eps)
    m = int(np.prod([x.shape[a] for a in axes]))

    if case.op == "forward":
        gamma, beta = inp["gamma"], inp["beta"]
        mean = x.mean(axis=axes, keepdims=True)
        var = x.var(axis=axes, keepdims=True)
        if unbiased_forward and m > 1:  # the defect: Bessel's correction in training forward
            var = var * dt(m) / dt(m - 1)
        y = b(gamma) * (x - mean) / np.sqrt(var + eps) + b(beta)
        return {"y": y, "mean": mean.reshape(-1), "var": var.reshape(-1)}

    if case.op == "backward":
        dy, gamma = inp["dy"], inp["gamma"]
        mean = x.mean(axis=axes, keepdims=True)
        var = x.var(axis=axes, keepdims=True)
        inv_std = 1 / np.sqrt(var + eps)
        xhat = (x - mean) * inv_std
        dbeta = dy.sum(axis=axes, keepdims=True)
        dgamma = (dy * xhat).sum(axis=axes, keepdims=True)
        dx = b(gamma) * inv_std / dt(m) * (dt(m) * dy - dbeta - xhat * dgamma)
        return {"dx": dx, "dgamma": dgamma.reshape(-1), "dbeta": dbeta.reshape(-1)}

    if case.op == "eval":
        gamma, beta, mean, var = inp["gamma"], inp["beta"], inp["mean"], inp["var"]
        return {"y": b(gamma) * (x - b(mean)) / np.sqrt(b(var) + eps) + b(beta)}

    if case.op == "sync_forward":
        gamma, beta, mean, m2 = inp["gamma"], inp["beta"], inp["mean"], inp["m2"]
        var = m2 - mean * mean
        return {"y": b(gamma) * (x - b(mean)) / np.sqrt(b(var) + eps) + b(beta)}

    if case.op == "sync_backward":
        dy, gamma, mean, m2 = inp["dy"], inp["gamma"], inp["mean"], inp["m2"]
        mean_dy, mean_dy_xhat = inp["mean_dy"], inp["mean_dy_xhat"]
        inv_std = 1 / np.sqrt(b(m2 - mean * mean) + eps)
        xhat = (x - b(mean)) * inv_std
        dx = b(gamma) * inv_std * (dy - b(mean_dy) - xhat * b(mean_dy_xhat))
        return {"dx": dx, "dgamma": (dy * xhat).sum(axis=axes), "dbeta": dy.sum(axis=axes)}

    if case.op == "running_update":
        rm, rv = inp["running_mean"], inp["running_var"]
        a, one = dt(case.momentum), dt(1)
        mean = x.mean(axis=axes)
        if case.convention == "pytorch":
            unbiased = x.var(axis=axes, ddof=1 if m > 1 else 0)
            return {"new_mean": (one - a) * rm + a * mean, "new_var": (one - a) * rv + a * unbiased}
        if case.convention == "onnx":
            var = x.var(axis=axes)
            return {"new_mean": a * rm + (one - a) * mean, "new_var": a * rv + (one - a) * var}
        return None

    return None  # an op this kernel does not know


def unbiased_forward_bn(case):
    """Defective: forward's variance divided by m-1 (Bessel) instead of m."""
    return numpy_bn(case, unbiased_forward=True)


def nothing_supported(case):
    return None


OPS = ["forward", "backward", "eval", "sync_forward", "sync_backward", "running_update", "sync_stats"]


# ---------------------------------------------------------------------------------------------
# The full default suite, once per dtype.


@pytest.fixture(scope="session")
def good_f32():
    return bnconf.check(numpy_bn, suite="default", dtype="float32")


@pytest.fixture(scope="session")
def good_f64():
    return bnconf.check(numpy_bn, suite="default", dtype="float64")


@pytest.fixture(scope="session")
def bad_forward():
    return bnconf.check(unbiased_forward_bn, dtype="float32", ops=["forward"])


@pytest.mark.parametrize("which", ["good_f32", "good_f64"])
def test_correct_kernel_conforms_on_default_suite(which, request):
    r = request.getfixturevalue(which)
    assert r.ok, r
    s = r.summary
    assert s["not_conforming"] == 0 and s["unsupported"] == 0
    assert s["conforming"] == len(r.cases) > 400
    assert 0 <= s["worst_ratio"] < 20 and isinstance(s["worst_ratio"], float)
    assert {c.op for c in r.cases} == set(OPS)
    assert {c.layout for c in r.cases} == set(bnconf.AXES)
    assert all(c.verdict == "pass" and c.ok for c in r.cases)
    assert r.failures == []
    assert "conforms" in str(r)


def test_report_fields(good_f32):
    r = good_f32
    assert r.suite == "default" and r.dtype == "f32"
    assert set(r.summary) >= {"conforming", "not_conforming", "unsupported", "worst_ratio"}
    c = r.cases[0]
    for key in ("id", "op", "layout", "dtype", "level", "class", "verdict", "worst_ratio", "outputs"):
        assert key in c.json, key
    assert c["id"] == c.id and c.class_ == c.klass == c.json["class"]
    assert c.dtype == "f32" and c.level in ("core", "conditioning", "range")
    assert c.outputs and all(isinstance(o.worst_ratio, float) for o in c.outputs)
    assert r.case(c.id) is c
    assert "summary" in r.text  # bnconf's own table


def test_defective_kernel_is_rejected(bad_forward):
    r = bad_forward
    assert not r.ok
    assert r.summary["not_conforming"] > 0
    assert all(c.op == "forward" for c in r.cases)
    worst = r.failures[0]
    assert worst.verdict == "fail" and worst.worst_ratio > worst.k
    assert worst.worst_output.name == "var"
    ratios = [c.worst_ratio for c in r.failures]
    assert ratios == sorted(ratios, reverse=True)  # worst first
    text = str(r)
    assert "DOES NOT CONFORM" in text and worst.id in text
    assert text.index(r.failures[0].id) < text.index(r.failures[1].id)


def test_assert_conforms_names_worst_cases():
    with pytest.raises(AssertionError) as e:
        bnconf.assert_conforms(unbiased_forward_bn, dtype="f32", ops="forward", layouts="nchw")
    msg = str(e.value)
    assert "forward.nchw.f32." in msg and "var[" in msg and "worst ratio" in msg
    listed = [line for line in msg.splitlines() if line.startswith("  forward.")]
    assert 1 <= len(listed) <= 10


def test_assert_conforms_returns_report_when_ok():
    r = bnconf.assert_conforms(numpy_bn, dtype="float64", ops=["eval"], layouts=["rows"])
    assert r.ok and r.summary["conforming"] > 0


def test_nothing_supported_is_not_ok():
    r = bnconf.check(nothing_supported, ops=["eval", "forward"], layouts=["rows"])
    assert not r.ok
    assert r.summary["conforming"] == 0 and r.summary["not_conforming"] == 0
    assert r.summary["unsupported"] == len(r.cases) > 0
    assert all(c.verdict == "unsupported" for c in r.cases)
    assert "no case was supported" in str(r)
    with pytest.raises(AssertionError, match="no case was supported"):
        bnconf.assert_conforms(nothing_supported, ops=["eval"], layouts=["rows"])


def test_partially_supported_and_require_all():
    def forward_only(case):
        if case.op != "forward":
            raise bnconf.Unsupported(f"only forward, not {case.op}")
        return numpy_bn(case)

    r = bnconf.check(forward_only, ops="forward,eval", layouts="chw")
    assert r.ok  # unsupported cases are listed, never conforming, not failing by default
    assert r.summary["unsupported"] > 0 and r.summary["conforming"] > 0
    assert all(c.reason == "only forward, not eval" for c in r.unsupported)
    r = bnconf.check(forward_only, ops="forward,eval", layouts="chw", require_all=True)
    assert not r.ok


def test_missing_output_is_malformed():
    def no_var(case):
        out = numpy_bn(case)
        del out["var"]
        return out

    r = bnconf.check(no_var, ops=["forward"], layouts=["rows"])
    assert not r.ok
    assert all(c.verdict == "malformed" and "var.npy" in c.reason for c in r.cases)
    assert "malformed" in str(r)


def test_wrong_return_type_raises():
    with pytest.raises(TypeError, match="dict of numpy arrays"):
        bnconf.check(lambda case: 42, ops=["eval"], layouts=["rows"])


def test_kernel_exception_is_reported_and_cleans_up(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    seen = []

    def broken(case):
        seen.append(case.id)
        if len(seen) == 3:
            raise ZeroDivisionError("kernel bug")
        return numpy_bn(case)

    r = bnconf.check(broken, ops=["eval"])
    assert len(seen) == r.summary["total"]  # the other cases still ran
    assert not r.ok
    bad = [c for c in r.cases if c.id == seen[2]]
    assert len(bad) == 1 and bad[0].verdict == "malformed", r
    assert bad[0].reason == "kernel error: ZeroDivisionError: kernel bug", bad[0].reason
    assert "kernel error: ZeroDivisionError: kernel bug" in str(r)
    assert all(c.verdict == "pass" for c in r.cases if c.id != seen[2]), r
    assert list(tmp_path.iterdir()) == []  # the temporary suite directory is gone


def test_outputs_are_cast_to_case_dtype():
    # A float64 computation handed back for f32 cases is rounded to float32 when written.
    def in_f64(case):
        case.inputs = {k: v.astype(np.float64) for k, v in case.inputs.items()}
        return numpy_bn(case)

    r = bnconf.check(in_f64, dtype="f32", ops=["eval", "forward"], layouts=["nhwc"])
    assert r.ok, r


# ---------------------------------------------------------------------------------------------
# Cases handed to the kernel.


def test_case_attributes():
    cases = []

    def record(case):
        cases.append(case)
        return numpy_bn(case)

    r = bnconf.check(record, dtype="float64", layouts=["nchw"])
    assert r.ok, r
    assert {c.op for c in cases} == set(OPS) - {"sync_stats"}  # sync_stats is rows only
    for c in cases:
        assert isinstance(c.shape, tuple) and len(c.shape) == 4
        assert c.dtype == "float64" and c.layout == "nchw"
        assert isinstance(c.eps, float) and isinstance(c.json, dict) and c.json["id"] == c.id
        assert c.level in ("core", "conditioning") and c.class_ == c.klass == c.json["class"]
        assert set(c.inputs) == set(c.json["inputs"])
        C = c.shape[1]
        for name, a in c.inputs.items():
            assert isinstance(a, np.ndarray) and a.dtype == np.float64
            assert a.shape == (c.shape if name in ("x", "dy") else (C,)), (c.id, name)
        if c.op == "running_update":
            assert isinstance(c.momentum, float) and 0 <= c.momentum <= 1
            assert c.convention in ("pytorch", "onnx")
        else:
            assert c.momentum is None and c.convention is None
    assert any(c.eps > 0 for c in cases)


def test_sync_stats_case_shapes():
    cases = []
    bnconf.check(lambda c: cases.append(c), ops=["sync_stats"])
    assert cases and all(c.layout == "rows" for c in cases)
    for c in cases:
        C, R = c.shape
        assert c.inputs["shard_count"].shape == (R,)
        assert c.inputs["shard_mean"].shape == c.inputs["shard_m2"].shape == (C, R)
        assert c.outputs == ["mean", "m2", "var"]


# ---------------------------------------------------------------------------------------------
# Filters and dtype names.


def test_ops_and_layouts_filters():
    r = bnconf.check(numpy_bn, dtype="f32", ops=["eval", "backward"], layouts=("rows", "nhwc"))
    assert r.ok, r
    assert {c.op for c in r.cases} == {"eval", "backward"}
    assert {c.layout for c in r.cases} == {"rows", "nhwc"}
    s = bnconf.check(numpy_bn, dtype="f32", ops="eval, backward", layouts="rows,nhwc")
    assert [c.id for c in s.cases] == [c.id for c in r.cases]


def test_unknown_filter_values_raise_value_error():
    with pytest.raises(ValueError, match="frobnicate"):
        bnconf.check(numpy_bn, ops=["frobnicate"])
    with pytest.raises(ValueError, match="diagonal"):
        bnconf.check(numpy_bn, layouts=["diagonal"])
    with pytest.raises(ValueError, match="nosuchsuite"):
        bnconf.check(numpy_bn, suite="nosuchsuite")
    with pytest.raises(ValueError):
        bnconf.check(numpy_bn, ops=[])


@pytest.mark.parametrize(
    "given, want",
    [
        ("float32", "f32"), ("f32", "f32"), ("FLOAT32", "f32"), (np.float32, "f32"),
        (np.dtype("float64"), "f64"), ("float64", "f64"), ("f64", "f64"), ("double", "f64"),
        ("float16", "f16"), ("f16", "f16"), ("half", "f16"), (np.float16, "f16"),
        ("bfloat16", "bf16"), ("bf16", "bf16"),
        ("float16+float32", "f16+f32"), ("f16+f32", "f16+f32"),
        ("bfloat16+float32", "bf16+f32"), ("bf16+f32", "bf16+f32"), ("bfloat16+f32", "bf16+f32"),
    ],
)  # fmt: skip
def test_dtype_aliases(given, want):
    assert bnconf.normalize_dtype(given) == want


@pytest.mark.parametrize("bad", ["int8", "float128x", "f32+f32+f32", "", np.int32])
def test_unknown_dtype_raises_value_error(bad):
    with pytest.raises(ValueError):
        bnconf.normalize_dtype(bad)
    with pytest.raises(ValueError):
        bnconf.check(numpy_bn, dtype=bad)


def test_dtype_alias_gives_same_suite():
    a = bnconf.check(numpy_bn, dtype="float64", ops=["sync_forward"], layouts=["flat"])
    b = bnconf.check(numpy_bn, dtype="f64", ops=["sync_forward"], layouts=["flat"])
    assert a.ok and b.ok
    assert [c.id for c in a.cases] == [c.id for c in b.cases]
    assert all(c.dtype == "f64" for c in a.cases)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float16+float32", "bf16+f32"])
def test_half_dtypes_run_or_are_refused_clearly(dtype):
    # bnconf gains the half dtypes over time: either it exports them (and the numpy kernel,
    # run in float32 where the inputs are bf16, gives a report), or it refuses with ValueError.
    try:
        r = bnconf.check(numpy_bn, dtype=dtype, ops=["eval"], layouts=["rows"])
    except ValueError as e:
        assert "dtype" in str(e)
    else:
        assert r.cases and r.summary["conforming"] + r.summary["not_conforming"] > 0


# ---------------------------------------------------------------------------------------------
# bfloat16 conversions.


def test_bf16_bits_to_float32():
    bits = np.array([0x0000, 0x8000, 0x3F80, 0xBF80, 0x4049, 0x7F80, 0xFF80, 0x0001, 0x7F7F], np.uint16)
    f = bnconf.bf16_bits_to_float32(bits)
    assert f.dtype == np.float32
    assert f[0] == 0 and not np.signbit(f[0]) and f[1] == 0 and np.signbit(f[1])
    assert f[2] == 1.0 and f[3] == -1.0 and f[4] == np.float32(3.140625)
    assert f[5] == np.inf and f[6] == -np.inf
    assert f[7] == np.float32(2.0**-133)  # smallest bf16 subnormal
    assert f[8] == np.float32((2 - 2.0**-7) * 2.0**127)  # largest finite bf16
    assert np.isnan(bnconf.bf16_bits_to_float32(np.array([0x7FC0], np.uint16)))[0]


@pytest.mark.parametrize(
    "value, bits",
    [
        (1.0, 0x3F80), (-2.0, 0xC000), (0.0, 0x0000), (-0.0, 0x8000),
        (1 + 2.0**-8, 0x3F80),                      # tie, even below: stays
        (1 + 3 * 2.0**-8, 0x3F82),                  # tie, odd below: rounds up to even
        (-(1 + 3 * 2.0**-8), 0xBF82),
        (1 + 2.0**-8 + 2.0**-30, 0x3F81),           # just above a tie (float64: not double-rounded)
        (1 + 2.0**-8 - 2.0**-30, 0x3F80),           # just below a tie
        (1 + 2.0**-8 + 2.0**-40, 0x3F81),           # above a tie by less than a float32 ulp
        (3.14159265, 0x4049),
        ((2 - 2.0**-8) * 2.0**127, 0x7F80),         # tie at the top: rounds to inf
        ((2 - 2.0**-8 - 2.0**-20) * 2.0**127, 0x7F7F),  # just below: largest finite
        (1e39, 0x7F80), (-1e300, 0xFF80),           # overflow
        (math.inf, 0x7F80), (-math.inf, 0xFF80),
        (2.0**-133, 0x0001),                        # smallest subnormal
        (2.0**-134, 0x0000),                        # half of it: tie to even (zero)
        (3 * 2.0**-134, 0x0002),                    # 1.5 ulp: tie to even (2)
        (2.0**-134 + 2.0**-160, 0x0001),            # above the tie in the subnormals
        (1e-300, 0x0000), (-1e-300, 0x8000),        # underflow keeps the sign
    ],
)  # fmt: skip
def test_float_to_bf16_bits_rounds_to_nearest_even(value, bits):
    got = bnconf.float_to_bf16_bits(np.array([value], dtype=np.float64))
    assert got.dtype == np.uint16 and int(got[0]) == bits, hex(int(got[0]))
    with np.errstate(over="ignore"):
        exact_in_f32 = float(np.float32(value)) == value
    if exact_in_f32:  # the float32 path agrees
        got32 = bnconf.float_to_bf16_bits(np.array([value], dtype=np.float32))
        assert int(got32[0]) == bits


def test_float_to_bf16_bits_nan_and_shape():
    x = np.array([[np.nan, -np.nan], [1.5, 2.5]], dtype=np.float64)
    b = bnconf.float_to_bf16_bits(x)
    assert b.shape == (2, 2)
    f = bnconf.bf16_bits_to_float32(b)
    assert np.isnan(f[0, 0]) and np.isnan(f[0, 1])
    assert f[1, 0] == 1.5 and f[1, 1] == 2.5
    assert bnconf.float32_bits_to_bf16_bits(np.array([0x7F800001], np.uint32))[0] & 0x7F80 == 0x7F80


def test_float_to_bf16_bits_matches_exact_rounding_on_random_values():
    rng = np.random.default_rng(7)
    x = rng.standard_normal(5000) * 10.0 ** rng.integers(-40, 38, 5000)
    got = bnconf.float_to_bf16_bits(x).astype(np.int64)
    # Reference: the two bf16 neighbours of x (truncation and the next one up), pick the
    # nearer, ties to the even pattern.
    lo = (np.abs(x).astype(np.float32).view(np.uint32) >> 16).astype(np.int64)
    too_big = bnconf.bf16_bits_to_float32(lo.astype(np.uint16)).astype(np.float64) > np.abs(x)
    lo = np.where(too_big, lo - 1, lo)
    hi = lo + 1
    vlo = bnconf.bf16_bits_to_float32(lo.astype(np.uint16)).astype(np.float64)
    vhi = bnconf.bf16_bits_to_float32(hi.astype(np.uint16)).astype(np.float64)
    dlo, dhi = np.abs(x) - vlo, vhi - np.abs(x)
    mag = np.where(dlo < dhi, lo, np.where(dhi < dlo, hi, np.where(lo % 2 == 0, lo, hi)))
    want = mag | np.where(x < 0, 0x8000, 0)
    assert np.array_equal(got, want)


def _write_case(d, case_json, arrays):
    os.makedirs(d)
    with open(os.path.join(d, "case.json"), "w") as f:
        json.dump(case_json, f)
    for k, v in arrays.items():
        np.save(os.path.join(d, k + ".npy"), v)


def test_bf16_case_roundtrip(tmp_path):
    # A case as bnconf will export it for bf16 (u16 bit patterns), read, then written back.
    d = str(tmp_path / "eval.rows.bf16.x")
    x_bits = bnconf.float_to_bf16_bits(np.array([[1.0, 2.0, 3.0], [-1.0, 0.5, 0.25]]))
    c_bits = bnconf.float_to_bf16_bits(np.array([1.0, 2.0]))
    cj = {"format": "bnconf-case/1", "id": "eval.rows.bf16.x", "op": "eval", "layout": "rows",
          "shape": [2, 3], "dtype": "bf16", "bf16_storage": "u16-bits", "eps": 0.001,
          "inputs": ["x", "gamma", "beta", "mean", "var"], "outputs": ["y"]}  # fmt: skip
    _write_case(d, cj, {"x": x_bits, "gamma": c_bits, "beta": c_bits, "mean": c_bits, "var": c_bits})
    case = bnconf.load_case(d)
    assert case.dtype == "bfloat16" and case.param_dtype == "bfloat16"
    assert case.inputs["x"].dtype == np.float32
    assert case.inputs["x"][0].tolist() == [1.0, 2.0, 3.0]
    # float64 output, rounded once to bf16 (1 + 3*2^-8 is a tie: to even, 0x3F82)
    y = np.full((2, 3), 1 + 3 * 2.0**-8)
    bnconf.write_outputs(d, case, {"y": y})
    out = np.load(os.path.join(d, "out", "y.npy"))
    assert out.dtype == np.dtype("<u2") and out.shape == (2, 3) and (out == 0x3F82).all()


def test_mixed_dtype_case(tmp_path):
    # Mixed precision: data in float16, per-channel arrays (and outputs) in float32.
    d = str(tmp_path / "forward.rows.f16+f32.x")
    cj = {"format": "bnconf-case/1", "id": "forward.rows.f16+f32.x", "op": "forward",
          "layout": "rows", "shape": [2, 2], "dtype": "f16", "param_dtype": "f32", "eps": 1e-5,
          "inputs": ["x", "gamma", "beta"], "outputs": ["y", "mean", "var"]}  # fmt: skip
    _write_case(d, cj, {"x": np.array([[1, 2], [3, 5]], "<f2"), "gamma": np.ones(2, "<f4"),
                        "beta": np.zeros(2, "<f4")})  # fmt: skip
    case = bnconf.load_case(d)
    assert case.dtype == "float16" and case.param_dtype == "float32"
    assert case.inputs["x"].dtype == np.float16 and case.inputs["gamma"].dtype == np.float32
    x = case.inputs["x"].astype(np.float64)
    mean, var = x.mean(axis=1), x.var(axis=1)
    y = (x - mean[:, None]) / np.sqrt(var[:, None] + case.eps)
    bnconf.write_outputs(d, case, {"y": y, "mean": mean, "var": var})

    def load(n):
        return np.load(os.path.join(d, "out", n + ".npy"))

    assert load("y").dtype == np.float16 and load("mean").dtype == np.float32
    assert load("var").dtype == np.float32 and load("var").tolist() == [0.25, 1.0]
    # "dtype": "bf16+f32" spelled in one field
    cj2 = dict(cj, id="b", dtype="bf16+f32")
    del cj2["param_dtype"]
    case2 = bnconf.Case(cj2, {})
    assert (case2.dtype, case2.param_dtype) == ("bfloat16", "float32")
    assert case2.output_dtype("y") == "bf16" and case2.output_dtype("mean") == "f32"


# ---------------------------------------------------------------------------------------------
# The binary.


def test_binary_is_found_and_runs():
    exe = bnconf.find_bnconf_bin()
    assert os.path.isfile(exe) and os.access(exe, os.X_OK)
    p = subprocess.run([exe, "--version"], capture_output=True, text=True)
    assert p.returncode == 0 and p.stdout.startswith("bnconf ")
    # One version number: the package's is the binary's (both from the workspace Cargo.toml).
    assert p.stdout.split()[1] == bnconf.__version__, (p.stdout, bnconf.__version__)


def test_python_m_bnconf_passes_through():
    p = subprocess.run([sys.executable, "-m", "bnconf", "--version"], capture_output=True, text=True)
    assert p.returncode == 0 and p.stdout.startswith("bnconf "), p.stderr
    p = subprocess.run([sys.executable, "-m", "bnconf", "export", "--dtype", "int8", "--out", "x"],
                       capture_output=True, text=True)  # fmt: skip
    assert p.returncode == 2 and "--dtype" in p.stderr


def test_bnconf_bin_override(monkeypatch, tmp_path):
    real = bnconf.find_bnconf_bin()
    monkeypatch.setenv("BNCONF_BIN", real)
    assert bnconf.find_bnconf_bin() == os.path.abspath(real)
    monkeypatch.setenv("BNCONF_BIN", str(tmp_path / "no-such-bnconf"))
    with pytest.raises(bnconf.BnconfNotFoundError, match="BNCONF_BIN"):
        bnconf.find_bnconf_bin()
    with pytest.raises(FileNotFoundError):
        bnconf.check(numpy_bn, ops=["eval"])


def test_example_passes():
    import importlib.util

    path = os.path.join(os.path.dirname(__file__), os.pardir, "examples", "test_example_kernel.py")
    spec = importlib.util.spec_from_file_location("bnconf_example", path)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    example.test_my_batchnorm_conforms("float32")
    example.test_report_by_hand()
