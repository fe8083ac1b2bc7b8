"""Analysis files (strict loading, the shipped defaults) and running them on a fake source."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import pytest

from rollout._errors import (
    AnalysisSpecError,
    BadQueryError,
    MetricSourceError,
    RolloutError,
    SourceUnreachableError,
)
from rollout.analysis._analysis import (
    Analysis,
    JudgeKind,
    SamplesKind,
    load_analysis,
    parse_analysis,
)
from rollout.analysis._judge import StatTest
from rollout.analysis._promql import check_template, render
from rollout.analysis._results import AnalysisContext, Verdict
from tests.fakes.metrics import FakeMetricSource

CTX = AnalysisContext(
    namespace="models", isvc="demo", stable_version="v1", canary_version="v2", interval_s=60
)
NOW = 1_800_000_000.0


def spec_text(*metrics: str, judge: str | None = None) -> str:
    """An analysis file with one list item per metric body (YAML lines, unindented)."""
    items = []
    for body in metrics:
        first, *rest = body.strip().splitlines()
        items.append("\n".join(["  - " + first, *("    " + line for line in rest)]))
    head = f"judge: {judge}\n" if judge else ""
    return head + "metrics:\n" + "\n".join(items) + "\n"


def load_error(metric: str) -> str:
    with pytest.raises(AnalysisSpecError) as info:
        parse_analysis(spec_text(metric), source="a.yaml")
    return str(info.value)


# --- the shipped defaults -------------------------------------------------------------


def test_defaults_load_with_the_three_checks() -> None:
    spec = load_analysis()
    by_name = {m.name: m for m in spec.metrics}
    assert list(by_name) == ["error-rate", "throttle-rate", "p99-latency"]
    assert by_name["error-rate"].check.test is StatTest.TWO_PROPORTION
    assert by_name["throttle-rate"].check.test is StatTest.TWO_PROPORTION
    assert by_name["p99-latency"].check.test is StatTest.MANN_WHITNEY
    assert by_name["p99-latency"].samples is SamplesKind.HISTOGRAM
    assert all(m.check.min_requests == 50 for m in spec.metrics)
    assert "histogram_quantile(0.99" in by_name["p99-latency"].query


def test_the_generative_default_loads_strictly_with_ttft_and_tpot() -> None:
    spec = load_analysis(task="llm")
    assert spec.source == "default_analysis_llm.yaml" and spec.judge is JudgeKind.SEQUENTIAL
    by_name = {m.name: m for m in spec.metrics}
    assert list(by_name) == ["error-rate", "throttle-rate", "ttft-p99", "tpot-p99"]
    classic = {m.name: m for m in load_analysis().metrics}
    for name in ("error-rate", "throttle-rate"):  # the same checks as for any model
        assert by_name[name] == classic[name]
    for name, series in (("ttft-p99", "modelctl_llm_time_to_first_token_seconds"),
                         ("tpot-p99", "modelctl_llm_time_per_output_token_seconds")):
        metric = by_name[name]
        assert metric.check.test is StatTest.MANN_WHITNEY and metric.check.max_ratio == 1.2
        assert metric.samples is SamplesKind.HISTOGRAM and metric.check.min_requests == 50
        assert (metric.check.alpha, metric.check.beta) == (0.01, 0.25)
        quantile = f"histogram_quantile(0.99, sum by (le) (rate({series}_bucket"
        assert metric.query.startswith(quantile)
        assert metric.samples_query is not None
        assert metric.samples_query.startswith(f"sum by (le) (increase({series}_bucket")
        # a request is a request that got its first token: for TPOT too, not a token gap
        assert metric.count_query is not None
        assert "modelctl_llm_time_to_first_token_seconds_count" in metric.count_query
    assert not any("modelctl_request_duration_seconds" in (m.samples_query or m.query)
                   for m in spec.metrics)


def test_the_shipped_accuracy_check_loads_strictly() -> None:
    """rollout/analysis/accuracy_check.yaml: the labels' wrong share, two-proportion;
    tests/system/devstack/test_accuracy_rehearsal.py runs it on real Prometheus."""
    path = Path(__file__).resolve().parents[3] / "rollout" / "analysis" / "accuracy_check.yaml"
    spec = load_analysis(path)
    [metric] = spec.metrics
    assert metric.name == "accuracy" and spec.judge is JudgeKind.SEQUENTIAL
    assert metric.check.test is StatTest.TWO_PROPORTION and metric.check.max_increase == 0.05
    assert metric.check.min_requests == 10
    assert metric.events_query is not None and 'outcome="wrong"' in metric.events_query
    assert metric.count_query is not None and 'outcome=~"correct|wrong"' in metric.count_query
    assert all("modelctl_feedback_labels_total" in q for q in
               (metric.query, metric.count_query, metric.events_query))


@pytest.mark.parametrize("task", [None, "llm"])
def test_defaults_render_for_both_versions(task: str | None) -> None:
    fake = FakeMetricSource()
    Analysis(load_analysis(task=task), fake, clock=lambda: NOW).analyze(CTX)
    queries = [promql for _, promql, _ in fake.calls]
    assert all('namespace="models",isvc="demo"' in q for q in queries)
    assert all("[60s]" in q for q in queries)
    assert any('version="v1"' in q for q in queries) and any('version="v2"' in q for q in queries)
    assert not any("{" + p + "}" in q for q in queries for p in ("version", "interval"))


def test_a_file_on_disk_loads(tmp_path: Path) -> None:
    path = tmp_path / "analysis.yaml"
    path.write_text(spec_text('name: up\nquery: up{version="{version}"}'))
    assert load_analysis(path).metrics[0].name == "up"


def test_a_missing_file_is_one_clear_error(tmp_path: Path) -> None:
    with pytest.raises(AnalysisSpecError, match=r"analysis file '.*nope.yaml': No such file"):
        load_analysis(tmp_path / "nope.yaml")


# --- strict loading: every error names the metric -------------------------------------


def test_unknown_key_names_the_metric_and_the_key() -> None:
    message = load_error('name: error-rate\nquery: x{version="{version}"}\nmaxx: 0.1')
    assert message.startswith("a.yaml: metric 'error-rate': unknown key 'maxx' (allowed: ")


def test_unknown_top_level_key() -> None:
    with pytest.raises(AnalysisSpecError, match="top level: unknown key 'metric'"):
        parse_analysis("metric: []")


def test_unknown_key_in_defaults() -> None:
    with pytest.raises(AnalysisSpecError, match="defaults: unknown key 'test'"):
        parse_analysis("defaults: {test: none}\n" + spec_text('name: a\nquery: x{role="{role}"}'))


def test_defaults_apply_and_metrics_override_them() -> None:
    spec = parse_analysis(
        "defaults: {min_requests: 10, alpha: 0.05}\n"
        + spec_text(
            'name: a\nquery: x{role="{role}"}\ncount_query: n{role="{role}"}',
            'name: b\nquery: y{role="{role}"}\ncount_query: n{role="{role}"}\nmin_requests: 99',
        )
    )
    a, b = spec.metrics
    assert (a.check.min_requests, a.check.alpha) == (10, 0.05)
    assert (b.check.min_requests, b.check.alpha) == (99, 0.05)
    assert spec.judge is JudgeKind.SEQUENTIAL and a.check.beta == 0.25


def test_the_judge_and_beta_are_chosen_in_the_file() -> None:
    metric = 'name: a\nquery: x{role="{role}"}\nbeta: 0.3'
    spec = parse_analysis("judge: interval\n" + spec_text(metric))
    assert spec.judge is JudgeKind.INTERVAL and spec.metrics[0].check.beta == 0.3
    with pytest.raises(AnalysisSpecError, match="judge must be one of sequential, interval"):
        parse_analysis("judge: sometimes\n" + spec_text(metric), source="a.yaml")
    with pytest.raises(AnalysisSpecError, match=r"beta must be between 0 and 0\.5"):
        parse_analysis(spec_text('name: a\nquery: x{role="{role}"}\nbeta: 0.7'))
    assert load_analysis().judge is JudgeKind.SEQUENTIAL


@pytest.mark.parametrize(
    ("metric", "message"),
    [
        ('query: x{version="{version}"}', "metric #1 needs a 'name'"),
        ("name: a", "metric 'a': needs a 'query'"),
        ('name: a\nquery: x{version="{version}"}\ntest: t-test', "test must be one of"),
        ('name: a\nquery: x{version="{version}"}\ntest: no', "test must be one of"),
        ('name: a\nquery: x{version="{version}"}\nmax: high', "max must be a number, got 'high'"),
        ('name: a\nquery: x{version="{version}"}\nmax: true', "max must be a number"),
        ('name: a\nquery: 42', "query must be a string"),
        ('name: a\nquery: x{version="{version}"}\nmax_ratio: 1.2\nmax_increase: 1', "not both"),
        ('name: a\nquery: x{version="{verison}"}', "uses unknown placeholder {verison}"),
        ('name: a\nquery: sum(x{version="{version}"}', "query has an unclosed '('"),
        ('name: a\nquery: x{version="{version}"}[{interval}]]', "unbalanced ']' at column"),
        ("name: a\nquery: 'x{version=\"{version}}'", "unterminated string"),
        ("name: a\nquery: sum(up)", "cannot tell canary from stable"),
        ('name: a\nquery: x{role="{role}"}\ntest: two-proportion', "needs count_query and"),
        ('name: a\nquery: x{role="{role}"}\ntest: mann-whitney', "needs samples_query"),
        ('name: a\nquery: x{role="{role}"}\nmin_requests: 5', "min_requests needs count_query"),
        ('name: a\nquery: x{role="{role}"}\nevents_query: e{role="{role}"}', "only used by"),
        ('name: a\nquery: x{role="{role}"}\nsamples_query: e{role="{role}"}', "only used by"),
        ('name: a\nquery: x{role="{role}"}[{step}]', "unknown placeholder {step}"),
        (
            'name: a\nquery: x{role="{role}"}\ntest: mann-whitney\n'
            'samples_query: s{role="{role}"}\nsamples: range',
            "samples: range and samples_step_s go together",
        ),
        (
            'name: a\nquery: x{role="{role}"}\ntest: mann-whitney\n'
            'samples_query: s{role="{role}"}\nsamples: range\nsamples_step_s: 0',
            "samples_step_s must be > 0",
        ),
    ],
)
def test_invalid_metric(metric: str, message: str) -> None:
    error = load_error(metric)
    assert message in error
    assert error.startswith("a.yaml: ")


def test_duplicate_metric_names() -> None:
    text = spec_text('name: a\nquery: x{role="{role}"}', 'name: a\nquery: y{role="{role}"}')
    with pytest.raises(AnalysisSpecError, match="metric 'a' is defined twice"):
        parse_analysis(text)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("metrics: [", "not valid YAML at line 1"),
        ("- a\n- b", "expected a mapping"),
        ("metrics: []", "'metrics' must be a non-empty list"),
        ("metrics:\n  - just-a-name", "metric #1 must be a mapping"),
    ],
)
def test_invalid_files(text: str, message: str) -> None:
    with pytest.raises(AnalysisSpecError, match=message):
        parse_analysis(text)


# --- templates ------------------------------------------------------------------------


def test_label_matchers_and_regex_repetitions_are_not_placeholders() -> None:
    template = 'x{code=~"5.{2}",version="{version}"}'
    assert check_template(template) is None
    assert render(template, {"version": "v1"}) == 'x{code=~"5.{2}",version="v1"}'


def test_brackets_inside_strings_do_not_count() -> None:
    assert check_template('x{path=~"/a(b", version="{version}"}') is None


def test_unsafe_context_values_are_refused() -> None:
    ctx = AnalysisContext("models", "demo", "v1", 'v2"} or vector(1) #', 60)
    with pytest.raises(RolloutError, match="cannot be used in a PromQL label value"):
        Analysis(load_analysis(), FakeMetricSource()).analyze(ctx)


# --- running an analysis on a fake source ---------------------------------------------

SIMPLE = spec_text(
    """
name: errors
query: rate{version="{version}",w="{interval}"}
count_query: requests{version="{version}"}
events_query: errors{version="{version}"}
test: two-proportion
max_increase: 0.01
min_requests: 50
"""
)


def fill_errors(fake: FakeMetricSource, canary: float, stable: float, n: float = 1000) -> None:
    for version, rate in (("v2", canary), ("v1", stable)):
        fake.set_value(f'rate{{version="{version}",w="60s"}}', rate)
        fake.set_value(f'requests{{version="{version}"}}', n)
        fake.set_value(f'errors{{version="{version}"}}', rate * n)


def test_analyze_fails_a_worse_canary_and_passes_an_equal_one() -> None:
    fake = FakeMetricSource()
    analysis = Analysis(parse_analysis("judge: interval\n" + SIMPLE), fake, clock=lambda: NOW)

    fill_errors(fake, canary=0.05, stable=0.01)
    failed = analysis.analyze(CTX)
    fill_errors(fake, canary=0.01, stable=0.01)
    passed = analysis.analyze(CTX)

    assert failed.verdict is Verdict.FAIL
    (metric,) = failed.metrics
    assert (metric.canary, metric.stable, metric.tolerance) == (0.05, 0.01, 0.01)
    assert metric.statistics["canary_events"] == 50
    assert passed.verdict is Verdict.PASS
    assert failed.at == NOW
    assert {at for _, _, (at,) in fake.calls} == {NOW}
    assert failed.evidence == {} and passed.evidence == {}  # nothing carried over


def test_the_sequential_judge_adds_every_interval_to_the_evidence() -> None:
    fake = FakeMetricSource()
    analysis = Analysis(parse_analysis(SIMPLE), fake, clock=lambda: NOW)
    fill_errors(fake, canary=0.01, stable=0.01, n=300)

    ctx, verdicts = CTX, []
    for _ in range(4):
        result = analysis.analyze(ctx)
        verdicts.append(result.verdict)
        ctx = replace(ctx, evidence=result.evidence)
    # One interval of 300 requests a version cannot bound the difference within 1
    # point; four can. Until then the result is healthy, so the engine may step on.
    assert verdicts[0] is Verdict.INCONCLUSIVE and verdicts[-1] is Verdict.PASS
    evidence = ctx.evidence["errors"]
    assert (evidence.intervals, evidence.canary.n, evidence.canary.events) == (4, 1200, 12)
    first = Analysis(parse_analysis(SIMPLE), fake).analyze(CTX)
    assert first.healthy and first.metrics[0].accumulating

    fill_errors(fake, canary=0.05, stable=0.01)
    worse = analysis.analyze(CTX)
    assert worse.verdict is Verdict.FAIL and not worse.healthy
    assert worse.metrics[0].statistics["canary_requests"] == 1000
    assert worse.metrics[0].statistics["p_value"] < 0.01

def test_too_few_requests_is_inconclusive() -> None:
    fake = FakeMetricSource()
    fill_errors(fake, canary=0.5, stable=0.0, n=20)
    result = Analysis(parse_analysis(SIMPLE), fake).analyze(CTX)
    assert result.verdict is Verdict.INCONCLUSIVE
    assert result.metrics[0].reason == "too few canary requests: 20 < 50"


def test_source_errors_are_inconclusive_data() -> None:
    fake = FakeMetricSource()
    fill_errors(fake, canary=0.01, stable=0.01)
    fake.fail(MetricSourceError("Prometheus answered HTTP 503"), containing='version="v1"')

    result = Analysis(parse_analysis(SIMPLE), fake).analyze(CTX)

    assert result.verdict is Verdict.INCONCLUSIVE
    assert result.metrics[0].reason == "stable: Prometheus answered HTTP 503"


def test_an_unreachable_source_is_asked_once_per_analysis() -> None:
    fake = FakeMetricSource()
    fake.fail(SourceUnreachableError("Prometheus at http://p:9090 is unreachable"))

    result = Analysis(load_analysis(), fake).analyze(CTX)

    assert result.verdict is Verdict.INCONCLUSIVE
    assert len(fake.calls) == 1
    assert all("unreachable" in m.reason for m in result.metrics)
    assert len(result.metrics) == 3


def test_a_rejected_query_is_an_error_naming_metric_and_query() -> None:
    fake = FakeMetricSource()
    fake.fail(BadQueryError("parse error: unexpected end of input"), containing="errors{")
    analysis = Analysis(parse_analysis(SIMPLE), fake)

    expected = "analysis metric 'errors': events_query rejected: parse error"
    with pytest.raises(AnalysisSpecError, match=expected):
        analysis.analyze(CTX)
    with pytest.raises(AnalysisSpecError, match=expected):
        analysis.validate(CTX)


def test_validate_asks_every_query_once() -> None:
    fake = FakeMetricSource()
    Analysis(load_analysis(), fake).validate(CTX)
    assert len(fake.calls) == 3 * 3  # three queries for each of the three checks
    assert all('version="v2"' in promql for _, promql, _ in fake.calls)


def test_histogram_samples_come_from_le_buckets() -> None:
    text = spec_text(
        """
name: latency
query: p99{version="{version}"}
samples_query: buckets{version="{version}"}
test: mann-whitney
max_ratio: 1.2
""",
        judge="interval",
    )
    fake = FakeMetricSource()
    for version, slow in (("v2", 20.0), ("v1", 0.0)):
        fake.set_value(f'p99{{version="{version}"}}', 0.5 if slow else 0.1)
        fake.set_vector(
            f'buckets{{version="{version}"}}',
            [({"le": "0.1"}, 20.0 - slow), ({"le": "1.0"}, 20.0), ({"le": "+Inf"}, 20.0)],
        )

    (metric,) = Analysis(parse_analysis(text), fake).analyze(CTX).metrics

    assert metric.verdict is Verdict.FAIL, metric.reason
    assert metric.statistics["canary_samples"] == 20
    assert metric.statistics["canary_mean"] == pytest.approx(0.55)
    assert metric.statistics["stable_mean"] == pytest.approx(0.05)


def test_samples_without_le_are_a_query_error() -> None:
    text = spec_text(
        'name: latency\nquery: p99{version="{version}"}\n'
        'samples_query: s{version="{version}"}\ntest: mann-whitney'
    )
    fake = FakeMetricSource()
    fake.set_vector('s{version="v2"}', [({"code": "200"}, 1.0)])
    with pytest.raises(AnalysisSpecError, match=r"'latency': samples_query rejected: .*by 'le'"):
        Analysis(parse_analysis(text), fake).analyze(CTX)


def test_range_samples_span_the_interval_at_the_step() -> None:
    text = spec_text(
        'name: mean\nquery: m{version="{version}"}\n'
        'samples_query: m{version="{version}",w="{step}"}\n'
        "samples: range\nsamples_step_s: 15\ntest: mann-whitney",
        judge="interval",
    )
    fake = FakeMetricSource()
    fake.set_value('m{version="v2"}', 0.3)
    fake.set_value('m{version="v1"}', 0.1)
    fake.set_range('m{version="v2",w="15s"}', [0.3, 0.31, 0.29, 0.3, 0.32])
    fake.set_range('m{version="v1",w="15s"}', [0.1, 0.11, 0.09, 0.1, 0.12])

    result = Analysis(parse_analysis(text), fake, clock=lambda: NOW).analyze(CTX)

    assert result.verdict is Verdict.FAIL
    ranges = [times for method, _, times in fake.calls if method == "query_range"]
    assert ranges == [(NOW - 60, NOW, 15.0)] * 2
    assert math.isclose(result.metrics[0].statistics["cles"], 1.0)
