"""bfloat16 as numpy has no such dtype: the protocol stores bf16 arrays as ``<u2`` bit patterns
(``"bf16_storage": "u16-bits"`` in case.json). Kernels see float32 (exact: a bf16 is the top
half of a float32); their outputs are rounded to bf16 to nearest, ties to even, in one step
(no double rounding from float64)."""

from __future__ import annotations

import numpy as np


def bf16_bits_to_float32(bits) -> np.ndarray:
    """bf16 bit patterns (uint16, any shape) to the float32 values they denote (exact)."""
    b = np.asarray(bits)
    if b.dtype.kind not in "ui":
        raise TypeError(f"bf16 bit patterns must be an unsigned integer array, not {b.dtype}")
    u32 = (b.astype(np.uint32) & np.uint32(0xFFFF)) << np.uint32(16)
    return u32.view(np.float32)


def float32_bits_to_bf16_bits(u32) -> np.ndarray:
    """float32 bit patterns (uint32) to bf16 bit patterns, round to nearest, ties to even.
    Overflow gives ±inf; a NaN stays a (quiet) NaN with its sign."""
    u = np.asarray(u32, dtype=np.uint64)
    lsb = (u >> np.uint64(16)) & np.uint64(1)
    rounded = (u + np.uint64(0x7FFF) + lsb) >> np.uint64(16)
    nan = (u & np.uint64(0x7FFFFFFF)) > np.uint64(0x7F800000)
    quiet = (u >> np.uint64(16)) | np.uint64(0x0040)
    return np.where(nan, quiet, rounded).astype(np.uint16)


def float_to_bf16_bits(values) -> np.ndarray:
    """Floats (any real float dtype, any shape) to bf16 bit patterns (uint16), correctly
    rounded to nearest, ties to even, from the value given (float64 inputs are rounded once:
    to float32 with round-to-odd, which keeps the final rounding correct, then to bf16)."""
    x = np.asarray(values)
    if x.dtype == np.float32:
        return float32_bits_to_bf16_bits(np.ascontiguousarray(x).view(np.uint32))
    x = np.asarray(x, dtype=np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        t = x.astype(np.float32)
    t64 = t.astype(np.float64)
    bits = np.ascontiguousarray(t).view(np.uint32).copy()
    with np.errstate(invalid="ignore"):
        inexact = np.isfinite(x) & (t64 != x)
        away = inexact & (np.abs(t64) > np.abs(x))
    # Round to odd: truncate towards zero (one step back where RNE went away from zero,
    # inf becomes the largest finite float32), then set the last bit where inexact.
    bits[away] -= np.uint32(1)
    bits[inexact] |= np.uint32(1)
    return float32_bits_to_bf16_bits(bits)
