"""Numbers in node output, ASCII only.

Python's ``int()`` and ``str.isdigit()`` accept any Unicode digit (``'١'``,
``'²'``) and ``int()`` accepts ``1_000``; ``float()`` accepts ``nan`` and
``inf``. No tool or kernel file ccrhost reads prints those, so a value that
has them is not a reading, and every probe parses through these helpers.
"""

from __future__ import annotations

import math
import re

_INT = re.compile(r"[+-]?[0-9]{1,19}")
_UNSIGNED = re.compile(r"[0-9]{1,19}")
_DECIMAL = re.compile(r"[+-]?[0-9]{1,19}(?:\.[0-9]{1,19})?")
_PRINTF = re.compile(r"[+-]?[0-9]{1,19}(?:\.[0-9]{0,19})?(?:[eE][+-]?[0-9]{1,3})?")


def integer(text: str, lo: int | None = None, hi: int | None = None) -> int | None:
    """``text`` (surrounding white space allowed) as an int within [lo, hi], else None."""
    value = text.strip()
    # most readings are plain ASCII digits: the regex only for the rest
    if not (value.isascii() and value.isdigit() and len(value) <= 19) and not _INT.fullmatch(value):
        return None
    number = int(value)
    if (lo is not None and number < lo) or (hi is not None and number > hi):
        return None
    return number


def _finite(pattern: re.Pattern, text: str, lo: float | None) -> float | None:
    """``text`` as a finite float >= lo when it matches ``pattern`` whole, else None."""
    value = text.strip()
    if not pattern.fullmatch(value):
        return None
    number = float(value)
    if not math.isfinite(number) or (lo is not None and number < lo):
        return None
    return number


def decimal(text: str, lo: float | None = None) -> float | None:
    """``text`` as a finite decimal (no exponent, nan or inf) >= lo, else None."""
    return _finite(_DECIMAL, text, lo)


def printf_float(text: str, lo: float | None = None) -> float | None:
    """``text`` as C's ``%f``/``%e``/``%g`` print a finite double (``1e+06``,
    ``1.7e+07``, ``2e-07``) >= lo, else None: for tools that switch to an
    exponent when a value outgrows its column."""
    return _finite(_PRINTF, text, lo)


def unsigned(text: str, hi: int | None = None) -> int | None:
    """``text`` as the kernel's ``%u`` prints it (ASCII digits, no sign;
    surrounding white space allowed) within [0, hi], else None: a count,
    a width, a byte, a version part."""
    value = text.strip()
    if not _UNSIGNED.fullmatch(value):
        return None
    number = int(value)
    return number if hi is None or number <= hi else None
