"""Pure statistics of the shadow report: confidence intervals and the check verdicts.

All intervals come from counts and moments that DuckDB streams (never from the
samples themselves), so the report's memory does not grow with its size:

- a proportion (label match, exact match, error rate, coverage): the Wilson score
  interval, which stays inside [0, 1] and behaves at 0 and n (where the normal
  interval collapses to a point);
- a difference of two proportions (shadow's error rate minus the primary's):
  Newcombe's hybrid score interval, built from the two Wilson intervals;
- a mean (cosine similarity, token overlap): the normal interval mean ± z·s/√n,
  sound for the bounded values it is used on once n is in the tens.

A check passes when its estimate is on the right side of its threshold, fails only
when the whole interval is on the wrong side (significantly worse), and is
inconclusive in between or when the sample is too small: the rollout judge's rule,
so that noise in a small sample neither passes a bad version nor fails a good one.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from statistics import NormalDist
from typing import Any

from rollout.analysis._results import Verdict


def z_for(confidence: float) -> float:
    """The two-sided normal quantile for ``confidence`` (0.95 -> 1.96)."""
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    return NormalDist().inv_cdf(0.5 + confidence / 2.0)


def wilson(successes: int, n: int, z: float) -> tuple[float, float]:
    """Wilson score interval of ``successes / n``; (0, 1) when n is 0."""
    if n <= 0:
        return 0.0, 1.0
    p = successes / n
    z2 = z * z
    centre = (p + z2 / (2 * n)) / (1 + z2 / n)
    half = z * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / (1 + z2 / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def newcombe(k1: int, n1: int, k2: int, n2: int, z: float) -> tuple[float, float]:
    """Interval of p1 - p2 (Newcombe 1998, method 10) from the two Wilson intervals."""
    p1, p2 = (k1 / n1 if n1 else 0.0), (k2 / n2 if n2 else 0.0)
    l1, u1 = wilson(k1, n1, z)
    l2, u2 = wilson(k2, n2, z)
    diff = p1 - p2
    lower = diff - math.sqrt((p1 - l1) ** 2 + (u2 - p2) ** 2)
    upper = diff + math.sqrt((u1 - p1) ** 2 + (p2 - l2) ** 2)
    return max(-1.0, lower), min(1.0, upper)


def mean_interval(mean: float, stddev: float | None, n: int, z: float) -> tuple[float, float]:
    """Normal interval of a mean from its sample standard deviation."""
    if n < 2 or stddev is None or math.isnan(stddev):
        return -math.inf, math.inf
    half = z * stddev / math.sqrt(n)
    return mean - half, mean + half


@dataclass(frozen=True)
class Check:
    """One threshold check of the report, with the numbers that decided it."""

    name: str
    verdict: Verdict
    value: float | None
    threshold: float | None
    interval: tuple[float, float] | None = None
    reason: str = ""
    numbers: Mapping[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        interval = None
        if self.interval is not None and all(math.isfinite(v) for v in self.interval):
            interval = [self.interval[0], self.interval[1]]
        return {"name": self.name, "verdict": self.verdict.value, "value": self.value,
                "threshold": self.threshold, "interval": interval, "reason": self.reason,
                "numbers": dict(self.numbers)}


def at_least(name: str, value: float | None, interval: tuple[float, float] | None,
             threshold: float, *, enough: bool = True, what: str = "") -> Check:
    """``value`` should be >= ``threshold`` (an agreement, a coverage)."""
    return _judge(name, value, interval, threshold, enough, what, higher_is_better=True)


def at_most(name: str, value: float | None, interval: tuple[float, float] | None,
            threshold: float, *, enough: bool = True, what: str = "") -> Check:
    """``value`` should be <= ``threshold`` (an error-rate increase, a latency ratio)."""
    return _judge(name, value, interval, threshold, enough, what, higher_is_better=False)


def _judge(name: str, value: float | None, interval: tuple[float, float] | None,
           threshold: float, enough: bool, what: str, *, higher_is_better: bool) -> Check:
    sign = ">=" if higher_is_better else "<="
    if value is None or math.isnan(value):
        return Check(name, Verdict.INCONCLUSIVE, None, threshold, interval,
                     f"no data{': ' + what if what else ''}")
    good = value >= threshold if higher_is_better else value <= threshold
    shown = f"{value:.4g} {sign} {threshold:g}" if good else f"{value:.4g} not {sign} {threshold:g}"
    if not enough:
        return Check(name, Verdict.INCONCLUSIVE, value, threshold, interval,
                     f"too few samples{': ' + what if what else ''}")
    if good:
        return Check(name, Verdict.PASS, value, threshold, interval, shown)
    if interval is None:
        return Check(name, Verdict.FAIL, value, threshold, interval, shown)
    lower, upper = interval
    significant = upper < threshold if higher_is_better else lower > threshold
    if significant:
        best = upper if higher_is_better else lower
        return Check(name, Verdict.FAIL, value, threshold, interval,
                     f"{shown}, even at the interval's best ({best:.4g})")
    return Check(name, Verdict.INCONCLUSIVE, value, threshold, interval,
                 f"{shown}, but the interval reaches it: collect more pairs")


def overall(checks: list[Check]) -> Verdict:
    """Any Fail: Fail; else any Inconclusive: Inconclusive; else Pass (none: Inconclusive)."""
    verdicts = {c.verdict for c in checks}
    if Verdict.FAIL in verdicts:
        return Verdict.FAIL
    if Verdict.INCONCLUSIVE in verdicts or not checks:
        return Verdict.INCONCLUSIVE
    return Verdict.PASS
