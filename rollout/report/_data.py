"""What a rollout report shows, gathered once: the rollout's state and decisions, and
for each analysed metric the canary's and stable's series over the rollout from
Prometheus range queries, each analysis window with the verdict it reached."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from rollout._errors import MetricSourceError, RolloutError
from rollout._state import Phase, RolloutState
from rollout.analysis._results import AnalysisContext

if TYPE_CHECKING:
    from rollout.analysis._analysis import AnalysisSpec

Points = list[tuple[float, float]]
MAX_POINTS = 400  # per series: enough for a smooth line, small enough to embed
ROLES = ("canary", "stable")


class RangeSource(Protocol):
    """A Prometheus range query with timestamps (``PrometheusSource.query_points``)."""

    def query_points(self, promql: str, start: float, end: float,
                     step_s: float) -> Points: ...


@dataclass(frozen=True)
class Window:
    """One analysis: the interval it measured, its verdict, and each metric's."""

    start: float
    end: float
    kind: str  # the decision it led to (StepAdvanced, AnalysisFailed, Promoted, …)
    verdict: str
    weight_pct: int
    metrics: Mapping[str, Mapping[str, Any]]  # name -> verdict, canary, stable


@dataclass(frozen=True)
class MetricPanel:
    """One analysed metric: its queries and both roles' series over the rollout."""

    name: str
    queries: Mapping[str, str]
    series: Mapping[str, Points]
    error: str | None = None


@dataclass(frozen=True)
class Report:
    namespace: str
    isvc: str
    model: str
    stable_version: int
    canary_version: int
    phase: str
    steps_pct: tuple[int, ...]
    interval_s: float
    failure_limit: int
    started_at: float
    ended_at: float
    generated_at: float
    prometheus: str
    decisions: tuple[Mapping[str, Any], ...]
    weights: tuple[tuple[float, int], ...]
    windows: tuple[Window, ...]
    metrics: tuple[MetricPanel, ...] = field(default=())

    @property
    def outcome(self) -> str:
        """One line: how the rollout ended, or where it stands."""
        canary = f"{self.model}@{self.canary_version}"
        stable = f"{self.model}@{self.stable_version}"
        if self.phase == Phase.PROMOTED:
            return f"{canary} was promoted: it serves all traffic (was {stable})"
        if self.phase == Phase.ROLLED_BACK:
            return f"{canary} was rolled back: {stable} serves all traffic"
        if self.phase == Phase.ROLLING_BACK:
            return f"{canary} is being rolled back to {stable}"
        weight = self.weights[-1][1] if self.weights else 0
        return f"in progress: {canary} has {weight}% of traffic, {stable} the rest"

    def to_dict(self) -> dict[str, Any]:
        doc = asdict(self)
        doc["outcome"] = self.outcome
        return doc


def weight_timeline(state: RolloutState) -> tuple[tuple[float, int], ...]:
    """(time, canary weight %) at the start and after each move that changed it."""
    points: list[tuple[float, int]] = []
    for decision in state.history:
        numbers = decision.numbers
        if decision.kind == "RolloutStarted":
            points.append((decision.at, int(numbers.get("weight_pct", decision.weight_pct))))
        elif decision.kind == "StepAdvanced" and "to_pct" in numbers:
            points.append((decision.at, int(numbers["to_pct"])))
        elif decision.kind == "Promoted":
            points.append((decision.at, 100))
        elif decision.kind == "RollbackStarted":
            points.append((decision.at, 0))
    return tuple(points)


def analysis_windows(state: RolloutState) -> tuple[Window, ...]:
    """Every decision an analysis made, as the window it measured: the analysis asks
    over the interval that ends when it runs (the queries' ``[{interval}]``)."""
    windows = []
    for decision in state.history:
        numbers = decision.numbers
        if "verdict" not in numbers:
            continue
        names = sorted({key.rsplit(".", 1)[0] for key in numbers if key.endswith(".verdict")})
        metrics = {name: {"verdict": numbers.get(f"{name}.verdict"),
                          "canary": numbers.get(f"{name}.canary"),
                          "stable": numbers.get(f"{name}.stable")} for name in names}
        windows.append(Window(decision.at - state.plan.interval_s, decision.at, decision.kind,
                              str(numbers["verdict"]), decision.weight_pct, metrics))
    return tuple(windows)


def _span(state: RolloutState, now: float) -> tuple[float, float]:
    if not state.history:
        raise RolloutError(f"{state.ref}: the rollout has no recorded decisions to report")
    started = state.started_at or state.history[0].at
    ended = state.history[-1].at if state.phase.is_final else now
    return started, max(ended, started)


def build_report(state: RolloutState, spec: AnalysisSpec, source: RangeSource | None,
                 *, now: float, prometheus: str = "") -> Report:
    """The report of ``state``; without a ``source`` it has no metric series."""
    started, ended = _span(state, now)
    interval = state.plan.interval_s
    query_start, query_end = started - interval, min(now, ended + interval)
    step = max(1.0, (query_end - query_start) / MAX_POINTS)
    ctx = AnalysisContext(state.namespace, state.isvc, str(state.stable_version),
                          str(state.canary_version), interval)
    panels = tuple(_panel(metric, ctx, source, query_start, query_end, step)
                   for metric in spec.metrics) if source is not None else ()
    return Report(
        namespace=state.namespace, isvc=state.isvc, model=state.model,
        stable_version=state.stable_version, canary_version=state.canary_version,
        phase=state.phase.value, steps_pct=state.plan.steps_pct, interval_s=interval,
        failure_limit=state.plan.failure_limit, started_at=started, ended_at=ended,
        generated_at=now, prometheus=prometheus,
        decisions=tuple(d.to_dict() for d in state.history),
        weights=weight_timeline(state), windows=analysis_windows(state), metrics=panels)


def _panel(metric: Any, ctx: AnalysisContext, source: RangeSource, start: float, end: float,
           step: float) -> MetricPanel:
    from rollout.analysis._analysis import metric_query

    queries = {role: metric_query(metric, ctx, role) for role in ROLES}
    series: dict[str, Points] = {}
    try:
        for role in ROLES:
            series[role] = source.query_points(queries[role], start, end, step)
    except MetricSourceError as exc:
        return MetricPanel(metric.name, queries, series, error=str(exc))
    return MetricPanel(metric.name, queries, series)

