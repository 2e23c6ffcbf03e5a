"""dtype names: numpy's ("float32", "bfloat16", "float16+float32") and bnconf's ("f32",
"bf16", "f16+f32")."""

from __future__ import annotations

import numpy as np

# bnconf name -> numpy name
NUMPY_NAME = {"f64": "float64", "f32": "float32", "f16": "float16", "bf16": "bfloat16"}

_ALIASES = {
    "f64": "f64", "float64": "f64", "double": "f64",
    "f32": "f32", "float32": "f32", "single": "f32",
    "f16": "f16", "float16": "f16", "half": "f16",
    "bf16": "bf16", "bfloat16": "bf16",
}  # fmt: skip

# Little-endian storage of each dtype in the protocol's npy files (bf16: bit patterns).
STORAGE = {"f64": "<f8", "f32": "<f4", "f16": "<f2", "bf16": "<u2"}


def _one(name) -> str:
    if not isinstance(name, str):
        # numpy dtypes and scalar types (np.float32, np.dtype("float64"), ml_dtypes.bfloat16)
        try:
            name = np.dtype(name).name
        except TypeError:
            name = getattr(name, "__name__", repr(name))
    key = name.strip().lower()
    if key not in _ALIASES:
        raise ValueError(
            f"unknown dtype {name!r}: use float32, float64, float16, bfloat16 (or f32, f64, "
            "f16, bf16), or a mixed data+param pair such as float16+float32 / bf16+f32"
        )
    return _ALIASES[key]


def normalize_dtype(dtype) -> str:
    """bnconf's name of a dtype: ``"float32"`` → ``"f32"``, ``"bfloat16+float32"`` →
    ``"bf16+f32"``, ``np.float64`` → ``"f64"``. Raises ValueError for anything else."""
    if isinstance(dtype, str) and "+" in dtype:
        parts = dtype.split("+")
        if len(parts) != 2:
            raise ValueError(f"dtype {dtype!r}: a mixed dtype is DATA+PARAM, e.g. float16+float32")
        data, param = (_one(p) for p in parts)
        return f"{data}+{param}"
    return _one(dtype)


def split_case_dtype(case_json: dict) -> tuple[str, str]:
    """(data dtype, param dtype) in bnconf names from a case.json: ``"dtype": "f16+f32"`` or
    ``"dtype": "f16", "param_dtype": "f32"``; param = data when not mixed."""
    d = normalize_dtype(case_json["dtype"])
    if "+" in d:
        data, param = d.split("+")
    else:
        data = param = d
    if case_json.get("param_dtype"):
        param = normalize_dtype(case_json["param_dtype"])
    return data, param
