"""The generative default (``default_analysis_llm.yaml``) against a real Prometheus scraping
real exporter processes that serve the LLM server's own series (tests/support/prom.py
with ``Generation``: ``predictor.llm._metrics.LLMMetrics`` through prometheus_client).

Stable ``v1``: TTFT 200 ms, TPOT 40 ms, 11 tokens a request (10 gaps), 1% errors. Canaries:
``v2`` TTFT 2x, ``v3`` TPOT 2x, ``v4`` the same as stable, ``v5`` the same speed but
answers three times as long (31 tokens), which the request-latency default takes for a
regression. Prometheus adds ``namespace`` and ``isvc`` as static target labels.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

import pytest

from rollout.analysis._analysis import Analysis, AnalysisSpec, JudgeKind, load_analysis
from rollout.analysis._prometheus import PrometheusSource
from rollout.analysis._results import AnalysisContext, AnalysisResult, MetricResult, Verdict
from rollout.analysis._setup import stable_traffic_needs
from tests.support.prom import Exporter, Generation, PrometheusServer, scraped

INTERVAL_S = 10.0
RPS = 200
LABELS = {"namespace": "models", "isvc": "chat"}
STABLE = Generation(ttft_ms=200, tpot_ms=40, tokens=11)
CANARIES = {
    "v2": replace(STABLE, ttft_ms=400),  # slower to the first token
    "v3": replace(STABLE, tpot_ms=80),  # slower decode
    "v4": STABLE,  # equal
    "v5": replace(STABLE, tokens=31),  # longer answers, the same speed
}


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrometheusServer]:
    workdir = tmp_path_factory.mktemp("prometheus-llm")
    exporters = [Exporter(workdir, version="v1", role="stable", error_every=100, rps=RPS,
                          model="chat", generation=STABLE)]
    exporters += [Exporter(workdir, version=v, role="canary", error_every=100, rps=RPS,
                           model="chat", generation=g) for v, g in CANARIES.items()]
    with scraped(exporters, workdir, [LABELS], INTERVAL_S + 1) as server:
        yield server


@pytest.fixture
def source(prometheus: PrometheusServer) -> Iterator[PrometheusSource]:
    src = PrometheusSource(prometheus.url, timeout_s=5.0)
    yield src
    src.close()


@pytest.fixture(scope="module")
def llm() -> AnalysisSpec:
    return load_analysis(task="llm")


def context(canary: str, version: str = "v1") -> AnalysisContext:
    return AnalysisContext(namespace="models", isvc="chat", stable_version=version,
                           canary_version=canary, interval_s=INTERVAL_S)


def by_name(result: AnalysisResult) -> dict[str, MetricResult]:
    return {m.name: m for m in result.metrics}


def until_pass(analysis: Analysis, ctx: AnalysisContext, tries: int = 6) -> list[AnalysisResult]:
    """Analyse the same window again and again on the growing evidence (a stand-in for
    more intervals of the same traffic) until it passes or ``tries`` run out."""
    results: list[AnalysisResult] = []
    for _ in range(tries):
        results.append(analysis.analyze(ctx))
        ctx = replace(ctx, evidence=results[-1].evidence)
        if results[-1].verdict is Verdict.PASS:
            break
    return results


def test_a_canary_twice_as_slow_to_the_first_token_fails_ttft(
    source: PrometheusSource, llm: AnalysisSpec,
) -> None:
    result = Analysis(llm, source).analyze(context("v2"))

    metrics = by_name(result)
    assert result.verdict is Verdict.FAIL
    ttft = metrics["ttft-p99"]
    assert ttft.verdict is Verdict.FAIL, ttft.reason
    assert ttft.statistics["ratio"] == pytest.approx(2.0, rel=0.25)
    assert ttft.canary is not None and ttft.stable is not None
    assert ttft.canary > 1.5 * ttft.stable  # the p99 shown moved too
    assert metrics["tpot-p99"].verdict is not Verdict.FAIL, metrics["tpot-p99"].reason
    assert metrics["error-rate"].verdict is not Verdict.FAIL


def test_a_canary_twice_as_slow_per_token_fails_tpot(
    source: PrometheusSource, llm: AnalysisSpec,
) -> None:
    result = Analysis(llm, source).analyze(context("v3"))

    metrics = by_name(result)
    assert result.verdict is Verdict.FAIL
    tpot = metrics["tpot-p99"]
    assert tpot.verdict is Verdict.FAIL, tpot.reason
    assert tpot.statistics["ratio"] == pytest.approx(2.0, rel=0.25)
    assert tpot.canary is not None and tpot.stable is not None and tpot.canary > tpot.stable
    assert metrics["ttft-p99"].verdict is not Verdict.FAIL, metrics["ttft-p99"].reason


def test_an_equal_canary_passes(source: PrometheusSource, llm: AnalysisSpec) -> None:
    results = until_pass(Analysis(llm, source), context("v4"))

    assert all(r.healthy for r in results), [m.reason for r in results for m in r.metrics]
    assert results[-1].verdict is Verdict.PASS, [m.reason for m in results[-1].metrics]
    first = by_name(results[0])
    # Judged on every observation of the window: each request's TTFT, each token gap.
    assert first["ttft-p99"].statistics["canary_samples"] > 500
    assert first["tpot-p99"].statistics["canary_samples"] > 5000


def test_the_interval_judge_fails_both_regressions_and_passes_an_equal_canary(
    source: PrometheusSource, llm: AnalysisSpec,
) -> None:
    analysis = Analysis(replace(llm, judge=JudgeKind.INTERVAL), source)
    verdicts = {v: {m.name: m.verdict for m in analysis.analyze(context(v)).metrics}
                for v in ("v2", "v3", "v4")}
    assert verdicts["v2"]["ttft-p99"] is Verdict.FAIL
    assert verdicts["v3"]["tpot-p99"] is Verdict.FAIL
    assert set(verdicts["v4"].values()) == {Verdict.PASS}, verdicts["v4"]


def test_longer_answers_at_the_same_speed_pass_here_but_fail_request_latency(
    source: PrometheusSource, llm: AnalysisSpec,
) -> None:
    """Why the generative default has no end-to-end latency check: three times the
    tokens at the same TTFT and TPOT is about 2.3x the request duration."""
    classic = by_name(Analysis(load_analysis(), source).analyze(context("v5")))
    assert classic["p99-latency"].verdict is Verdict.FAIL, classic["p99-latency"].reason

    results = until_pass(Analysis(llm, source), context("v5"))
    assert results[-1].verdict is Verdict.PASS, [m.reason for m in results[-1].metrics]


def test_tpot_samples_are_token_gaps_and_its_requests_are_requests(
    source: PrometheusSource, llm: AnalysisSpec,
) -> None:
    analysis = Analysis(llm, source)
    tpot = next(m for m in llm.metrics if m.name == "tpot-p99")
    seen = analysis.measure(tpot, context("v4"), "canary")

    assert seen.requests is not None and seen.requests > 0
    # about RPS * INTERVAL_S requests (increase() extrapolates a little), ten gaps each
    assert seen.requests == pytest.approx(RPS * INTERVAL_S, rel=0.2)
    assert len(seen.samples) / seen.requests == pytest.approx(STABLE.tokens - 1, rel=0.1)
    # rollout start's traffic check reads requests, not tokens
    needs = stable_traffic_needs(analysis, context("v1"), (5, 25, 50))
    assert needs is not None
    assert needs.requests_per_interval == pytest.approx(RPS * INTERVAL_S, rel=0.2)


def test_the_generative_default_validates_against_prometheus(
    source: PrometheusSource, llm: AnalysisSpec,
) -> None:
    Analysis(llm, source).validate(context("v4"))  # every query accepted
