"""A rollout's whole state, as one JSON document its backend stores (a ConfigMap beside
the InferenceService on Kubernetes, the environment's state file for ``modelctl dev``).

Everything a later ``run`` needs to resume lives here (versions, plan, step,
failures, history, lease), so a crashed run loses nothing and any run can take
over once the lease has expired.
"""

from __future__ import annotations

import dataclasses
import enum
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from rollout._errors import RolloutError
from rollout._plan import Plan
from rollout.analysis._results import AnalysisResult
from rollout.analysis._sequential import Evidence

MODEL_ANNOTATION = "modelctl.io/model"
VERSION_ANNOTATION = "modelctl.io/version"
SCHEMA = 1
HISTORY_LIMIT = 50


class Phase(enum.StrEnum):
    """Where a rollout is. ``Promoted`` and ``RolledBack`` are final."""

    PROGRESSING = "Progressing"
    PROMOTED = "Promoted"
    ROLLING_BACK = "RollingBack"
    ROLLED_BACK = "RolledBack"

    @property
    def is_final(self) -> bool:
        return self in (Phase.PROMOTED, Phase.ROLLED_BACK)


# Decision kinds that are bad news: recorded as Warning events.
WARNING_KINDS = frozenset({"AnalysisFailed", "RollbackStarted", "RolledBack"})


@dataclass(frozen=True)
class Decision:
    """One thing the rollout decided, with the numbers that made it decide."""

    at: float
    kind: str
    message: str
    step_index: int
    weight_pct: int
    numbers: Mapping[str, Any] = field(default_factory=dict)

    @property
    def event_type(self) -> str:
        return "Warning" if self.kind in WARNING_KINDS else "Normal"

    def to_dict(self) -> dict[str, Any]:
        return {
            "at": self.at,
            "kind": self.kind,
            "message": self.message,
            "step_index": self.step_index,
            "weight_pct": self.weight_pct,
            "numbers": dict(self.numbers),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Decision:
        return cls(
            at=float(data["at"]),
            kind=str(data["kind"]),
            message=str(data.get("message", "")),
            step_index=int(data.get("step_index", 0)),
            weight_pct=int(data.get("weight_pct", 0)),
            numbers=dict(data.get("numbers") or {}),
        )


@dataclass(frozen=True)
class RolloutState:
    """One rollout of ``model`` on an InferenceService, from a stable to a canary version.

    Times are unix seconds from the engine's injected clock. ``interval_started_at``
    is when the canary was last seen Ready at the current weight (the analysis
    window starts there); ``None`` while waiting for readiness. ``analysis_yaml``
    is the analysis file given to ``start`` (None: the shipped default), kept so
    that a run anywhere analyses the same way; ``task`` is the canary version's
    registry task, read at start, which picks that default (None: a state from before
    it was kept, the request-latency default).
    """

    namespace: str
    isvc: str
    model: str
    stable_version: int
    stable_uri: str
    canary_version: int
    canary_uri: str
    plan: Plan
    backend: str = "kserve"
    phase: Phase = Phase.PROGRESSING
    step_index: int = 0
    weight_pct: int = 0
    failures: int = 0
    inconclusive: int = 0
    paused: bool = False
    started_at: float = 0.0
    weight_set_at: float = 0.0
    interval_started_at: float | None = None
    history: tuple[Decision, ...] = ()
    last_analysis: AnalysisResult | None = None
    holder: str | None = None
    lease_expires_at: float | None = None
    aliases_synced: bool = False
    analysis_yaml: str | None = None
    task: str | None = None
    backend_data: Mapping[str, str] = field(default_factory=dict)
    # The sequential judge's evidence by metric: every interval of this canary, across
    # steps and resumed runs (a new canary version is a new rollout, with none).
    evidence: Mapping[str, Evidence] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not 0 <= self.step_index <= self.plan.last_index:
            raise RolloutError(f"step index {self.step_index} outside the plan's steps")
        if not 0 <= self.weight_pct <= 100:
            raise RolloutError(f"weight {self.weight_pct}% outside 0-100")

    # -- derived ---------------------------------------------------------------
    @property
    def ref(self) -> str:
        return f"{self.namespace}/{self.isvc}"

    @property
    def stable_label(self) -> str:
        return f"{self.model}@{self.stable_version}"

    @property
    def canary_label(self) -> str:
        return f"{self.model}@{self.canary_version}"

    def lease_holder(self, now: float) -> str | None:
        """Who holds the run lease at ``now`` (None when free or expired)."""
        if self.holder and self.lease_expires_at is not None and now < self.lease_expires_at:
            return self.holder
        return None

    # -- changes ---------------------------------------------------------------
    def evolve(self, **changes: Any) -> RolloutState:
        return dataclasses.replace(self, **changes)

    def recorded(self, *decisions: Decision) -> RolloutState:
        """This state with ``decisions`` appended to its (bounded) history."""
        history = (*self.history, *decisions)[-HISTORY_LIMIT:]
        return dataclasses.replace(self, history=history)

    # -- serialisation ---------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "namespace": self.namespace,
            "isvc": self.isvc,
            "model": self.model,
            "stable": {"version": self.stable_version, "uri": self.stable_uri},
            "canary": {"version": self.canary_version, "uri": self.canary_uri},
            "plan": {
                "steps_pct": list(self.plan.steps_pct),
                "interval_s": self.plan.interval_s,
                "failure_limit": self.plan.failure_limit,
            },
            "backend": self.backend,
            "phase": self.phase.value,
            "step_index": self.step_index,
            "weight_pct": self.weight_pct,
            "failures": self.failures,
            "inconclusive": self.inconclusive,
            "paused": self.paused,
            "started_at": self.started_at,
            "weight_set_at": self.weight_set_at,
            "interval_started_at": self.interval_started_at,
            "history": [d.to_dict() for d in self.history],
            "last_analysis": self.last_analysis.to_dict() if self.last_analysis else None,
            "holder": self.holder,
            "lease_expires_at": self.lease_expires_at,
            "aliases_synced": self.aliases_synced,
            "analysis_yaml": self.analysis_yaml,
            "task": self.task,
            "backend_data": dict(self.backend_data),
            "evidence": {name: e.to_dict() for name, e in self.evidence.items()},
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), separators=(",", ":"), sort_keys=True)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RolloutState:
        plan = data["plan"]
        last = data.get("last_analysis")
        return cls(
            namespace=str(data["namespace"]),
            isvc=str(data["isvc"]),
            model=str(data["model"]),
            stable_version=int(data["stable"]["version"]),
            stable_uri=str(data["stable"]["uri"]),
            canary_version=int(data["canary"]["version"]),
            canary_uri=str(data["canary"]["uri"]),
            plan=Plan(
                steps_pct=tuple(int(s) for s in plan["steps_pct"]),
                interval_s=float(plan["interval_s"]),
                failure_limit=int(plan["failure_limit"]),
            ),
            backend=str(data.get("backend", "kserve")),
            phase=Phase(data["phase"]),
            step_index=int(data["step_index"]),
            weight_pct=int(data["weight_pct"]),
            failures=int(data.get("failures", 0)),
            inconclusive=int(data.get("inconclusive", 0)),
            paused=bool(data.get("paused", False)),
            started_at=float(data.get("started_at", 0.0)),
            weight_set_at=float(data.get("weight_set_at", 0.0)),
            interval_started_at=_opt_float(data.get("interval_started_at")),
            history=tuple(Decision.from_dict(d) for d in data.get("history", [])),
            last_analysis=AnalysisResult.from_dict(last) if last else None,
            holder=data.get("holder"),
            lease_expires_at=_opt_float(data.get("lease_expires_at")),
            aliases_synced=bool(data.get("aliases_synced", False)),
            analysis_yaml=data.get("analysis_yaml"),
            task=None if data.get("task") is None else str(data["task"]),
            backend_data={str(k): str(v) for k, v in (data.get("backend_data") or {}).items()},
            evidence={str(k): Evidence.from_dict(v)
                      for k, v in (data.get("evidence") or {}).items()},
        )

    @classmethod
    def from_json(cls, text: str, *, where: str = "") -> RolloutState:
        """Decode a stored state; a damaged one is a clear error, not a traceback."""
        try:
            data = json.loads(text)
            if not isinstance(data, dict):
                raise ValueError("not a JSON object")
            if data.get("schema") != SCHEMA:
                raise ValueError(f"unknown schema {data.get('schema')!r}")
            return cls.from_dict(data)
        except (ValueError, KeyError, TypeError) as exc:
            place = f" in {where}" if where else ""
            raise RolloutError(
                f"the rollout state{place} is not one this modelctl understands ({exc}); "
                "delete it to start over"
            ) from exc


def _opt_float(value: Any) -> float | None:
    return None if value is None else float(value)
