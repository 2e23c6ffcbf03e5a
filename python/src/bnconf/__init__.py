"""bnconf from Python: judge a BatchNorm kernel against bnconf's exact reference.

    import bnconf

    def kernel(case):                      # case.op, .layout, .shape, .dtype, .eps, .inputs, ...
        if case.op != "forward":
            return None                    # unsupported
        ...
        return {"y": y, "mean": mean, "var": var}

    report = bnconf.check(kernel, suite="default", dtype="float32")
    assert report.ok, report               # or: bnconf.assert_conforms(kernel)

``check`` judges in process through the extension module ``bnconf._native`` (the harness
library: no process or temporary directory per case); ``bnconf.judge(case, outputs)`` judges
one case, and ``bnconf.hypothesis.cases()`` is a hypothesis strategy of cases. The wheel also
installs the `bnconf` binary (``python -m bnconf``), which ``check(..., in_process=False)``
runs through the kernel directory protocol (docs/FORMAT.md).
"""

from ._bf16 import bf16_bits_to_float32, float32_bits_to_bf16_bits, float_to_bf16_bits
from ._check import (
    AXES,
    Case,
    Unsupported,
    assert_conforms,
    check,
    encode_output,
    load_case,
    run_suite_dir,
    write_outputs,
)
from ._dtypes import normalize_dtype
from ._inproc import NATIVE, CaseReport, judge
from ._find_bin import BnconfNotFoundError, find_bnconf_bin
from ._report import CaseResult, OutputResult, Report, fmt_ratio

try:
    from importlib.metadata import PackageNotFoundError, version as _version

    __version__ = _version("bnconf")
except PackageNotFoundError:  # running from a source tree, not installed
    __version__ = "unknown"



def __getattr__(name):
    # `bnconf.hypothesis` (needs the hypothesis package) is imported on first use.
    if name == "hypothesis":
        import importlib

        return importlib.import_module(".hypothesis", __name__)
    raise AttributeError(f"module 'bnconf' has no attribute {name!r}")


__all__ = [
    "AXES",
    "CaseReport",
    "NATIVE",
    "BnconfNotFoundError",
    "Case",
    "CaseResult",
    "OutputResult",
    "Report",
    "Unsupported",
    "assert_conforms",
    "bf16_bits_to_float32",
    "check",
    "find_bnconf_bin",
    "float32_bits_to_bf16_bits",
    "float_to_bf16_bits",
    "fmt_ratio",
    "judge",
    "encode_output",
    "load_case",
    "run_suite_dir",
    "write_outputs",
    "normalize_dtype",
]
