"""Open arrivals for the simulation: Poisson at a rate, and Poisson with a burst.

Pure and seeded: the same ``random.Random`` state gives the same arrival times. A burst
(``Burst``) multiplies the rate by ``factor`` for ``duration_s`` seconds; the process is
Poisson with a piecewise-constant rate, which is exact here because exponential gaps are
memoryless (a gap that would cross a boundary is redrawn from the boundary at the new
rate).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from capacity._profile import ProfileError


@dataclass(frozen=True)
class Burst:
    """The rate times ``factor`` for ``duration_s`` seconds (written ``2x:30s``)."""

    factor: float
    duration_s: float

    def __post_init__(self) -> None:
        if not (math.isfinite(self.factor) and self.factor >= 1.0):
            raise ProfileError(f"a burst factor must be a number >= 1, got {self.factor!r}")
        if not (math.isfinite(self.duration_s) and self.duration_s > 0):
            raise ProfileError(f"a burst duration must be > 0 s, got {self.duration_s!r}")

    def __str__(self) -> str:
        return f"{self.factor:g}x:{self.duration_s:g}s"


def poisson_arrivals(rate_rps: float, count: int, rng: random.Random,
                     start_s: float = 0.0) -> list[float]:
    """``count`` arrival times of a Poisson process at ``rate_rps``, ascending."""
    _check_rate(rate_rps)
    times: list[float] = []
    append = times.append
    expovariate = rng.expovariate
    now = start_s
    for _ in range(count):
        now += expovariate(rate_rps)
        append(now)
    return times


def bursty_arrivals(rate_rps: float, burst: Burst, count: int, rng: random.Random, *,
                    burst_at_s: float | None = None) -> list[float]:
    """``count`` arrivals at ``rate_rps``, with ``burst`` starting at ``burst_at_s``
    (by default a third of the way into the undisturbed run, so that traffic is steady
    before it and the queue has time to recover after it)."""
    _check_rate(rate_rps)
    if burst_at_s is None:
        burst_at_s = count / rate_rps / 3.0
    burst_end = burst_at_s + burst.duration_s
    times: list[float] = []
    now = 0.0
    while len(times) < count:
        in_burst = burst_at_s <= now < burst_end
        rate = rate_rps * burst.factor if in_burst else rate_rps
        boundary = burst_end if in_burst else (burst_at_s if now < burst_at_s else math.inf)
        candidate = now + rng.expovariate(rate)
        if candidate >= boundary:
            now = boundary  # memoryless: start afresh at the new rate
            continue
        now = candidate
        times.append(now)
    return times


def _check_rate(rate_rps: float) -> None:
    if not (math.isfinite(rate_rps) and rate_rps > 0):
        raise ProfileError(f"an arrival rate must be a number > 0, got {rate_rps!r}")
