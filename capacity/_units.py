"""Planning inputs as people write them: ``200ms``, ``5000`` (or ``5k``, ``5000/s``),
``2x:30s``. Durations go through ``common.parse_duration_s``, the one duration grammar of
the command lines; every failure is a ``ProfileError`` naming the input."""

from __future__ import annotations

import math
import re

from capacity._arrivals import Burst
from capacity._profile import ProfileError
from common import InvalidDuration, parse_duration_s

_RATE = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*(k)?\s*(?:/s|rps)?\s*$", re.IGNORECASE)
_BURST = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*x\s*:\s*(.+)$", re.IGNORECASE)


def parse_ms(text: str, what: str = "duration") -> float:
    """Milliseconds in ``text``; a unit is required (``200ms``, ``0.2s``): a bare number
    would be seconds in the common grammar, which nobody means for a latency."""
    if re.fullmatch(r"\s*[\d.]+\s*", text):
        raise ProfileError(f"{what} {text!r} needs a unit: write e.g. {text.strip()}ms")
    try:
        return parse_duration_s(text) * 1000.0
    except InvalidDuration as exc:
        raise ProfileError(f"{what}: {exc}") from None


def parse_rate(text: str, what: str = "rate") -> float:
    """Requests per second: ``5000``, ``5k``, ``5000/s`` or ``5000rps``; > 0."""
    match = _RATE.match(text)
    if match is None:
        raise ProfileError(f"{what} {text!r}: expected requests per second, e.g. 5000 or 5k")
    value = float(match.group(1)) * (1000.0 if match.group(2) else 1.0)
    if not (math.isfinite(value) and value > 0):
        raise ProfileError(f"{what} {text!r} must be greater than zero")
    return value


def parse_burst(text: str) -> Burst:
    """``FACTORx:DURATION``: the rate times FACTOR (>= 1) for DURATION, e.g. ``2x:30s``."""
    match = _BURST.match(text)
    if match is None:
        raise ProfileError(f"burst {text!r}: expected FACTORx:DURATION, e.g. 2x:30s")
    try:
        duration_s = parse_duration_s(match.group(2))
    except InvalidDuration as exc:
        raise ProfileError(f"burst {text!r}: {exc}") from None
    return Burst(float(match.group(1)), duration_s)
