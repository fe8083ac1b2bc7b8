"""Types shared by the analysis (which measures) and the engine (which decides)."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from rollout.analysis._sequential import Evidence


class Verdict(enum.StrEnum):
    """The outcome of one metric check or of a whole analysis."""

    PASS = "Pass"
    FAIL = "Fail"
    INCONCLUSIVE = "Inconclusive"


@dataclass(frozen=True)
class AnalysisContext:
    """What an analysis run is about: which InferenceService, which versions, which window."""

    namespace: str
    isvc: str
    stable_version: str
    canary_version: str
    interval_s: float
    # The rollout's evidence so far, by metric (the sequential judge adds to it).
    evidence: Mapping[str, Evidence] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.interval_s <= 0:
            raise ValueError(f"interval_s must be > 0, got {self.interval_s}")


@dataclass(frozen=True)
class MetricResult:
    """One metric check's outcome, with the numbers that decided it.

    ``accumulating`` marks an Inconclusive that is healthy so far: measured, within
    its limits, not worse, but the rollout's evidence does not bound it within the
    tolerance yet. The engine may take the next step on it, never promote.
    """

    name: str
    verdict: Verdict
    canary: float | None
    stable: float | None
    threshold: float | None = None
    tolerance: float | None = None
    reason: str = ""
    statistics: Mapping[str, float] = field(default_factory=dict)
    accumulating: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "verdict": self.verdict.value,
            "canary": self.canary,
            "stable": self.stable,
            "threshold": self.threshold,
            "tolerance": self.tolerance,
            "reason": self.reason,
            "statistics": dict(self.statistics),
            "accumulating": self.accumulating,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> MetricResult:
        return cls(
            name=str(data["name"]),
            verdict=Verdict(data["verdict"]),
            canary=data.get("canary"),
            stable=data.get("stable"),
            threshold=data.get("threshold"),
            tolerance=data.get("tolerance"),
            reason=str(data.get("reason", "")),
            statistics=dict(data.get("statistics") or {}),
            accumulating=bool(data.get("accumulating", False)),
        )


@dataclass(frozen=True)
class AnalysisResult:
    """An analysis run: the overall verdict, each metric's result, and the rollout's
    evidence by metric after it (only the metrics the sequential judge keeps)."""

    verdict: Verdict
    metrics: tuple[MetricResult, ...]
    at: float  # unix seconds when the analysis finished
    evidence: Mapping[str, Evidence] = field(default_factory=dict)

    @property
    def healthy(self) -> bool:
        """Pass, or Inconclusive only because the evidence is still accumulating."""
        if self.verdict is Verdict.PASS:
            return True
        return self.verdict is Verdict.INCONCLUSIVE and bool(self.metrics) and all(
            m.verdict is Verdict.PASS or m.accumulating for m in self.metrics)

    def to_dict(self) -> dict[str, Any]:
        return {
            "verdict": self.verdict.value,
            "metrics": [m.to_dict() for m in self.metrics],
            "at": self.at,
            "evidence": {name: e.to_dict() for name, e in self.evidence.items()},
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> AnalysisResult:
        return cls(
            verdict=Verdict(data["verdict"]),
            metrics=tuple(MetricResult.from_dict(m) for m in data.get("metrics", [])),
            at=float(data.get("at", 0.0)),
            evidence={str(k): Evidence.from_dict(v)
                      for k, v in (data.get("evidence") or {}).items()},
        )


class Analyzer(Protocol):
    """Runs the configured metric checks for one context (the engine's view of analysis)."""

    def analyze(self, ctx: AnalysisContext) -> AnalysisResult: ...
