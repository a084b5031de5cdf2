"""Parse human units in configuration: durations (``10s``, ``5m``) and sizes (``64KiB``)."""

from __future__ import annotations

import re

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$")
_DURATION_FACTORS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, None: 1.0}
MAX_DURATION = 3650 * 86400.0
"""The longest duration (ten years): a deadline or an expiry made of a longer one would not
fit the store's 64-bit milliseconds."""
_SIZE = re.compile(r"^\s*(\d+)\s*(B|KB|KiB|MB|MiB|GB|GiB)?\s*$")
_SIZE_FACTORS = {
    None: 1,
    "B": 1,
    "KB": 1000,
    "KiB": 1024,
    "MB": 1000**2,
    "MiB": 1024**2,
    "GB": 1000**3,
    "GiB": 1024**3,
}


def parse_duration(value: object, *, zero: bool = False) -> float:
    """Seconds from ``10``, ``10s``, ``250ms``, ``5m``, ``24h``, ``1d``; positive, or also
    ``0`` with ``zero`` (a setting where 0 means "never" or "not at all")."""
    if isinstance(value, bool):
        raise ValueError("a duration is a number of seconds or a string like '10s'")
    if isinstance(value, int | float):
        seconds = float(value)
    else:
        match = _DURATION.match(str(value))
        if not match:
            raise ValueError(f"{value!r} is not a duration (examples: 250ms, 10s, 5m, 24h)")
        seconds = float(match.group(1)) * _DURATION_FACTORS[match.group(2)]
    if seconds < 0 or (seconds == 0 and not zero) or seconds != seconds:
        raise ValueError("a duration must be positive" + (" or 0" if zero else ""))
    if seconds > MAX_DURATION:
        raise ValueError("a duration must be at most 3650d (ten years)")
    return seconds


def parse_duration_or_zero(value: object) -> float:
    """:func:`parse_duration` where ``0`` is allowed."""
    return parse_duration(value, zero=True)


def parse_size(value: object) -> int:
    """Bytes from ``1024``, ``64KiB``, ``1MiB``."""
    if isinstance(value, bool):
        raise ValueError("a size is a number of bytes or a string like '64KiB'")
    if isinstance(value, int):
        if value <= 0:
            raise ValueError("a size must be positive")
        return value
    match = _SIZE.match(str(value))
    if not match:
        raise ValueError(f"{value!r} is not a size (examples: 4096, 64KiB, 1MiB)")
    size = int(match.group(1)) * _SIZE_FACTORS[match.group(2)]
    if size <= 0:
        raise ValueError("a size must be positive")
    return size
