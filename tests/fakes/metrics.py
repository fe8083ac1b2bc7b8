"""A ``MetricSource`` that answers from tables the test fills in, and records every query."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from rollout._errors import MetricSourceError
from rollout.analysis._source import Series


class FakeMetricSource:
    """Answers exact PromQL strings from tables; unknown queries yield nothing.

    ``fail(error, containing=...)`` makes every query containing that text raise
    ``error`` (all queries when ``containing`` is empty).
    """

    def __init__(self) -> None:
        self.values: dict[str, float] = {}
        self.vectors: dict[str, list[Series]] = {}
        self.ranges: dict[str, list[float]] = {}
        self.calls: list[tuple[str, str, tuple[float, ...]]] = []
        self._failures: list[tuple[str, MetricSourceError]] = []

    def set_value(self, promql: str, value: float) -> None:
        self.values[promql] = value

    def set_vector(self, promql: str, series: Sequence[tuple[Mapping[str, str], float]]) -> None:
        self.vectors[promql] = [(dict(labels), value) for labels, value in series]

    def set_range(self, promql: str, values: Sequence[float]) -> None:
        self.ranges[promql] = list(values)

    def fail(self, error: MetricSourceError, containing: str = "") -> None:
        self._failures.append((containing, error))

    def _ask(self, method: str, promql: str, *times: float) -> None:
        self.calls.append((method, promql, times))
        for containing, error in self._failures:
            if containing in promql:
                raise error

    def query(self, promql: str, at: float) -> float | None:
        self._ask("query", promql, at)
        return self.values.get(promql)

    def query_vector(self, promql: str, at: float) -> list[Series]:
        self._ask("query_vector", promql, at)
        if promql in self.values:
            return [({}, self.values[promql])]
        return list(self.vectors.get(promql, []))

    def query_range(self, promql: str, start: float, end: float, step_s: float) -> list[float]:
        self._ask("query_range", promql, start, end, step_s)
        return list(self.ranges.get(promql, []))
