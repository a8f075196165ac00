"""Numbers read from text a user (or a stranger) wrote, bounded: one owner for every reader.

YAML (yaml_io's loader), JSON and JSON lines (`loads`), `--set key=value` (YAML) and the
command-line options (commands/__init__.py's argparse types) all read their numbers here:

- an integer has at most MAX_INT_DIGITS digits (Python refuses to convert more than 4,300 with a
  traceback, and nothing glassroom counts comes near 10**30);
- a float literal has at most MAX_FLOAT_CHARS characters and is finite: `1e400`, which a float
  would silently turn into infinity, is refused; so are JSON's `NaN` and `Infinity`;
- a whole-number option is at most MAX_OPTION_INT (2**63 - 1: what torch, numpy and SQLite hold).

Every refusal is a NumberError (a ValueError) whose message names the limit; callers add where.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

MAX_INT_DIGITS = 30
MAX_FLOAT_CHARS = 100
MAX_OPTION_INT = 2 ** 63 - 1

_INFINITE = re.compile(r"^\s*[+-]?(inf|infinity|\.inf)\s*$", re.IGNORECASE)


class NumberError(ValueError):
    """A number past the bounds above, or text that is not the number expected."""


def shown(text: str, limit: int = 24) -> str:
    """`text` for an error message, cut short: a 5,000-digit number is not echoed whole."""
    text = str(text)
    return repr(text) if len(text) <= limit else repr(text[:limit]) + f"... ({len(text):,} characters)"


def check_int_text(text: str) -> None:
    """NumberError when the integer literal `text` has more digits than MAX_INT_DIGITS."""
    digits = sum(ch.isalnum() for ch in text) - (1 if re.match(r"^\s*[+-]?0[xXoObB]", text) else 0)
    if digits > MAX_INT_DIGITS:
        raise NumberError(f"an integer of {digits:,} digits; numbers here have at most {MAX_INT_DIGITS} digits")


def check_float_text(text: str) -> None:
    """NumberError when the float literal `text` is longer than MAX_FLOAT_CHARS."""
    if len(text.strip()) > MAX_FLOAT_CHARS:
        raise NumberError(f"a number written with {len(text.strip()):,} characters; "
                          f"numbers here have at most {MAX_FLOAT_CHARS}")


def check_finite(value: float, text: str) -> float:
    """`value` (read from `text`), or NumberError when it is NaN or an infinity that `text` did not
    spell out (a literal such as 1e400 past a float's range, about 1.8e308)."""
    if math.isnan(value):
        raise NumberError(f"{shown(text)} is not a number (NaN)")
    if math.isinf(value) and not _INFINITE.match(text):
        raise NumberError(f"{shown(text)} is beyond a float's range (at most about 1.8e308)")
    return value


def parse_int(text: str) -> int:
    """An integer literal (decimal, with an optional sign and `_` separators), bounded."""
    check_int_text(text)
    try:
        return int(text)
    except ValueError:
        raise NumberError(f"{shown(text)} is not a whole number") from None


def parse_float(text: str) -> float:
    """A finite float literal, bounded (an explicit `inf` is kept: a caller decides whether it is allowed)."""
    check_float_text(text)
    try:
        value = float(text)
    except ValueError:
        raise NumberError(f"{shown(text)} is not a number") from None
    if math.isnan(value):
        raise NumberError(f"{shown(text)} is not a number (NaN)")
    return check_finite(value, text)


def _refuse_constant(name: str) -> Any:
    raise NumberError(f"{name} is not a number glassroom reads (give a finite number)")


def loads(text: str | bytes) -> Any:
    """json.loads with the bounds above: a 5,000-digit integer, 1e400, NaN or Infinity is a
    NumberError, like any malformed JSON (json.JSONDecodeError); both are ValueErrors."""
    try:
        return json.loads(text, parse_int=parse_int, parse_float=parse_float, parse_constant=_refuse_constant)
    except RecursionError:   # `[[[[...]]]]` thousands deep
        raise NumberError("nested too deeply (arrays or objects inside each other thousands of times)") from None


def option_int(text: str) -> int:
    """A whole-number command-line option: bounded digits, at most MAX_OPTION_INT in size."""
    value = parse_int(text.strip())
    if abs(value) > MAX_OPTION_INT:
        raise NumberError(f"{shown(text)} is too large (at most 2**63 - 1)")
    return value


def option_float(text: str) -> float:
    """A number command-line option: finite (no NaN, no infinity), bounded length."""
    value = parse_float(text.strip())
    if math.isinf(value):
        raise NumberError(f"{shown(text)} is not a finite number")
    return value
