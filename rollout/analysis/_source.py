"""``MetricSource``: how the analysis asks a metrics backend (Prometheus) for numbers.

The analysis knows *which* PromQL to ask; a source knows *how* to ask it. Sources
raise ``MetricSourceError`` (and its subclasses) for every failure, never a library
error, so the analysis can record the failure as data.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol, runtime_checkable

# One series of an instant vector: its labels and its value.
Series = tuple[Mapping[str, str], float]


@runtime_checkable
class MetricSource(Protocol):
    """Answers PromQL queries at a point in time (unix seconds)."""

    def query(self, promql: str, at: float) -> float | None:
        """The value of a query that yields one series or a scalar; None when it yields
        nothing (or NaN). More than one series raises ``BadQueryError``."""
        ...

    def query_vector(self, promql: str, at: float) -> list[Series]:
        """Every series of an instant query with its labels (e.g. histogram buckets by
        ``le``); non-finite values are left out."""
        ...

    def query_range(self, promql: str, start: float, end: float, step_s: float) -> list[float]:
        """The values of a one-series range query from ``start`` to ``end`` every
        ``step_s`` seconds, oldest first, NaN points left out; [] when it yields nothing."""
        ...
