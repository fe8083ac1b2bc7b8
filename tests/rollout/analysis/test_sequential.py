"""The sequential judge's statistics, its evidence, and the traffic check at start."""

from __future__ import annotations

import math

import numpy as np
import pytest

from rollout.analysis._analysis import JudgeKind, load_analysis
from rollout.analysis._judge import Check, Measurement, StatTest, judge_rollout
from rollout.analysis._results import AnalysisResult, MetricResult, Verdict
from rollout.analysis._sequential import (
    Estimate,
    Evidence,
    Tally,
    bounds,
    canary_requests_needed,
    mean_estimate,
    radius,
    rate_estimate,
)
from rollout.analysis._traffic import traffic_needs

ERRORS = Check("errors", max=0.1, max_increase=0.01, test=StatTest.TWO_PROPORTION)
LATENCY = Check("latency", max_ratio=1.2, test=StatTest.MANN_WHITNEY)


def rates(n: float, events: float) -> Measurement:
    return Measurement(value=events / n if n else None, requests=n, events=events)


def test_the_confidence_sequence_holds_at_every_look() -> None:
    # Normal increments, looked at after each of 60 batches: the true mean must leave
    # the two-sided sequence in at most alpha of the paths (a fixed-sample interval
    # looked at this often leaves it far more often).
    rng = np.random.default_rng(7)
    paths, looks, batch, alpha, tau = 2000, 60, 25, 0.05, 0.2
    sums = np.cumsum(rng.standard_normal((paths, looks, batch)).sum(axis=2), axis=1)
    n = batch * np.arange(1, looks + 1)
    means, variance = sums / n, 1.0 / n
    r = np.array([radius(v, tau, alpha) for v in variance])
    fixed = 1.96 * np.sqrt(variance)
    left = (np.abs(means) > r).any(axis=1).mean()
    left_fixed = (np.abs(means) > fixed).any(axis=1).mean()
    assert left <= alpha
    assert left_fixed > 3 * alpha  # why a fixed interval cannot be looked at every interval


def test_radius_shrinks_with_evidence_and_widens_with_confidence() -> None:
    assert radius(1e-4, 0.01, 0.05) > radius(1e-5, 0.01, 0.05) > radius(1e-6, 0.01, 0.05)
    assert radius(1e-5, 0.01, 0.01) > radius(1e-5, 0.01, 0.1)
    assert radius(0.0, 0.01, 0.05) == 0.0


def test_rates_are_adjusted_so_no_events_is_not_certainty() -> None:
    none_yet = Evidence(Tally(20, 0), Tally(2000, 10), 1)
    estimate = rate_estimate(none_yet, 0.01, None)
    assert estimate is not None
    # (0 + 1) / 22 against (10 + 1) / 2002: an uncertain canary, not a perfect one.
    assert estimate.theta == pytest.approx(1 / 22 - 11 / 2002)
    assert not bounds(estimate, 0.01, 0.2).within
    assert rate_estimate(Evidence(Tally(0, 0), Tally(10, 0), 1), 0.01, None) is None
    ratio = rate_estimate(Evidence(Tally(1000, 50), Tally(1000, 10), 1), None, 2.0)
    assert ratio is not None and ratio.kind == "log_ratio"
    assert ratio.theta == pytest.approx(math.log(51 / 11)) and ratio.allowed == math.log(2.0)


def test_means_come_from_counts_sums_and_squares() -> None:
    canary = Tally.of_samples((1.0, 2.0, 3.0, 4.0))
    assert (canary.n, canary.total, canary.total_sq) == (4, 10, 30)
    stable = Tally.of_samples((1.0, 1.0, 1.0, 1.0, 2.0, 2.0))
    estimate = mean_estimate(Evidence(canary, stable, 1), None, 1.2, min_samples=3)
    assert estimate is not None
    assert estimate.theta == pytest.approx(math.log(2.5 / (8 / 6)))
    sample_var_c = np.var([1, 2, 3, 4], ddof=1)
    sample_var_s = np.var([1, 1, 1, 1, 2, 2], ddof=1)
    assert estimate.variance == pytest.approx(
        sample_var_c / (4 * 2.5**2) + sample_var_s / (6 * (8 / 6) ** 2))
    assert mean_estimate(Evidence(canary, Tally.of_samples((1.0,)), 1), None, 1.2, 3) is None


def test_verdicts_follow_the_bounds() -> None:
    worse = bounds(Estimate("difference", 0.03, 1e-6, 0.01), 0.01, 0.2)
    assert worse.worse and not worse.within
    small = bounds(Estimate("difference", 0.001, 1e-6, 0.01), 0.01, 0.2)
    assert small.within and not small.worse
    # Significantly worse but within the tolerance: never a Fail (Kayenta's rule).
    slight = bounds(Estimate("difference", 0.005, 1e-7, 0.01), 0.01, 0.2)
    assert slight.lower > 0 and not slight.worse
    assert worse.p_value < 0.01 < small.p_value


def test_judge_rollout_accumulates_every_measured_interval() -> None:
    evidence = None
    verdicts = []
    for _ in range(6):
        result, evidence = judge_rollout(ERRORS, rates(300, 2), rates(2700, 14), evidence)
        verdicts.append(result.verdict)
        assert result.verdict is Verdict.PASS or result.accumulating
    assert evidence is not None and evidence.intervals == 6
    assert (evidence.canary.n, evidence.canary.events, evidence.stable.n) == (1800, 12, 16200)
    assert verdicts[0] is Verdict.INCONCLUSIVE and verdicts[-1] is Verdict.PASS

    # Too few requests to judge the interval: Inconclusive, but the data still counts.
    few = Check("errors", max_increase=0.01, min_requests=50, test=StatTest.TWO_PROPORTION)
    result, more = judge_rollout(few, rates(10, 0), rates(90, 0), evidence)
    assert result.verdict is Verdict.INCONCLUSIVE and not result.accumulating
    assert more is not None and more.canary.n == 1810
    # A version that could not be measured adds nothing.
    result, same = judge_rollout(ERRORS, Measurement(error="Prometheus down"), rates(90, 0),
                                 evidence)
    assert same == evidence and result.verdict is Verdict.INCONCLUSIVE
    # Over the absolute limit: Fail at once, whatever the evidence says.
    result, _ = judge_rollout(ERRORS, rates(100, 20), rates(900, 4), evidence)
    assert result.verdict is Verdict.FAIL and "max" in result.reason
    # A point comparison keeps no evidence.
    points = Check("p99", max_ratio=1.2)
    result, kept = judge_rollout(points, Measurement(value=1.0), Measurement(value=1.0), None)
    assert kept is None and result.verdict is Verdict.PASS


def test_a_regression_too_small_for_one_interval_fails_on_the_whole_rollout() -> None:
    rng = np.random.default_rng(3)
    evidence, verdicts = None, []
    for _ in range(12):  # 5xx at 2.5% against 0.5%, 100 canary requests an interval
        c, s = rng.binomial(100, 0.025), rng.binomial(900, 0.005)
        result, evidence = judge_rollout(ERRORS, rates(100, c), rates(900, s), evidence)
        verdicts.append(result.verdict)
    assert verdicts[0] is not Verdict.FAIL and Verdict.FAIL in verdicts
    assert Verdict.PASS not in verdicts


def test_latency_evidence_comes_from_the_samples() -> None:
    rng = np.random.default_rng(5)
    slow = tuple(float(x) for x in 0.12 * np.exp(0.4 * rng.standard_normal(200)))
    fast = tuple(float(x) for x in 0.08 * np.exp(0.4 * rng.standard_normal(800)))
    result, evidence = judge_rollout(LATENCY, Measurement(value=0.3, requests=200, samples=slow),
                                     Measurement(value=0.2, requests=800, samples=fast), None)
    assert result.verdict is Verdict.FAIL, result.reason
    assert result.statistics["ratio"] == pytest.approx(1.5, rel=0.1)
    assert evidence is not None and evidence.canary.n == 200


def test_evidence_survives_json() -> None:
    evidence = Evidence(Tally(10, 1), Tally(90, 2, 3.5, 7.25), 3)
    assert Evidence.from_dict(evidence.to_dict()) == evidence
    result = AnalysisResult(Verdict.INCONCLUSIVE, (
        MetricResult("errors", Verdict.INCONCLUSIVE, 0.1, 0.0, accumulating=True),), at=1.0,
        evidence={"errors": evidence})
    assert AnalysisResult.from_dict(result.to_dict()) == result
    assert result.healthy
    unmeasured = AnalysisResult(Verdict.INCONCLUSIVE, (
        MetricResult("errors", Verdict.INCONCLUSIVE, None, None),), at=1.0)
    assert not unmeasured.healthy


def test_requests_needed_grow_with_the_baseline_and_vanish_without_a_tolerance() -> None:
    at_half = canary_requests_needed(0.005, 0.5, 0.01, 0.2)
    at_one = canary_requests_needed(0.01, 0.5, 0.01, 0.2)
    assert at_half is not None and at_one is not None and 300 < at_half < at_one < 3000
    assert canary_requests_needed(0.005, 0.5, 0.0, 0.2) is None


def test_rollout_start_says_when_traffic_cannot_promote() -> None:
    spec = load_analysis()
    stable = {"error-rate": 0.005, "throttle-rate": 0.01}
    low = traffic_needs(spec, (10, 25, 50), 100, stable)
    assert low.holds_forever and low.min_requests_per_interval == 500
    assert "at 10% the canary gets 10 requests an interval, under min_requests 50" in \
        low.notes[0]
    enough = traffic_needs(spec, (10, 25, 50), 2000, stable)
    assert not enough.holds_forever and enough.intervals_to_promote == 3
    slow = traffic_needs(spec, (10, 25, 50), 500, stable)
    assert slow.intervals_to_promote is not None and slow.intervals_to_promote > 3
    assert any("promotion needs about" in note for note in slow.notes)
    assert traffic_needs(spec, (10, 25, 50), 0, stable).holds_forever
    interval = traffic_needs(type(spec)(spec.metrics, judge=JudgeKind.INTERVAL), (10, 25, 50),
                             500, stable)
    assert interval.intervals_to_promote == 3
