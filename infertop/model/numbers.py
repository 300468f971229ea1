"""The numbers a recording may hold: what a writer can produce, nothing a report or an export
cannot carry. NaN, infinities and absurd magnitudes (a damaged or hand-made file) would
otherwise reach ``report --format json`` as invalid JSON or overflow an export's integer
timestamps; the decoders turn them into ``ValueError``, i.e. a damaged record."""

from __future__ import annotations

import math
from typing import Any

#: |x| of any number (times in unix s, durations in µs, utilisations, watts): 1e15 µs is 31 years
MAX_NUMBER = 1e15
#: any integer (ids, counts, bytes) fits a signed 64-bit one: what numpy and traces carry
#: (Kineto's thread ids can be pthread handles or 64-bit hashes)
MIN_INTEGER, MAX_INTEGER = -(2**63), 2**63 - 1


def bounded_float(x: float) -> float:
    if not (math.isfinite(x) and -MAX_NUMBER <= x <= MAX_NUMBER):
        raise ValueError(f"number out of range: {x!r}")
    return x


def bounded_int(n: int) -> int:
    if not MIN_INTEGER <= n <= MAX_INTEGER:
        raise ValueError(f"integer out of range: {n!r}")
    return n


def real(x: Any) -> float:
    """A 1.0-style lenient float field (``float()`` of it), bounded."""
    return bounded_float(float(x))


def whole(x: Any) -> int:
    """A 1.0-style lenient integer field (``int()`` of it), bounded."""
    return bounded_int(int(x))
