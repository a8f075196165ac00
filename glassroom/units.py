"""Counts with suffixes: read `18.75T`, `50K`, `1.6B`; print `46.7B`, `61.3M`, `46.7B-A12.9B`."""

from __future__ import annotations

import math
import re

from glassroom.numbers import MAX_FLOAT_CHARS, shown

_SUFFIX = {"": 1, "K": 10**3, "M": 10**6, "B": 10**9, "G": 10**9, "T": 10**12, "P": 10**15}
_COUNT = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([kKmMbBgGtTpP]?)\s*$")


def parse_count(value: int | float | str) -> float:
    """A count from a number or a string such as `18.75T`, `50K`, `1.6B`, `2e9`.

    Raises ValueError with the offending text when it is not a count.
    """
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is not a count")
    if isinstance(value, int):
        if abs(value) >= 2 ** 1023:
            raise ValueError(f"{shown(value)} is beyond a float's range")
        return float(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{value!r} is not a count")
        return value
    if not isinstance(value, str):
        raise ValueError(f"{shown(repr(value))} is not a count")
    if len(value) > MAX_FLOAT_CHARS:
        raise ValueError(f"{shown(value)} is not a count (at most {MAX_FLOAT_CHARS} characters)")
    match = _COUNT.match(value.replace("_", "").replace(",", ""))
    if not match:
        raise ValueError(f"{shown(value)} is not a count (use a number with an optional K, M, B or T)")
    count = float(match.group(1)) * _SUFFIX[match.group(2).upper()]
    if not math.isfinite(count):
        raise ValueError(f"{shown(value)} is not a finite count")
    return count


def format_count(value: float) -> str:
    """`8030261248` -> `8.0B`, `61_300_000` -> `61.3M`, `530e9` -> `530B`, `512` -> `512`,
    `2.4e31` -> `2.4e+31`."""
    value = float(value)
    if abs(value) >= 1e15:   # past a thousand T a suffix helps nobody: 2.4e+31
        return f"{value:.2g}"
    for suffix, scale in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if abs(value) >= scale:
            scaled = value / scale
            # Three significant figures at most, and one decimal below 100.
            text = f"{scaled:.0f}" if abs(scaled) >= 99.95 else f"{scaled:.1f}"
            return text + suffix
    return f"{value:.0f}" if value == int(value) else f"{value:.3g}"


def model_name(total_params: float, active_params: float) -> str:
    """`46.7B-A12.9B` for a model with sparse (MoE) activation, `8.0B` for a dense one."""
    total = format_count(total_params)
    if active_params >= total_params:
        return total
    return f"{total}-A{format_count(active_params)}"
