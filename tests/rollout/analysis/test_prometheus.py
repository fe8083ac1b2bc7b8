"""The analysis against a real Prometheus (Debian binary) scraping real exporter processes.

Three synthetic predictors (tests/support/prom.py) serve the predictor's own metrics:
stable ``v1`` (20 ms, 1% errors), a bad canary ``v2`` (3x slower, 5% errors) and an
equal canary ``v3`` (same as stable). Prometheus adds ``namespace`` and ``isvc`` as
static target labels, as in local runs.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from rollout._errors import AnalysisSpecError, BadQueryError, MetricSourceError
from rollout.analysis._analysis import Analysis, JudgeKind, load_analysis, parse_analysis
from rollout.analysis._prometheus import PrometheusSource
from rollout.analysis._results import AnalysisContext, Verdict
from rollout.analysis._source import MetricSource
from tests.fakes.metrics import FakeMetricSource
from tests.support.procs import free_port
from tests.support.prom import Exporter, PrometheusServer, scraped

INTERVAL_S = 10.0
LABELS = {"namespace": "models", "isvc": "demo"}


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrometheusServer]:
    workdir = tmp_path_factory.mktemp("prometheus")
    exporters = [
        Exporter(workdir, version="v1", role="stable", latency_ms=20, error_every=100),
        Exporter(workdir, version="v2", role="canary", latency_ms=60, error_every=20),
        Exporter(workdir, version="v3", role="canary", latency_ms=20, error_every=100),
    ]
    with scraped(exporters, workdir, [LABELS], INTERVAL_S + 1) as server:
        yield server


@pytest.fixture
def source(prometheus: PrometheusServer) -> Iterator[PrometheusSource]:
    src = PrometheusSource(prometheus.url, timeout_s=5.0)
    yield src
    src.close()


def context(canary: str) -> AnalysisContext:
    return AnalysisContext(
        namespace="models", isvc="demo", stable_version="v1", canary_version=canary,
        interval_s=INTERVAL_S,
    )


def test_default_analysis_fails_a_bad_canary(source: PrometheusSource) -> None:
    result = Analysis(load_analysis(), source).analyze(context("v2"))

    by_name = {m.name: m for m in result.metrics}
    assert result.verdict is Verdict.FAIL
    errors = by_name["error-rate"]
    assert errors.verdict is Verdict.FAIL, errors.reason
    assert errors.canary == pytest.approx(0.05, abs=0.01)  # under max 0.1: the z-test fails it
    assert errors.stable == pytest.approx(0.01, abs=0.005)
    assert errors.statistics["p_value"] < 1e-6
    latency = by_name["p99-latency"]
    assert latency.verdict is Verdict.FAIL, latency.reason
    assert latency.canary is not None and latency.stable is not None
    assert latency.canary > 2 * latency.stable
    assert latency.statistics["ratio"] == pytest.approx(3.0, rel=0.25)
    # Neither sheds load: no regression, though one interval cannot yet prove it.
    assert by_name["throttle-rate"].verdict is not Verdict.FAIL


def test_default_analysis_passes_an_equal_canary(source: PrometheusSource) -> None:
    analysis = Analysis(load_analysis(), source)
    ctx, results = context("v3"), []
    # Each analysis adds the window to the evidence, as each interval of a rollout
    # does; here the same window again, a stand-in for more of the same traffic.
    for _ in range(6):
        results.append(analysis.analyze(ctx))
        ctx = replace(ctx, evidence=results[-1].evidence)
        if results[-1].verdict is Verdict.PASS:
            break
    assert all(r.healthy for r in results), [m.reason for r in results for m in r.metrics]
    assert results[-1].verdict is Verdict.PASS, [m.reason for m in results[-1].metrics]
    for metric in results[0].metrics:  # judged on the whole window, not a handful of requests
        stats = metric.statistics
        assert stats.get("canary_requests", stats.get("canary_samples", 0)) > 500


def test_the_interval_judge_passes_an_equal_canary_on_one_window(
    source: PrometheusSource,
) -> None:
    spec = load_analysis()
    result = Analysis(replace(spec, judge=JudgeKind.INTERVAL), source).analyze(context("v3"))
    assert result.verdict is Verdict.PASS, [m.reason for m in result.metrics]
    assert result.evidence == {}


RANGE_SPEC = """
metrics:
  - name: mean-latency
    query: >-
      sum(rate(modelctl_request_duration_seconds_sum{version="{version}"}[{interval}]))
      / sum(rate(modelctl_request_duration_seconds_count{version="{version}"}[{interval}]))
    samples_query: >-
      sum(rate(modelctl_request_duration_seconds_sum{version="{version}"}[{step}]))
      / sum(rate(modelctl_request_duration_seconds_count{version="{version}"}[{step}]))
    samples: range
    samples_step_s: 2
    test: mann-whitney
    max_ratio: 1.2
"""


def test_range_samples_compare_per_step_values(source: PrometheusSource) -> None:
    analysis = Analysis(parse_analysis(RANGE_SPEC), source)

    bad = analysis.analyze(context("v2")).metrics[0]
    equal = analysis.analyze(context("v3")).metrics[0]

    assert bad.verdict is Verdict.FAIL, bad.reason
    assert bad.statistics["canary_samples"] >= 4
    assert bad.statistics["ratio"] == pytest.approx(3.0, rel=0.25)
    assert equal.verdict is not Verdict.FAIL, equal.reason

    interval = Analysis(parse_analysis("judge: interval\n" + RANGE_SPEC), source)
    bad = interval.analyze(context("v2")).metrics[0]
    equal = interval.analyze(context("v3")).metrics[0]
    assert bad.statistics["cles"] == 1.0  # every canary step slower than every stable step
    assert (bad.verdict, equal.verdict) == (Verdict.FAIL, Verdict.PASS), equal.reason


def test_promql_prometheus_rejects_is_an_error_naming_the_metric(
    source: PrometheusSource,
) -> None:
    spec = parse_analysis(
        """
metrics:
  - name: broken-latency
    query: 'sum(rate(modelctl_requests_total{version="{version}"}[{interval}])) by'
"""
    )
    analysis = Analysis(spec, source)

    expected = r"^analysis metric 'broken-latency': query rejected: 1:\d+: parse error"
    with pytest.raises(AnalysisSpecError, match=expected):
        analysis.analyze(context("v2"))
    with pytest.raises(AnalysisSpecError, match="'broken-latency'"):
        analysis.validate(context("v2"))


def test_a_query_yielding_many_series_is_an_error_naming_the_metric(
    source: PrometheusSource,
) -> None:
    spec = parse_analysis(
        """
metrics:
  - name: per-code
    query: 'rate(modelctl_requests_total{version="{version}"}[{interval}])'
"""
    )
    expected = r"'per-code': query rejected: returned 2 series.*sum"
    with pytest.raises(AnalysisSpecError, match=expected):
        Analysis(spec, source).analyze(context("v2"))


def test_unreachable_prometheus_is_inconclusive_with_the_reason() -> None:
    source = PrometheusSource(f"http://user:hunter2@127.0.0.1:{free_port()}", timeout_s=2.0)
    started = time.monotonic()

    result = Analysis(load_analysis(), source).analyze(context("v2"))

    assert result.verdict is Verdict.INCONCLUSIVE
    for metric in result.metrics:
        assert metric.verdict is Verdict.INCONCLUSIVE
        assert "unreachable (Connection refused)" in metric.reason
        assert "hunter2" not in metric.reason
    assert time.monotonic() - started < 5  # one refused connection, not one per query


def test_unreachable_prometheus_fails_validation() -> None:
    source = PrometheusSource(f"http://127.0.0.1:{free_port()}", timeout_s=2.0)
    with pytest.raises(MetricSourceError, match="unreachable"):
        Analysis(load_analysis(), source).validate(context("v2"))


def test_a_server_that_is_not_prometheus_is_a_source_error(tmp_path: Path) -> None:
    exporter = Exporter(tmp_path, version="v9", role="stable", latency_ms=1)
    try:
        exporter.wait_ready()
        source = PrometheusSource(f"http://{exporter.address}", timeout_s=2.0)
        with pytest.raises(MetricSourceError, match="did not answer like a Prometheus server"):
            source.query("up", time.time())
    finally:
        exporter.stop()


def test_bad_data_is_a_bad_query_error(source: PrometheusSource) -> None:
    with pytest.raises(BadQueryError, match="parse error"):
        source.query("sum(", time.time())
    with pytest.raises(BadQueryError):
        source.query_range("rate(up[1s]", time.time() - 5, time.time(), 1)


def test_scalars_vectors_and_ranges(source: PrometheusSource, prometheus: PrometheusServer) -> None:
    now = time.time()
    assert source.query("scalar(vector(2))", now) == 2.0
    assert source.query("vector(0) / vector(0)", now) is None  # NaN is no data
    buckets = source.query_vector(
        'sum by (le) (modelctl_request_duration_seconds_bucket{version="v1"})', now
    )
    assert {labels["le"] for labels, _ in buckets} >= {"0.001", "30.0", "+Inf"}
    points = source.query_range('sum(up{job="predictors"})', now - 6, now, 2)
    assert points == [3.0] * len(points) and 3 <= len(points) <= 4


@pytest.fixture(params=["fake", "prometheus"])
def any_source(request: pytest.FixtureRequest) -> Iterator[MetricSource]:
    """The contract every MetricSource keeps, checked on the fake and the real adapter."""
    if request.param == "fake":
        yield FakeMetricSource()
        return
    server: PrometheusServer = request.getfixturevalue("prometheus")
    real = PrometheusSource(server.url, timeout_s=5.0)
    yield real
    real.close()


def test_contract_a_query_that_matches_nothing_yields_nothing(any_source: MetricSource) -> None:
    now = time.time()
    assert isinstance(any_source, MetricSource)
    assert any_source.query('modelctl_requests_total{version="nope"}', now) is None
    assert any_source.query_vector('modelctl_requests_total{version="nope"}', now) == []
    nothing = 'sum(modelctl_requests_total{version="nope"})'
    assert any_source.query_range(nothing, now - 4, now, 1) == []
