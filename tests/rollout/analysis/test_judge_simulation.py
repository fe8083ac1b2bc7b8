"""The judge's quality, measured by simulating rollouts with the shipped default analysis.

Model of one analysis interval, per version: ``n`` requests; latencies lognormal
(median 80 ms, sigma 0.4, so p99 ~ 2.5x p50), recorded in the predictor's histogram
buckets; each request independently a 5xx (0.5%) or a 429 (1%). From that the test
computes what the default PromQL would return (5xx and 429 counts and rates, request
count, p99 by Prometheus' histogram_quantile, the bucket counts that
``samples_from_buckets`` expands) and runs the real judge on the real default checks.

Rollback rule (the engine's, rollout/_decide.py, with its default ``failure_limit = 2``):
each step is analysed once per interval; Pass advances; Inconclusive holds the step
and analyses again; Fail counts one failure (cumulative over the rollout) and holds;
the second failure rolls back. An A/A rollout has 3 steps (at most 10 intervals); a
regression "rolls back within two intervals" when its first two analyses both fail.

Requirements (issue 5): A/A rolls back in at most 1% of 200 rollouts; a canary 1.5x
slower (every latency scaled, so its p99 too), or with a 5xx rate 2 points higher,
rolls back in at least 95% of 200 trials within two intervals, at 50 requests per
interval per version. The latency figure holds at 50 requests. The error figure
cannot: with 100 canary requests in two intervals even a 0%-baseline judge that fails
on any error catches +2 points only 1 - 0.98^100 = 87% of the time. It is therefore
asserted at 1500 requests per interval (25 requests/s over a 60 s interval),
and the 50-request figure is printed next to that bound.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np
import pytest

from predictor._metrics import LATENCY_BUCKETS_S
from rollout.analysis._analysis import AnalysisSpec, load_analysis
from rollout.analysis._judge import Measurement, judge_metric, overall_verdict, samples_from_buckets
from rollout.analysis._results import Verdict

# The predictor's own request_duration buckets, +Inf last.
BUCKETS_S = (*LATENCY_BUCKETS_S, math.inf)
TRIALS = 200
MANY = 1500  # requests per interval per version where +2 points of 5xx is detectable
FAILURE_LIMIT = 2
AA_STEPS = 3
AA_MAX_INTERVALS = 10


@dataclass(frozen=True)
class Traffic:
    """One version's behaviour over an interval."""

    latency_scale: float = 1.0
    error_rate: float = 0.005
    throttle_rate: float = 0.01
    median_s: float = 0.08
    sigma: float = 0.4


STABLE = Traffic()


def histogram_quantile(q: float, cumulative: np.ndarray) -> float | None:
    """Prometheus' histogram_quantile over cumulative bucket counts (BUCKETS_S order)."""
    total = float(cumulative[-1])
    if total == 0:
        return None
    rank = q * total
    b = int(np.searchsorted(cumulative[:-1], rank, side="left"))
    if b == len(BUCKETS_S) - 1:  # in +Inf: the largest finite bound
        return BUCKETS_S[-2]
    start = 0.0 if b == 0 else BUCKETS_S[b - 1]
    below = 0.0 if b == 0 else float(cumulative[b - 1])
    return start + (BUCKETS_S[b] - start) * (rank - below) / (float(cumulative[b]) - below)


def observe(rng: np.random.Generator, n: int, traffic: Traffic) -> dict[str, Measurement]:
    """What the default analysis' queries would return for one version and interval."""
    latencies = traffic.median_s * traffic.latency_scale * np.exp(
        traffic.sigma * rng.standard_normal(n)
    )
    outcome = rng.random(n)  # below error_rate: 5xx; the next throttle_rate: 429
    errors = int((outcome < traffic.error_rate).sum())
    throttled = int((outcome < traffic.error_rate + traffic.throttle_rate).sum()) - errors
    per_bucket = np.bincount(
        np.searchsorted(np.array(BUCKETS_S), latencies, side="left"), minlength=len(BUCKETS_S)
    )
    cumulative = np.cumsum(per_bucket).astype(float)
    samples = samples_from_buckets(dict(zip(BUCKETS_S, cumulative, strict=True)))
    return {
        "error-rate": Measurement(value=errors / n, requests=n, events=errors),
        "throttle-rate": Measurement(value=throttled / n, requests=n, events=throttled),
        "p99-latency": Measurement(
            value=histogram_quantile(0.99, cumulative), requests=n, samples=samples
        ),
    }


def analyse(spec: AnalysisSpec, rng: np.random.Generator, n: int, canary: Traffic) -> Verdict:
    c, s = observe(rng, n, canary), observe(rng, n, STABLE)
    return overall_verdict(judge_metric(m.check, c[m.name], s[m.name]) for m in spec.metrics)


def rolls_back(
    spec: AnalysisSpec,
    rng: np.random.Generator,
    n: int,
    canary: Traffic,
    steps: int,
    max_intervals: int,
) -> bool:
    """The engine's rule over one rollout: see the module docstring."""
    failures = step = 0
    for _ in range(max_intervals):
        if step == steps:
            return False
        verdict = analyse(spec, rng, n, canary)
        if verdict is Verdict.FAIL:
            failures += 1
            if failures >= FAILURE_LIMIT:
                return True
        elif verdict is Verdict.PASS:
            step += 1
    return False


def rollback_rate(
    canary: Traffic, *, n: int, steps: int, max_intervals: int, seed: int
) -> float:
    spec, rng = load_analysis(), np.random.default_rng(seed)
    hits = sum(rolls_back(spec, rng, n, canary, steps, max_intervals) for _ in range(TRIALS))
    return hits / TRIALS


@pytest.fixture
def report(capsys: pytest.CaptureFixture[str]) -> Callable[[str], None]:
    """Print a figure to the terminal whether or not pytest captures output."""

    def emit(line: str) -> None:
        with capsys.disabled():
            print(f"\n[judge simulation] {line}")

    return emit


def test_histogram_quantile_matches_prometheus_interpolation() -> None:
    # 10 observations: 4 in (0.05, 0.075], 6 in (0.075, 0.1]; p50 rank 5 -> 1/6 into the 2nd.
    cumulative = np.zeros(len(BUCKETS_S))
    cumulative[6:] = 4
    cumulative[7:] = 10
    assert histogram_quantile(0.5, cumulative) == pytest.approx(0.075 + 0.025 / 6)
    assert histogram_quantile(0.5, np.zeros(len(BUCKETS_S))) is None


def test_aa_rollouts_roll_back_at_most_one_percent(report: Callable[[str], None]) -> None:
    rate = rollback_rate(STABLE, n=50, steps=AA_STEPS, max_intervals=AA_MAX_INTERVALS, seed=1)
    report(f"A/A: {rate:.1%} of {TRIALS} rollouts ({AA_STEPS} steps, 50 req/interval) rolled back")
    assert rate <= 0.01, f"A/A rollback rate {rate:.1%} > 1%"


def test_slower_canary_rolls_back_within_two_intervals(report: Callable[[str], None]) -> None:
    slow = replace(STABLE, latency_scale=1.5)
    rate = rollback_rate(slow, n=50, steps=2, max_intervals=2, seed=2)
    report(f"p99 1.5x stable: {rate:.1%} of {TRIALS} rolled back within 2 intervals (50 req)")
    assert rate >= 0.95, f"1.5x latency caught in only {rate:.1%}"


def test_erroring_canary_rolls_back_within_two_intervals(report: Callable[[str], None]) -> None:
    erring = replace(STABLE, error_rate=STABLE.error_rate + 0.02)
    at_50 = rollback_rate(erring, n=50, steps=2, max_intervals=2, seed=3)
    at_many = rollback_rate(erring, n=MANY, steps=2, max_intervals=2, seed=4)
    aa_many = rollback_rate(
        STABLE, n=MANY, steps=AA_STEPS, max_intervals=AA_MAX_INTERVALS, seed=5
    )
    bound_50 = 1 - 0.98**100
    report(
        f"5xx +2 points: {at_many:.1%} of {TRIALS} rolled back within 2 intervals at {MANY} req "
        f"(A/A {aa_many:.1%}); at 50 req {at_50:.1%} (no judge can exceed {bound_50:.1%})"
    )
    assert at_many >= 0.95, f"+2 points of 5xx caught in only {at_many:.1%} at {MANY} req"
    assert aa_many <= 0.01, f"A/A rollback rate {aa_many:.1%} > 1% at {MANY} req"
    assert at_50 <= bound_50
