"""Durations: the one grammar the command lines accept, and the two ways we write them.

People write ``60s``, ``500ms``, ``2m``, ``1.5h``, ``.5s`` or bare seconds (``90``);
``parse_duration_s`` reads all of them and ``format_duration_s`` writes seconds back
the way people would (``90s``, ``2m``, ``1.5h``). Prometheus wants whole numbers of
a unit instead (``1.5m`` is not valid there), which ``format_promql_duration`` writes.
"""

from __future__ import annotations

import math
import re

from common._errors import PlatformError

_DURATION = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*(ms|s|m|h)?\s*$")
_UNIT_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}


class InvalidDuration(PlatformError, ValueError):
    """A duration that does not parse, or is zero where it must be positive."""


def parse_duration_s(text: str, *, allow_zero: bool = False) -> float:
    """Seconds in ``text``: a number with ``ms``, ``s``, ``m`` or ``h``, or bare seconds.

    Zero is refused unless ``allow_zero`` (then a caller checks the value itself).

    >>> parse_duration_s("1.5m"), parse_duration_s("500ms"), parse_duration_s(".5s")
    (90.0, 0.5, 0.5)
    """
    match = _DURATION.match(text)
    if match is None:
        raise InvalidDuration(f"duration {text!r}: expected a number with ms, s, m or h, "
                              "e.g. 60s")
    seconds = float(match.group(1)) * _UNIT_S[match.group(2)]
    if seconds <= 0 and not allow_zero:
        raise InvalidDuration(f"duration {text!r} must be greater than zero")
    return seconds


def format_duration_s(seconds: float) -> str:
    """Render seconds the way people wrote them: ``90s``, ``2m``, ``1.5h``.

    >>> format_duration_s(90), format_duration_s(120), format_duration_s(5400)
    ('90s', '2m', '1.5h')
    """
    if seconds >= 3600 and seconds % 360 == 0:
        return f"{seconds / 3600:g}h"
    if seconds >= 60 and seconds % 6 == 0:
        return f"{seconds / 60:g}m"
    return f"{seconds:g}s"


def format_promql_duration(seconds: float) -> str:
    """A Prometheus duration for ``seconds``: whole seconds as ``60s``, else milliseconds.

    >>> format_promql_duration(60), format_promql_duration(1.5), format_promql_duration(1e-4)
    ('60s', '1500ms', '1ms')
    """
    if not math.isfinite(seconds) or seconds <= 0:
        raise InvalidDuration(f"a duration must be a positive number of seconds, got {seconds}")
    millis = max(1, round(seconds * 1000))
    return f"{millis // 1000}s" if millis % 1000 == 0 else f"{millis}ms"
