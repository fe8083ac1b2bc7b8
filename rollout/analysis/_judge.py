"""The judge: one metric's canary and stable observations in, Pass / Fail / Inconclusive out.

Pure: no I/O, no clock, no exceptions for missing data. Each decision carries the
numbers that made it (values, counts, p-values, effect sizes) so a person can check it.

The order of judgement for one metric (``judge_metric``):

1. the canary could not be measured (source error), has fewer requests than
   ``min_requests``, or has no value: Inconclusive;
2. the canary's value is above the absolute ``max``: Fail (stable is not needed);
3. no comparison with stable is configured: Pass;
4. stable could not be measured, has too few requests or no data: Inconclusive;
5. the comparison: without a test, the point values against the tolerance
   (``max_increase`` = canary - stable, ``max_ratio`` = canary / stable); with a
   test, Fail only if the canary is *significantly* worse (one-sided p < ``alpha``)
   *and* the effect size exceeds the tolerance, so a tiny but significant
   difference never fails a rollout (Kayenta's rule).

``judge_metric`` judges one interval alone (``judge: interval``). ``judge_rollout``
(``judge: sequential``, the default) follows the same order but makes the comparison
of step 5, for a test, on the evidence of the whole rollout (``_sequential.py``): it
adds the interval to the metric's running ``Evidence`` and returns the new total.
"""

from __future__ import annotations

import dataclasses
import enum
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np
from scipy import stats

from rollout._errors import AnalysisSpecError
from rollout.analysis._results import MetricResult, Verdict
from rollout.analysis._sequential import Evidence, Tally, bounds, mean_estimate, rate_estimate

# Fewer samples than this and Mann-Whitney cannot reach any useful significance
# (3 vs 3 gives at best p = 0.05).
MIN_SAMPLES = 3
# Histograms with more requests than this are scaled down before Mann-Whitney:
# the test is then a little less sensitive, never more, and memory stays bounded.
MAX_EXPANDED_SAMPLES = 100_000


class StatTest(enum.StrEnum):
    """The statistical comparison of canary against stable, if any."""

    NONE = "none"
    TWO_PROPORTION = "two-proportion"
    MANN_WHITNEY = "mann-whitney"


@dataclass(frozen=True)
class Check:
    """How one metric is judged: thresholds, tolerance, sample size and test."""

    name: str
    max: float | None = None
    max_increase: float | None = None
    max_ratio: float | None = None
    min_requests: float = 0.0
    test: StatTest = StatTest.NONE
    alpha: float = 0.01
    beta: float = 0.25

    def __post_init__(self) -> None:
        def bad(message: str) -> AnalysisSpecError:
            return AnalysisSpecError(f"metric {self.name!r}: {message}")

        if not self.name:
            raise AnalysisSpecError("a metric needs a non-empty name")
        for key in ("max", "max_increase", "max_ratio", "min_requests", "alpha", "beta"):
            value = getattr(self, key)
            if value is not None and not math.isfinite(value):
                raise bad(f"{key} must be a finite number, got {value}")
        if self.max_increase is not None and self.max_ratio is not None:
            raise bad("set max_increase or max_ratio, not both")
        if self.max_increase is not None and self.max_increase < 0:
            raise bad(f"max_increase must be >= 0, got {self.max_increase}")
        if self.max_ratio is not None and self.max_ratio <= 0:
            raise bad(f"max_ratio must be > 0, got {self.max_ratio}")
        if self.min_requests < 0:
            raise bad(f"min_requests must be >= 0, got {self.min_requests}")
        for key in ("alpha", "beta"):  # one-sided error levels
            if not 0 < getattr(self, key) < 0.5:
                raise bad(f"{key} must be between 0 and 0.5, got {getattr(self, key)}")

    @property
    def tolerance(self) -> float | None:
        """The configured tolerance relative to stable (absolute or ratio), if any."""
        return self.max_increase if self.max_increase is not None else self.max_ratio

    @property
    def needs_stable(self) -> bool:
        """Whether judging this metric compares the canary with stable."""
        return self.test is not StatTest.NONE or self.tolerance is not None


@dataclass(frozen=True)
class Measurement:
    """What was measured for one version over the analysis window.

    ``value`` is the metric itself (a rate, a quantile); ``requests`` the request
    count; ``events`` the counted events of a two-proportion check (e.g. errors);
    ``samples`` the values Mann-Whitney ranks; ``error`` why it could not be measured.
    """

    value: float | None = None
    requests: float | None = None
    events: float | None = None
    samples: tuple[float, ...] = ()
    error: str | None = None


def overall_verdict(results: Iterable[MetricResult]) -> Verdict:
    """Any Fail fails; else any Inconclusive (or no metric at all) is Inconclusive; else Pass."""
    verdicts = [r.verdict for r in results]
    if Verdict.FAIL in verdicts:
        return Verdict.FAIL
    if not verdicts or Verdict.INCONCLUSIVE in verdicts:
        return Verdict.INCONCLUSIVE
    return Verdict.PASS


def judge_metric(check: Check, canary: Measurement, stable: Measurement) -> MetricResult:
    """Judge one metric on one interval; see the module docstring for the rules."""
    early = _before_comparing(check, canary, stable)
    if early is not None:
        return early
    return _result(check, canary, stable, *_compare_interval(check, canary, stable))


def judge_rollout(check: Check, canary: Measurement, stable: Measurement,
                  evidence: Evidence | None) -> tuple[MetricResult, Evidence | None]:
    """Judge one metric on the rollout's evidence so far plus this interval.

    Fail when the whole rollout's evidence shows the canary worse; Pass when it bounds
    the regression within the tolerance and the interval is healthy (its own test,
    ``judge_metric``, does not fail it); Inconclusive otherwise: *accumulating* when
    the interval is healthy, so that the engine may step on, not when it is not.

    Returns the result and the new evidence: ``evidence`` with this interval added
    when both versions were measured (even if too few requests to judge the
    interval), else ``evidence`` unchanged. Metrics without a test keep no evidence.
    """
    if check.test is StatTest.NONE:
        return judge_metric(check, canary, stable), None
    total = evidence or Evidence()
    if canary.error is None and stable.error is None:
        total = total.plus(_tally(check, canary), _tally(check, stable))
    early = _before_comparing(check, canary, stable)
    if early is not None:
        return early, total
    if check.test is StatTest.TWO_PROPORTION:
        estimate = rate_estimate(total, check.max_increase, check.max_ratio)
    else:
        estimate = mean_estimate(total, check.max_increase, check.max_ratio, MIN_SAMPLES)
    if estimate is None:
        return _result(check, canary, stable, Verdict.INCONCLUSIVE,
                       f"not enough evidence yet over {total.intervals} interval(s)", {}), total
    found = bounds(estimate, check.alpha, check.beta)
    unit = "requests" if check.test is StatTest.TWO_PROPORTION else "samples"
    numbers = {**found.statistics(), "intervals": float(total.intervals),
               f"canary_{unit}": total.canary.n, f"stable_{unit}": total.stable.n}
    e = estimate
    what = (f"over {total.intervals} interval(s) ({total.canary.n:.0f} canary, "
            f"{total.stable.n:.0f} stable): {e.kind} {e.theta:.4g}, bounds "
            f"[{found.lower:.4g}, {found.upper:.4g}], allowed {e.allowed:.4g}")
    if found.worse:
        return _result(check, canary, stable, Verdict.FAIL,
                       f"{what}: worse at alpha {check.alpha:g}", numbers), total
    alone, why, _ = _compare_interval(check, canary, stable)  # the interval by itself
    if alone is Verdict.FAIL:  # an unhealthy interval neither passes nor steps on
        return _result(check, canary, stable, Verdict.INCONCLUSIVE,
                       f"{what}; this interval alone is worse ({why}): holding",
                       numbers), total
    if found.within:
        return _result(check, canary, stable, Verdict.PASS,
                       f"{what}: within tolerance at beta {check.beta:g}", numbers), total
    result = _result(check, canary, stable, Verdict.INCONCLUSIVE,
                     f"{what}: healthy so far, not yet within tolerance at beta "
                     f"{check.beta:g}", numbers)
    return dataclasses.replace(result, accumulating=True), total


def _compare_interval(check: Check, canary: Measurement, stable: Measurement) -> _Judgement:
    """Rule 5 on one interval: the points, or the configured test."""
    compare = {
        StatTest.NONE: _points,
        StatTest.TWO_PROPORTION: _proportions,
        StatTest.MANN_WHITNEY: _ranks,
    }[check.test]
    return compare(check, canary, stable)


def _tally(check: Check, obs: Measurement) -> Tally:
    """One interval's contribution to a version's totals."""
    if check.test is StatTest.TWO_PROPORTION:
        n = max(obs.requests or 0.0, 0.0)
        return Tally(n=n, events=min(max(obs.events or 0.0, 0.0), n))
    return Tally.of_samples(obs.samples)


def _result(check: Check, canary: Measurement, stable: Measurement, verdict: Verdict,
            reason: str, statistics: Mapping[str, float] | None = None) -> MetricResult:
    return MetricResult(
        name=check.name,
        verdict=verdict,
        canary=canary.value,
        stable=stable.value,
        threshold=check.max,
        tolerance=check.tolerance,
        reason=reason,
        statistics={k: v for k, v in (statistics or {}).items() if math.isfinite(v)},
    )


def _before_comparing(check: Check, canary: Measurement,
                      stable: Measurement) -> MetricResult | None:
    """Rules 1-4 of the module docstring: a result, or None when it comes to comparing."""
    missing = _unmeasured("canary", check, canary)
    if missing:
        return _result(check, canary, stable, Verdict.INCONCLUSIVE, missing)
    assert canary.value is not None  # _unmeasured checked it
    if check.max is not None and canary.value > check.max:
        return _result(check, canary, stable, Verdict.FAIL,
                       f"canary {canary.value:.4g} > max {check.max:.4g}")
    if not check.needs_stable:
        limit = f" <= max {check.max:.4g}" if check.max is not None else ""
        return _result(check, canary, stable, Verdict.PASS, f"canary {canary.value:.4g}{limit}")
    missing = _unmeasured("stable", check, stable)
    if missing:
        return _result(check, canary, stable, Verdict.INCONCLUSIVE, missing)
    return None


def _unmeasured(who: str, check: Check, obs: Measurement) -> str | None:
    """Why ``obs`` cannot be judged (source error, too few requests, no data), or None."""
    if obs.error:
        return f"{who}: {obs.error}"
    requests = obs.requests or 0.0
    if requests < check.min_requests:
        return f"too few {who} requests: {requests:.4g} < {check.min_requests:.4g}"
    if obs.value is None:
        return f"no data for {who}"
    return None


# What a comparison with stable returns: verdict, reason, statistics.
_Judgement = tuple[Verdict, str, dict[str, float]]


def _effect(check: Check, canary: float, stable: float) -> tuple[str, float, float]:
    """(statistic name, effect, allowed) for the configured tolerance; no tolerance allows 0."""
    if check.max_ratio is not None:
        # a stable value of 0 makes any canary value above it infinitely worse
        ratio = canary / stable if stable > 0 else (math.inf if canary > 0 else 1.0)
        return "ratio", ratio, check.max_ratio
    allowed = check.max_increase if check.max_increase is not None else 0.0
    return "difference", canary - stable, allowed


def _points(check: Check, canary: Measurement, stable: Measurement) -> _Judgement:
    assert canary.value is not None and stable.value is not None
    kind, effect, allowed = _effect(check, canary.value, stable.value)
    numbers = f"canary {canary.value:.4g} vs stable {stable.value:.4g}: {kind} {effect:.4g}"
    if effect > allowed:
        return Verdict.FAIL, f"{numbers} > {allowed:.4g}", {kind: effect}
    return Verdict.PASS, f"{numbers} <= {allowed:.4g}", {kind: effect}


def _significance_verdict(
    check: Check, kind: str, effect: float, allowed: float, p_value: float, what: str
) -> tuple[Verdict, str]:
    """Fail only when the canary is significantly worse *and* by more than the tolerance."""
    significant = p_value < check.alpha
    beyond = effect > allowed
    detail = f"{what}: {kind} {effect:.4g} (allowed {allowed:.4g}), p={p_value:.3g}"
    if significant and beyond:
        return Verdict.FAIL, f"{detail} < alpha {check.alpha:g}"
    if not significant:
        return Verdict.PASS, f"{detail} >= alpha {check.alpha:g}: not significant"
    return Verdict.PASS, f"{detail}: significant but within tolerance"


def two_proportion_test(
    canary_events: float, canary_n: float, stable_events: float, stable_n: float
) -> tuple[float, float]:
    """Pooled two-proportion z-test, one-sided (canary rate greater): ``(z, p_value)``."""
    pooled = (canary_events + stable_events) / (canary_n + stable_n)
    se = math.sqrt(pooled * (1.0 - pooled) * (1.0 / canary_n + 1.0 / stable_n))
    if se == 0.0:  # both all-success or all-failure: no evidence of any difference
        return 0.0, 0.5
    z = (canary_events / canary_n - stable_events / stable_n) / se
    return z, float(stats.norm.sf(z))


def _proportions(check: Check, canary: Measurement, stable: Measurement) -> _Judgement:
    n_c, n_s = canary.requests or 0.0, stable.requests or 0.0
    if n_c <= 0 or n_s <= 0:
        reason = f"no requests to compare (canary {n_c:.0f}, stable {n_s:.0f})"
        return Verdict.INCONCLUSIVE, reason, {}
    # An events series that does not exist yet means no events; extrapolated counts
    # can overshoot the request count by a little.
    e_c = min(max(canary.events or 0.0, 0.0), n_c)
    e_s = min(max(stable.events or 0.0, 0.0), n_s)
    z, p_value = two_proportion_test(e_c, n_c, e_s, n_s)
    rate_c, rate_s = e_c / n_c, e_s / n_s
    kind, effect, allowed = _effect(check, rate_c, rate_s)
    what = f"canary {e_c:.0f}/{n_c:.0f} = {rate_c:.4g} vs stable {e_s:.0f}/{n_s:.0f} = {rate_s:.4g}"
    verdict, reason = _significance_verdict(check, kind, effect, allowed, p_value, what)
    numbers = {
        "z": z,
        "p_value": p_value,
        kind: effect,
        "canary_rate": rate_c,
        "stable_rate": rate_s,
        "canary_events": e_c,
        "stable_events": e_s,
        "canary_requests": n_c,
        "stable_requests": n_s,
    }
    return verdict, reason, numbers


def _ranks(check: Check, canary: Measurement, stable: Measurement) -> _Judgement:
    n_c, n_s = len(canary.samples), len(stable.samples)
    if n_c < MIN_SAMPLES or n_s < MIN_SAMPLES:
        reason = f"too few samples: canary {n_c}, stable {n_s} (need {MIN_SAMPLES})"
        return Verdict.INCONCLUSIVE, reason, {}
    test = stats.mannwhitneyu(canary.samples, stable.samples, alternative="greater")
    u, p_value = float(test.statistic), float(test.pvalue)
    mean_c, mean_s = float(np.mean(canary.samples)), float(np.mean(stable.samples))
    kind, effect, allowed = _effect(check, mean_c, mean_s)
    what = f"sample means canary {mean_c:.4g} vs stable {mean_s:.4g} (n={n_c}/{n_s})"
    verdict, reason = _significance_verdict(check, kind, effect, allowed, p_value, what)
    numbers = {
        "u": u,
        "p_value": p_value,
        kind: effect,
        # probability that a canary sample exceeds a stable one (ties count half)
        "cles": u / (n_c * n_s),
        "canary_mean": mean_c,
        "stable_mean": mean_s,
        "canary_samples": float(n_c),
        "stable_samples": float(n_s),
    }
    return verdict, reason, numbers


def samples_from_buckets(buckets: Mapping[float, float]) -> tuple[float, ...]:
    """Expand a cumulative histogram (``le`` bound -> count) into one value per observation.

    Each observation becomes the midpoint of its bucket (the first bucket's lower
    bound is 0; the ``+Inf`` bucket takes the largest finite bound, as
    ``histogram_quantile`` does). Counts from ``increase()`` are rounded; more than
    ``MAX_EXPANDED_SAMPLES`` observations are scaled down proportionally.
    """
    bounds = sorted(buckets)
    cumulative = np.maximum.accumulate(np.array([max(buckets[b], 0.0) for b in bounds] or [0.0]))
    counts = np.diff(cumulative, prepend=0.0)[: len(bounds)]
    total = float(counts.sum())
    if total > MAX_EXPANDED_SAMPLES:
        counts = counts * (MAX_EXPANDED_SAMPLES / total)
    finite = [b for b in bounds if math.isfinite(b)]
    values: list[float] = []
    lower = 0.0
    for bound in bounds:
        if math.isfinite(bound):
            values.append((lower + bound) / 2 if bound > 0 else bound)
            lower = bound
        else:
            values.append(finite[-1] if finite else math.nan)
    reps = np.rint(counts).astype(np.int64)
    expanded = np.repeat(np.array(values, dtype=float), reps)
    return tuple(float(v) for v in expanded[~np.isnan(expanded)])
