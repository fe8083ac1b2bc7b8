"""Analysis: load metric checks from YAML, measure them through a ``MetricSource``, judge.

The file format is documented in docs/ANALYSIS.md; the shipped defaults are next to
this module, one per kind of model (``TASK_DEFAULTS``). Loading is strict: an unknown key,
a wrong type, an unknown placeholder or unbalanced brackets is an
``AnalysisSpecError`` naming the metric. At run time a failing source is data
(the metric is Inconclusive); a query the source rejects is an ``AnalysisSpecError``.
"""

from __future__ import annotations

import enum
import importlib.resources
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from rollout._errors import (
    AnalysisSpecError,
    BadQueryError,
    MetricSourceError,
    SourceUnreachableError,
)
from rollout.analysis._judge import (
    Check,
    Measurement,
    StatTest,
    judge_metric,
    judge_rollout,
    overall_verdict,
    samples_from_buckets,
)
from rollout.analysis._promql import (
    PLACEHOLDERS,
    check_template,
    placeholder_values,
    placeholders_in,
    render,
)
from rollout.analysis._results import AnalysisContext, AnalysisResult, MetricResult
from rollout.analysis._sequential import Evidence
from rollout.analysis._source import MetricSource

DEFAULT_ANALYSIS = "default_analysis.yaml"
# The shipped default by the canary's registry task, where it is not DEFAULT_ANALYSIS:
# generative models are judged on TTFT and TPOT, not request latency (docs/ANALYSIS.md).
TASK_DEFAULTS: Mapping[str, str] = {"llm": "default_analysis_llm.yaml"}
_QUERY_KEYS = ("query", "count_query", "events_query", "samples_query")
_CHECK_KEYS = ("max", "max_increase", "max_ratio", "min_requests", "alpha", "beta")
_METRIC_KEYS = ("name", *_QUERY_KEYS, "samples", "samples_step_s", *_CHECK_KEYS, "test")
_DEFAULT_KEYS = ("min_requests", "alpha", "beta")
_TOP_KEYS = ("judge", "defaults", "metrics")
_NO_STEP = tuple(p for p in PLACEHOLDERS if p != "step")


class JudgeKind(enum.StrEnum):
    """What a test's comparison is made on."""

    SEQUENTIAL = "sequential"  # the rollout's evidence so far (the default)
    INTERVAL = "interval"  # each interval alone


class SamplesKind(enum.StrEnum):
    """How ``samples_query`` turns into Mann-Whitney samples."""

    HISTOGRAM = "histogram"  # one instant query by `le`: one sample per observation
    RANGE = "range"  # a range query: one sample per `samples_step_s`


@dataclass(frozen=True)
class MetricSpec:
    """One metric check: the PromQL templates that measure it and how it is judged."""

    check: Check
    query: str
    count_query: str | None = None
    events_query: str | None = None
    samples_query: str | None = None
    samples: SamplesKind = SamplesKind.HISTOGRAM
    samples_step_s: float | None = None

    @property
    def name(self) -> str:
        return self.check.name

    def __post_init__(self) -> None:
        def bad(message: str) -> AnalysisSpecError:
            return AnalysisSpecError(f"metric {self.name!r}: {message}")

        test, ranged = self.check.test, self.samples is SamplesKind.RANGE
        for key in _QUERY_KEYS:
            template = getattr(self, key)
            if template is None:
                continue
            # {step} only means something to a range query's samples
            allowed = PLACEHOLDERS if key == "samples_query" and ranged else _NO_STEP
            problem = check_template(template, allowed)
            if problem:
                raise bad(f"{key} {problem}")
            if not placeholders_in(template) & {"version", "role"}:
                raise bad(f"{key} cannot tell canary from stable: use {{version}} or {{role}}")
        if test is StatTest.TWO_PROPORTION and not (self.count_query and self.events_query):
            raise bad("test two-proportion needs count_query and events_query")
        if self.events_query and test is not StatTest.TWO_PROPORTION:
            raise bad("events_query is only used by test two-proportion")
        if test is StatTest.MANN_WHITNEY and not self.samples_query:
            raise bad("test mann-whitney needs samples_query")
        if self.samples_query and test is not StatTest.MANN_WHITNEY:
            raise bad("samples_query is only used by test mann-whitney")
        if self.check.min_requests > 0 and not self.count_query:
            raise bad("min_requests needs count_query")
        if ranged != (self.samples_step_s is not None):
            raise bad("samples: range and samples_step_s go together")
        if self.samples_step_s is not None and not (
            math.isfinite(self.samples_step_s) and self.samples_step_s > 0
        ):
            raise bad(f"samples_step_s must be > 0, got {self.samples_step_s}")


@dataclass(frozen=True)
class AnalysisSpec:
    """The metric checks of one analysis, in file order, with where they came from."""

    metrics: tuple[MetricSpec, ...]
    source: str = "<analysis>"
    judge: JudgeKind = JudgeKind.SEQUENTIAL

    def __post_init__(self) -> None:
        if not self.metrics:
            raise AnalysisSpecError(f"{self.source}: no metrics")
        names = [m.name for m in self.metrics]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise AnalysisSpecError(f"{self.source}: metric {duplicates[0]!r} is defined twice")


def load_analysis(path: str | Path | None = None, *, task: str | None = None) -> AnalysisSpec:
    """Load an analysis file, or when ``path`` is None the shipped default for a model
    of registry ``task`` (``TASK_DEFAULTS``; any other task or None: DEFAULT_ANALYSIS)."""
    if path is None:
        name = TASK_DEFAULTS.get(task or "", DEFAULT_ANALYSIS)
        resource = importlib.resources.files("rollout.analysis").joinpath(name)
        return parse_analysis(resource.read_text(encoding="utf-8"), source=name)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise AnalysisSpecError(f"analysis file {str(path)!r}: {exc.strerror or exc}") from None
    return parse_analysis(text, source=str(path))


def parse_analysis(text: str, source: str = "<analysis>") -> AnalysisSpec:
    """Parse analysis YAML; every problem is one ``AnalysisSpecError`` naming the metric."""
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise AnalysisSpecError(f"{source}: not valid YAML{where}") from None
    try:
        return _build(doc, source)
    except AnalysisSpecError as exc:
        raise AnalysisSpecError(f"{source}: {exc}") from None


def _build(doc: Any, source: str) -> AnalysisSpec:
    if not isinstance(doc, dict):
        raise AnalysisSpecError("expected a mapping with a 'metrics' list")
    _no_unknown_keys(doc, _TOP_KEYS, "top level")
    defaults = doc.get("defaults") or {}
    if not isinstance(defaults, dict):
        raise AnalysisSpecError("'defaults' must be a mapping")
    _no_unknown_keys(defaults, _DEFAULT_KEYS, "defaults")
    metrics = doc.get("metrics")
    if not isinstance(metrics, list) or not metrics:
        raise AnalysisSpecError("'metrics' must be a non-empty list")
    specs = tuple(_metric({**defaults, **_mapping(m, i)}, i) for i, m in enumerate(metrics, 1))
    judge = doc.get("judge", JudgeKind.SEQUENTIAL.value)
    try:
        kind = JudgeKind(judge)
    except ValueError:
        options = ", ".join(k.value for k in JudgeKind)
        raise AnalysisSpecError(f"judge must be one of {options}, got {judge!r}") from None
    return AnalysisSpec(metrics=specs, source=source, judge=kind)


def _mapping(item: Any, index: int) -> dict[str, Any]:
    if not isinstance(item, dict):
        raise AnalysisSpecError(f"metric #{index} must be a mapping")
    return item


def _no_unknown_keys(data: Mapping[str, Any], allowed: tuple[str, ...], where: str) -> None:
    unknown = sorted(str(k) for k in data if k not in allowed)
    if unknown:
        raise AnalysisSpecError(
            f"{where}: unknown key {unknown[0]!r} (allowed: {', '.join(sorted(allowed))})"
        )


def _metric(data: dict[str, Any], index: int) -> MetricSpec:
    name = data.get("name")
    if not isinstance(name, str) or not name:
        raise AnalysisSpecError(f"metric #{index} needs a 'name'")
    label = f"metric {name!r}"
    _no_unknown_keys(data, _METRIC_KEYS, label)

    def text(key: str) -> str | None:
        value = data.get(key)
        if value is not None and not isinstance(value, str):
            raise AnalysisSpecError(f"{label}: {key} must be a string")
        return value

    def number(key: str) -> float | None:
        value = data.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)):
            raise AnalysisSpecError(f"{label}: {key} must be a number, got {value!r}")
        return None if value is None else float(value)

    def choice(key: str, kind: type[enum.StrEnum], default: enum.StrEnum) -> Any:
        value = data.get(key, default.value)
        try:
            return kind(value)
        except ValueError:
            options = ", ".join(k.value for k in kind)
            message = f"{label}: {key} must be one of {options}, got {value!r}"
            raise AnalysisSpecError(message) from None

    query = text("query")
    if query is None:
        raise AnalysisSpecError(f"{label}: needs a 'query'")
    min_requests, alpha, beta = number("min_requests"), number("alpha"), number("beta")
    check = Check(
        name=name,
        max=number("max"),
        max_increase=number("max_increase"),
        max_ratio=number("max_ratio"),
        min_requests=0.0 if min_requests is None else min_requests,
        test=choice("test", StatTest, StatTest.NONE),
        alpha=0.01 if alpha is None else alpha,
        beta=0.25 if beta is None else beta,
    )
    return MetricSpec(
        check=check,
        query=query,
        count_query=text("count_query"),
        events_query=text("events_query"),
        samples_query=text("samples_query"),
        samples=choice("samples", SamplesKind, SamplesKind.HISTOGRAM),
        samples_step_s=number("samples_step_s"),
    )


class _Asker:
    """One analysis run's view of the source: after the source proved unreachable,
    later queries fail at once with the same error instead of each timing out."""

    def __init__(self, source: MetricSource) -> None:
        self._source = source
        self._unreachable: SourceUnreachableError | None = None

    def __call__(self, ask: Callable[[MetricSource], Any]) -> Any:
        if self._unreachable is not None:
            raise self._unreachable
        try:
            return ask(self._source)
        except SourceUnreachableError as exc:
            self._unreachable = exc
            raise


class Analysis:
    """Measures every metric of a spec for canary and stable, and judges them.

    Implements the engine's ``Analyzer``. ``clock`` gives unix seconds: the end of
    the analysis window, and ``AnalysisResult.at``.
    """

    def __init__(
        self, spec: AnalysisSpec, source: MetricSource, clock: Callable[[], float] = time.time
    ) -> None:
        self.spec = spec
        self._source = source
        self._clock = clock

    def analyze(self, ctx: AnalysisContext) -> AnalysisResult:
        """Run every check now over the last ``ctx.interval_s`` seconds, on top of the
        rollout's evidence in ``ctx.evidence`` (the sequential judge).

        A source failure makes the metric Inconclusive (with the reason); a query
        the source rejects raises ``AnalysisSpecError`` naming the metric.
        """
        at = self._clock()
        ask = _Asker(self._source)
        results: list[MetricResult] = []
        evidence: dict[str, Evidence] = {}
        for metric in self.spec.metrics:
            canary = self._observe(metric, ctx, "canary", at, ask)
            stable = self._observe(metric, ctx, "stable", at, ask)
            if self.spec.judge is JudgeKind.INTERVAL:
                results.append(judge_metric(metric.check, canary, stable))
                continue
            result, total = judge_rollout(metric.check, canary, stable,
                                          ctx.evidence.get(metric.name))
            results.append(result)
            if total is not None:
                evidence[metric.name] = total
        return AnalysisResult(overall_verdict(results), tuple(results), at=self._clock(),
                              evidence=evidence)

    def validate(self, ctx: AnalysisContext) -> None:
        """Ask the source every query once (for the canary) so a query it rejects is
        found before anything changes: ``AnalysisSpecError`` naming the metric, or
        ``MetricSourceError`` when the source cannot be asked at all."""
        at = self._clock()
        ask = _Asker(self._source)
        for metric in self.spec.metrics:
            self._measure(metric, ctx, "canary", at, ask)

    def measure(self, metric: MetricSpec, ctx: AnalysisContext, role: str) -> Measurement:
        """One metric for one role ("canary" or "stable") now; a source failure is data."""
        return self._observe(metric, ctx, role, self._clock(), _Asker(self._source))

    def _observe(
        self, metric: MetricSpec, ctx: AnalysisContext, role: str, at: float, ask: _Asker
    ) -> Measurement:
        try:
            return self._measure(metric, ctx, role, at, ask)
        except MetricSourceError as exc:
            return Measurement(error=str(exc))

    def _measure(
        self, metric: MetricSpec, ctx: AnalysisContext, role: str, at: float, ask: _Asker
    ) -> Measurement:
        values = placeholder_values(ctx, role, metric.samples_step_s)

        def run(key: str, call: Callable[[MetricSource, str], Any]) -> Any:
            template = getattr(metric, key)
            if template is None:
                return None
            promql = render(template, values)
            try:
                return ask(lambda source: call(source, promql))
            except BadQueryError as exc:  # a wrong query never heals: not data, an error
                message = f"analysis metric {metric.name!r}: {key} rejected: {exc}"
                raise AnalysisSpecError(message) from None

        def scalar(source: MetricSource, promql: str) -> float | None:
            return source.query(promql, at)

        def ranged(source: MetricSource, promql: str) -> tuple[float, ...]:
            assert metric.samples_step_s is not None
            start = at - ctx.interval_s
            return tuple(source.query_range(promql, start, at, metric.samples_step_s))

        def histogram(source: MetricSource, promql: str) -> tuple[float, ...]:
            return _histogram_samples(source.query_vector(promql, at))

        sampler = ranged if metric.samples is SamplesKind.RANGE else histogram
        return Measurement(
            value=run("query", scalar),
            requests=run("count_query", scalar),
            events=run("events_query", scalar),
            samples=run("samples_query", sampler) or (),
        )


def _histogram_samples(series: list[tuple[Mapping[str, str], float]]) -> tuple[float, ...]:
    buckets: dict[float, float] = {}
    for labels, value in series:
        try:
            bound = float(labels["le"])
        except (KeyError, ValueError):
            raise BadQueryError(
                "it must return histogram buckets by 'le', e.g. sum by (le) (...)"
            ) from None
        buckets[bound] = buckets.get(bound, 0.0) + value
    return samples_from_buckets(buckets)


def metric_query(metric: MetricSpec, ctx: AnalysisContext, role: str) -> str:
    """The PromQL of ``metric``'s value query for ``role`` ("canary" or "stable"), as
    the analysis asks it (its window is the rollout's interval)."""
    return render(metric.query, placeholder_values(ctx, role, metric.samples_step_s))
