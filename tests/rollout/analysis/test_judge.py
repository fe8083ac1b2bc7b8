"""The judge, rule by rule (like Argo Rollouts' assessMetricStatus tests)."""

from __future__ import annotations

import math

import pytest

from rollout._errors import AnalysisSpecError
from rollout.analysis._judge import (
    MAX_EXPANDED_SAMPLES,
    Check,
    Measurement,
    StatTest,
    judge_metric,
    overall_verdict,
    samples_from_buckets,
    two_proportion_test,
)
from rollout.analysis._results import MetricResult, Verdict

PASS, FAIL, INCONCLUSIVE = Verdict.PASS, Verdict.FAIL, Verdict.INCONCLUSIVE


def obs(value: float | None = 0.0, requests: float | None = 1000, **kw: object) -> Measurement:
    return Measurement(value=value, requests=requests, **kw)  # type: ignore[arg-type]


def result(verdict: Verdict) -> MetricResult:
    return MetricResult(name="m", verdict=verdict, canary=None, stable=None)


# --- overall verdict -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("verdicts", "expected"),
    [
        ([PASS, PASS], PASS),
        ([PASS, FAIL], FAIL),
        ([INCONCLUSIVE, FAIL], FAIL),
        ([FAIL, INCONCLUSIVE, PASS], FAIL),
        ([PASS, INCONCLUSIVE], INCONCLUSIVE),
        ([INCONCLUSIVE], INCONCLUSIVE),
        ([], INCONCLUSIVE),
    ],
)
def test_overall_verdict(verdicts: list[Verdict], expected: Verdict) -> None:
    assert overall_verdict(result(v) for v in verdicts) is expected


# --- data that cannot be judged ------------------------------------------------------


def test_canary_source_error_is_inconclusive_with_the_reason() -> None:
    out = judge_metric(Check("m", max=1), Measurement(error="Prometheus unreachable"), obs())
    assert out.verdict is INCONCLUSIVE
    assert out.reason == "canary: Prometheus unreachable"


def test_stable_source_error_is_inconclusive_when_stable_is_needed() -> None:
    out = judge_metric(Check("m", max_increase=0.1), obs(0.5), Measurement(error="timeout"))
    assert out.verdict is INCONCLUSIVE
    assert out.reason == "stable: timeout"


def test_stable_source_error_does_not_matter_for_an_absolute_check() -> None:
    out = judge_metric(Check("m", max=1), obs(0.5), Measurement(error="timeout"))
    assert out.verdict is PASS


def test_too_few_canary_requests_is_inconclusive() -> None:
    out = judge_metric(Check("m", max=1, min_requests=50), obs(5.0, requests=49), obs())
    assert out.verdict is INCONCLUSIVE  # even though 5.0 > max: 49 requests say too little
    assert out.reason == "too few canary requests: 49 < 50"


def test_missing_request_count_counts_as_zero() -> None:
    out = judge_metric(Check("m", min_requests=1), obs(1.0, requests=None), obs())
    assert out.verdict is INCONCLUSIVE
    assert "0 < 1" in out.reason


def test_exactly_min_requests_is_enough() -> None:
    out = judge_metric(Check("m", max=1, min_requests=50), obs(0.5, requests=50), obs())
    assert out.verdict is PASS


def test_too_few_stable_requests_is_inconclusive() -> None:
    check = Check("m", max_increase=0.1, min_requests=50)
    out = judge_metric(check, obs(0.5), obs(0.5, requests=3))
    assert out.verdict is INCONCLUSIVE
    assert out.reason == "too few stable requests: 3 < 50"


def test_no_canary_value_is_inconclusive() -> None:
    out = judge_metric(Check("m", max=1), obs(None), obs())
    assert (out.verdict, out.reason) == (INCONCLUSIVE, "no data for canary")


def test_no_stable_value_is_inconclusive_for_a_relative_check() -> None:
    out = judge_metric(Check("m", max_ratio=1.2), obs(1.0), obs(None))
    assert (out.verdict, out.reason) == (INCONCLUSIVE, "no data for stable")


# --- absolute threshold --------------------------------------------------------------


def test_above_max_fails() -> None:
    out = judge_metric(Check("m", max=0.05), obs(0.06), obs())
    assert out.verdict is FAIL
    assert out.reason == "canary 0.06 > max 0.05"
    assert out.threshold == 0.05


def test_at_max_passes() -> None:
    out = judge_metric(Check("m", max=0.05), obs(0.05), obs())
    assert out.verdict is PASS


def test_above_max_fails_even_without_stable_data() -> None:
    check = Check("m", max=0.05, max_increase=0.01, test=StatTest.TWO_PROPORTION)
    out = judge_metric(check, obs(0.5, events=500), Measurement(error="down"))
    assert out.verdict is FAIL


def test_no_checks_at_all_passes_on_data() -> None:
    assert judge_metric(Check("m"), obs(123.0), obs()).verdict is PASS


# --- point comparison (no test) ------------------------------------------------------


def test_increase_beyond_tolerance_fails() -> None:
    out = judge_metric(Check("m", max_increase=0.01), obs(0.03), obs(0.01))
    assert out.verdict is FAIL
    assert out.statistics["difference"] == pytest.approx(0.02)
    assert out.tolerance == 0.01


def test_increase_within_tolerance_passes() -> None:
    out = judge_metric(Check("m", max_increase=0.01), obs(0.015), obs(0.01))
    assert out.verdict is PASS


def test_canary_better_than_stable_passes() -> None:
    assert judge_metric(Check("m", max_increase=0.0), obs(0.0), obs(0.5)).verdict is PASS


def test_ratio_beyond_tolerance_fails() -> None:
    out = judge_metric(Check("m", max_ratio=1.2), obs(1.5), obs(1.0))
    assert out.verdict is FAIL
    assert out.statistics["ratio"] == pytest.approx(1.5)


def test_ratio_within_tolerance_passes() -> None:
    assert judge_metric(Check("m", max_ratio=1.2), obs(1.19), obs(1.0)).verdict is PASS


def test_ratio_against_zero_stable() -> None:
    fails = judge_metric(Check("m", max_ratio=1.2), obs(0.1), obs(0.0))
    assert fails.verdict is FAIL
    assert "ratio" not in fails.statistics  # infinity is left out of the statistics
    assert judge_metric(Check("m", max_ratio=1.2), obs(0.0), obs(0.0)).verdict is PASS


# --- two-proportion test -------------------------------------------------------------


def errors(rate_c: float, rate_s: float, n: int = 1000, **check: object) -> MetricResult:
    spec = Check("errors", test=StatTest.TWO_PROPORTION, **check)  # type: ignore[arg-type]
    return judge_metric(
        spec,
        obs(rate_c, requests=n, events=rate_c * n),
        obs(rate_s, requests=n, events=rate_s * n),
    )


def test_two_proportion_z_matches_the_textbook_formula() -> None:
    # 30/1000 vs 10/1000: pooled 0.02, se = sqrt(0.02 * 0.98 * 2/1000)
    z, p = two_proportion_test(30, 1000, 10, 1000)
    assert z == pytest.approx(0.02 / math.sqrt(0.02 * 0.98 * 0.002))
    assert p == pytest.approx(0.5 * math.erfc(z / math.sqrt(2)))


def test_two_proportion_without_any_events_is_no_evidence() -> None:
    assert two_proportion_test(0, 100, 0, 100) == (0.0, 0.5)


def test_significantly_more_errors_fails_with_statistics() -> None:
    out = errors(0.03, 0.01, max_increase=0.005)
    assert out.verdict is FAIL
    assert out.statistics["p_value"] < 0.001
    assert out.statistics["z"] > 3
    assert out.statistics["difference"] == pytest.approx(0.02)
    assert out.statistics["canary_events"] == 30
    assert "p=" in out.reason and "alpha" in out.reason


def test_significant_but_tiny_increase_passes() -> None:
    out = errors(0.0110, 0.0100, n=2_000_000, max_increase=0.005)
    assert out.statistics["p_value"] < 0.001
    assert out.verdict is PASS
    assert "within tolerance" in out.reason


def test_large_but_not_significant_increase_passes() -> None:
    out = errors(0.04, 0.0, n=50, max_increase=0.005)  # 2 errors in 50 vs none
    assert out.verdict is PASS
    assert "not significant" in out.reason


def test_fewer_errors_than_stable_passes() -> None:
    assert errors(0.0, 0.05).verdict is PASS


def test_two_proportion_without_tolerance_fails_on_any_significant_increase() -> None:
    assert errors(0.03, 0.01).verdict is FAIL


def test_two_proportion_with_ratio_tolerance() -> None:
    assert errors(0.03, 0.01, max_ratio=4.0).verdict is PASS
    out = errors(0.03, 0.01, max_ratio=2.0)
    assert out.verdict is FAIL
    assert out.statistics["ratio"] == pytest.approx(3.0)


def test_missing_event_series_means_no_events() -> None:
    check = Check("errors", test=StatTest.TWO_PROPORTION)
    out = judge_metric(check, obs(0.0, requests=500), obs(0.0, requests=500))
    assert out.verdict is PASS
    assert out.statistics["canary_events"] == 0


def test_extrapolated_events_beyond_requests_are_clamped() -> None:
    check = Check("errors", test=StatTest.TWO_PROPORTION)
    canary, stable = obs(1.0, requests=100, events=100.4), obs(0.0, requests=100, events=0)
    out = judge_metric(check, canary, stable)
    assert out.statistics["canary_rate"] == 1.0


def test_two_proportion_without_requests_is_inconclusive() -> None:
    check = Check("errors", test=StatTest.TWO_PROPORTION)
    out = judge_metric(check, obs(0.0, requests=0), obs(0.0, requests=10))
    assert out.verdict is INCONCLUSIVE
    assert "no requests" in out.reason


# --- Mann-Whitney --------------------------------------------------------------------


def latency(canary: list[float], stable: list[float], **check: object) -> MetricResult:
    spec = Check("latency", test=StatTest.MANN_WHITNEY, **check)  # type: ignore[arg-type]
    return judge_metric(
        spec, obs(max(canary), samples=tuple(canary)), obs(max(stable), samples=tuple(stable))
    )


SLOW = [0.30 + 0.01 * i for i in range(20)]
FAST = [0.10 + 0.01 * i for i in range(20)]


def test_slower_canary_fails_with_u_p_and_effect() -> None:
    out = latency(SLOW, FAST, max_ratio=1.2)
    assert out.verdict is FAIL
    assert out.statistics["u"] == 400  # every canary sample above every stable one
    assert out.statistics["p_value"] < 1e-5
    assert out.statistics["cles"] == 1.0
    assert out.statistics["ratio"] == pytest.approx(mean(SLOW) / mean(FAST))


def mean(xs: list[float]) -> float:
    return sum(xs) / len(xs)


def test_faster_canary_passes() -> None:
    out = latency(FAST, SLOW, max_ratio=1.2)
    assert out.verdict is PASS
    assert out.statistics["p_value"] > 0.99


def test_identical_samples_pass() -> None:
    out = latency([0.1] * 30, [0.1] * 30, max_ratio=1.0)
    assert out.verdict is PASS
    assert out.statistics["p_value"] == 1.0


def test_significantly_but_slightly_slower_passes_within_ratio() -> None:
    slightly = [x * 1.05 for x in FAST]
    out = latency(slightly * 50, FAST * 50, max_ratio=1.2)
    assert out.statistics["p_value"] < 0.01
    assert out.verdict is PASS


def test_mann_whitney_with_absolute_tolerance() -> None:
    out = latency(SLOW, FAST, max_increase=0.5)
    assert out.verdict is PASS  # 0.2 s slower on average, 0.5 s allowed
    assert out.statistics["difference"] == pytest.approx(0.2)


def test_mann_whitney_respects_alpha() -> None:
    canary, stable = [0.2, 0.3, 0.4], [0.1, 0.15, 0.12]  # best possible p for 3 vs 3: 0.05
    assert latency(canary, stable, alpha=0.01).verdict is PASS
    assert latency(canary, stable, alpha=0.1).verdict is FAIL


def test_too_few_samples_is_inconclusive() -> None:
    out = latency([0.5, 0.6], FAST)
    assert out.verdict is INCONCLUSIVE
    assert out.reason == "too few samples: canary 2, stable 20 (need 3)"


# --- check validation ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"max_increase": 0.1, "max_ratio": 1.2}, "set max_increase or max_ratio, not both"),
        ({"max_increase": -0.1}, "max_increase must be >= 0"),
        ({"max_ratio": 0.0}, "max_ratio must be > 0"),
        ({"min_requests": -1.0}, "min_requests must be >= 0"),
        ({"alpha": 0.0}, "alpha must be between 0 and 0.5"),
        ({"alpha": 0.5}, "alpha must be between 0 and 0.5"),
        ({"beta": 0.6}, "beta must be between 0 and 0.5"),
        ({"max": math.nan}, "max must be a finite number"),
    ],
)
def test_invalid_checks_name_the_metric(kwargs: dict[str, float], message: str) -> None:
    with pytest.raises(AnalysisSpecError, match=f"metric 'lat': {message}"):
        Check("lat", **kwargs)  # type: ignore[arg-type]


# --- histogram expansion -------------------------------------------------------------


def test_samples_from_buckets_puts_each_observation_at_its_bucket_midpoint() -> None:
    samples = samples_from_buckets({0.1: 2.0, 0.5: 3.0, 1.0: 3.0, math.inf: 4.0})
    assert samples == (0.05, 0.05, 0.3, 1.0)


def test_samples_from_buckets_rounds_extrapolated_counts_and_ignores_dips() -> None:
    samples = samples_from_buckets({0.1: 1.6, 0.2: 1.4, 0.4: 3.0})
    assert samples == pytest.approx((0.05, 0.05, 0.3))


def test_samples_from_buckets_of_nothing() -> None:
    assert samples_from_buckets({}) == ()
    assert samples_from_buckets({0.1: 0.0, math.inf: 0.0}) == ()


def test_samples_from_buckets_scales_down_huge_histograms() -> None:
    samples = samples_from_buckets({0.1: 3e6, 0.2: 4e6})
    assert len(samples) == MAX_EXPANDED_SAMPLES
    assert samples.count(0.05) == pytest.approx(0.75 * MAX_EXPANDED_SAMPLES, abs=1)
