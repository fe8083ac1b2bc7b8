"""The sequential judge: canary against stable on the evidence of the whole rollout.

Pure: no I/O, no clock. Each analysis adds its interval's counts to the rollout's
running ``Evidence`` for the metric (kept in the rollout state), and the judgement is
made on the total with a test that stays valid however often it is looked at.

The test is the normal-mixture sequential probability ratio test (mSPRT: Robbins
1970; Johari, Pekelis & Walsh, "Always valid inference", 2017, the test behind
continuously monitored A/B tests). For an estimate ``theta`` of the canary's
regression with variance ``V``, mixing over regressions ``N(0, tau^2)``, the
likelihood ratio against "no regression" is

    L = sqrt(V / (V + tau^2)) * exp(tau^2 * theta^2 / (2 V (V + tau^2)))

and ``P(L ever >= 1/a) <= a`` under the null, whenever it is looked at. Inverting it
gives a confidence sequence: the regression lies within ``theta +- radius(V, a)``
at every look at once, with probability at least ``1 - a``. ``tau`` is the metric's
tolerance (the regression that matters); ``V`` is the plug-in variance of the
totals (asymptotic, as in the paper).

Two estimates:

* rates (``two-proportion``): the difference of the two rates, or the log of their
  ratio for a ``max_ratio`` tolerance, each rate adjusted by one event and one
  non-event per version (Agresti & Caffo 2000), so that a version with no events
  yet does not look certain;
* means (the sequential counterpart of ``mann-whitney``): the difference of the
  means, or the log of their ratio (delta method) for a ``max_ratio`` tolerance,
  from the count, sum and sum of squares of every sample seen.

The verdict, with ``allowed`` the tolerance on the estimate's scale:

* Fail: the one-sided lower bound at ``alpha`` is above 0 (the canary is worse, at
  the rollout's error level) and the estimate is beyond ``allowed``;
* Pass: the one-sided upper bound at ``beta`` is under ``allowed``: the evidence
  bounds the regression below the tolerance (``beta`` is how often a canary worse
  by exactly the tolerance may pass);
* otherwise Inconclusive, and ``accumulating``: healthy so far, not yet proven.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

# The mixture's scale when a tolerance is zero: 1 point for rates, 10% for ratios.
FALLBACK_TAU = {"difference": 0.01, "log_ratio": math.log(1.1)}


@dataclass(frozen=True)
class Tally:
    """One version's running totals: requests and events (rates), or the count, sum
    and sum of squares of its samples (means)."""

    n: float = 0.0
    events: float = 0.0
    total: float = 0.0
    total_sq: float = 0.0

    def __add__(self, other: Tally) -> Tally:
        return Tally(self.n + other.n, self.events + other.events,
                     self.total + other.total, self.total_sq + other.total_sq)

    @classmethod
    def of_samples(cls, samples: tuple[float, ...]) -> Tally:
        return cls(n=float(len(samples)), total=math.fsum(samples),
                   total_sq=math.fsum(s * s for s in samples))

    def to_list(self) -> list[float]:
        return [self.n, self.events, self.total, self.total_sq]

    @classmethod
    def from_list(cls, values: Any) -> Tally:
        n, events, total, total_sq = (float(v) for v in values)
        return cls(n, events, total, total_sq)


@dataclass(frozen=True)
class Evidence:
    """A metric's evidence over the rollout so far: both versions' totals and how many
    intervals they came from."""

    canary: Tally = Tally()
    stable: Tally = Tally()
    intervals: int = 0

    def plus(self, canary: Tally, stable: Tally) -> Evidence:
        return Evidence(self.canary + canary, self.stable + stable, self.intervals + 1)

    def to_dict(self) -> dict[str, Any]:
        return {"canary": self.canary.to_list(), "stable": self.stable.to_list(),
                "intervals": self.intervals}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Evidence:
        return cls(Tally.from_list(data["canary"]), Tally.from_list(data["stable"]),
                   int(data.get("intervals", 0)))


@dataclass(frozen=True)
class Estimate:
    """The canary's regression on the test's scale, its variance and the tolerance."""

    kind: str  # "difference" or "log_ratio"
    theta: float
    variance: float
    allowed: float


def radius(variance: float, tau: float, level: float) -> float:
    """Half-width of the normal-mixture confidence sequence at error ``level``."""
    if variance <= 0:
        return 0.0
    tau2 = tau * tau
    spread = variance * (variance + tau2) / tau2
    return math.sqrt(spread * (math.log((variance + tau2) / variance) + 2 * math.log(1 / level)))


def always_valid_p(estimate: Estimate, tau: float) -> float:
    """The always-valid p-value of "no regression" (``min(1, 1/L)``, two-sided)."""
    v, tau2 = estimate.variance, tau * tau
    if v <= 0:
        return 1.0 if estimate.theta == 0 else 0.0
    log_l = 0.5 * math.log(v / (v + tau2)) + tau2 * estimate.theta ** 2 / (2 * v * (v + tau2))
    return 1.0 if log_l <= 0 else math.exp(-log_l)


def mixture_scale(estimate: Estimate) -> float:
    """``tau``: the tolerance itself, or a fixed fallback when it is zero."""
    return estimate.allowed if estimate.allowed > 0 else FALLBACK_TAU[estimate.kind]


def rate_estimate(evidence: Evidence, max_increase: float | None,
                  max_ratio: float | None) -> Estimate | None:
    """The rate test's estimate, or None while a version has no requests."""
    c, s = evidence.canary, evidence.stable
    if c.n <= 0 or s.n <= 0:
        return None
    pc, ps = (c.events + 1) / (c.n + 2), (s.events + 1) / (s.n + 2)
    if max_ratio is not None:
        variance = (1 - pc) / (pc * (c.n + 2)) + (1 - ps) / (ps * (s.n + 2))
        return Estimate("log_ratio", math.log(pc / ps), variance, math.log(max_ratio))
    variance = pc * (1 - pc) / (c.n + 2) + ps * (1 - ps) / (s.n + 2)
    return Estimate("difference", pc - ps, variance, max_increase or 0.0)


def mean_estimate(evidence: Evidence, max_increase: float | None,
                  max_ratio: float | None, min_samples: int) -> Estimate | None:
    """The means test's estimate, or None while a version has under ``min_samples``."""
    c, s = evidence.canary, evidence.stable
    if c.n < min_samples or s.n < min_samples:
        return None
    mc, ms = c.total / c.n, s.total / s.n
    vc = max(c.total_sq / c.n - mc * mc, 0.0) * c.n / (c.n - 1)
    vs = max(s.total_sq / s.n - ms * ms, 0.0) * s.n / (s.n - 1)
    if max_ratio is not None:
        if mc <= 0 or ms <= 0:
            return None
        variance = vc / (c.n * mc * mc) + vs / (s.n * ms * ms)
        return Estimate("log_ratio", math.log(mc / ms), variance, math.log(max_ratio))
    return Estimate("difference", mc - ms, vc / c.n + vs / s.n, max_increase or 0.0)


@dataclass(frozen=True)
class Bounds:
    """What the evidence says: the verdict's inputs, all on the estimate's scale."""

    estimate: Estimate
    lower: float  # at alpha: Fail when above 0
    upper: float  # at beta: Pass when under the allowed regression
    p_value: float

    @property
    def worse(self) -> bool:
        return self.lower > 0 and self.estimate.theta > self.estimate.allowed

    @property
    def within(self) -> bool:
        return self.upper < self.estimate.allowed

    def statistics(self) -> dict[str, float]:
        e = self.estimate
        numbers = {e.kind: e.theta, "lower": self.lower, "upper": self.upper,
                   "allowed": e.allowed, "p_value": self.p_value,
                   "standard_error": math.sqrt(e.variance)}
        if e.kind == "log_ratio":
            numbers["ratio"] = math.exp(e.theta)
        return numbers


def bounds(estimate: Estimate, alpha: float, beta: float) -> Bounds:
    """The one-sided bounds: lower at ``alpha``, upper at ``beta`` (each below 0.5).

    Each is one side of the two-sided mixture boundary at twice its level: by
    symmetry a path crosses either side as often, so each side is crossed with
    probability about half the two-sided level (at most half of it plus half the
    chance of crossing both, which is tiny). The simulation shows the error rates.
    """
    tau = mixture_scale(estimate)
    p_two = always_valid_p(estimate, tau)
    return Bounds(estimate,
                  lower=estimate.theta - radius(estimate.variance, tau, 2 * alpha),
                  upper=estimate.theta + radius(estimate.variance, tau, 2 * beta),
                  p_value=p_two / 2 if estimate.theta > 0 else 1 - p_two / 2)


def canary_requests_needed(stable_rate: float, canary_share: float, max_increase: float,
                           beta: float, limit: float = 1e9) -> float | None:
    """How many canary requests an A/A rollout needs before its rate test can Pass: both
    versions at ``stable_rate``, stable getting ``(1 - share) / share`` times as many
    requests. None when not even ``limit`` would do (a zero tolerance, say)."""
    if max_increase <= 0 or not 0 < canary_share < 1:
        return None
    ratio = (1 - canary_share) / canary_share
    p = min(max(stable_rate, 0.0), 1.0)

    def passes(n: float) -> bool:
        evidence = Evidence(Tally(n, p * n), Tally(n * ratio, p * n * ratio), 1)
        estimate = rate_estimate(evidence, max_increase, None)
        return estimate is not None and bounds(estimate, beta, beta).within

    if not passes(limit):
        return None
    low, high = 1.0, limit
    while high - low > max(1.0, low * 0.01):
        mid = math.sqrt(low * high)
        low, high = (low, mid) if passes(mid) else (mid, high)
    return float(math.ceil(high))
