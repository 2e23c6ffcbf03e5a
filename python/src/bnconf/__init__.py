"""bnconf from Python: judge a BatchNorm kernel against bnconf's exact reference.

    import bnconf

    def kernel(case):                      # case.op, .layout, .shape, .dtype, .eps, .inputs, ...
        if case.op != "forward":
            return None                    # unsupported
        ...
        return {"y": y, "mean": mean, "var": var}

    report = bnconf.check(kernel, suite="default", dtype="float32")
    assert report.ok, report               # or: bnconf.assert_conforms(kernel)

The wheel installs the `bnconf` binary; ``check`` runs it through the kernel directory
protocol (docs/FORMAT.md): ``bnconf export``, your kernel on every case, ``bnconf check``.
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
    write_outputs,
)
from ._dtypes import normalize_dtype
from ._find_bin import BnconfNotFoundError, find_bnconf_bin
from ._report import CaseResult, OutputResult, Report, fmt_ratio

try:
    from importlib.metadata import PackageNotFoundError, version as _version

    __version__ = _version("bnconf")
except PackageNotFoundError:  # running from a source tree, not installed
    __version__ = "unknown"

__all__ = [
    "AXES",
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
    "encode_output",
    "load_case",
    "write_outputs",
    "normalize_dtype",
]
