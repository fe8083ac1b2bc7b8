"""Knative's living condition sets, which KServe and Knative both keep their conditions with.

A port of knative/pkg ``apis/condition_set.go`` (``conditionsImpl``): ``SetCondition``,
``MarkTrue``, ``MarkTrueWithReason``, ``MarkUnknown``, ``MarkFalse``,
``InitializeConditions``, ``ClearCondition``, ``recomputeHappiness`` and
``findUnhappyDependent``, over a status dict's ``conditions`` list (JSON, as stored).
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Sequence
from typing import Any

TRUE, FALSE, UNKNOWN = "True", "False", "Unknown"
INFO = "Info"  # ConditionSeverityInfo; ConditionSeverityError is "" (omitted in JSON)


def timestamp(seconds: float) -> str:
    """A metav1.Time as JSON: RFC 3339, whole seconds, UTC."""
    moment = datetime.datetime.fromtimestamp(seconds, tz=datetime.UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_timestamp(value: str | None) -> float | None:
    if not value:
        return None
    return datetime.datetime.strptime(value, "%Y-%m-%dT%H:%M:%SZ").replace(
        tzinfo=datetime.UTC).timestamp()


def get_condition(status: dict[str, Any] | None, kind: str) -> dict[str, Any] | None:
    for condition in (status or {}).get("conditions") or []:
        if condition.get("type") == kind:
            return dict(condition)
    return None


class ConditionSet:
    """``apis.NewLivingConditionSet(dependents...)`` managing ``status`` (``Manage``)."""

    def __init__(self, status: dict[str, Any], dependents: Sequence[str], *,
                 now: Callable[[], float], happy: str = "Ready") -> None:
        self.status = status
        self.dependents = tuple(dependents)
        self.happy = happy
        self._now = now

    def get(self, kind: str) -> dict[str, Any] | None:
        return get_condition(self.status, kind)

    def _severity(self, kind: str) -> str:
        return "" if kind == self.happy or kind in self.dependents else INFO

    def set(self, condition: dict[str, Any]) -> None:
        """``SetCondition``: keeps lastTransitionTime when nothing else changed; sorted by type."""
        condition = {k: v for k, v in condition.items() if v not in ("", None)}
        kept: list[dict[str, Any]] = []
        for old in self.status.get("conditions") or []:
            if old.get("type") != condition["type"]:
                kept.append(old)
                continue
            same = {k: v for k, v in old.items() if k != "lastTransitionTime"}
            if same == condition:
                return
        condition["lastTransitionTime"] = timestamp(self._now())
        kept.append(condition)
        self.status["conditions"] = sorted(kept, key=lambda c: str(c.get("type")))

    def _make(self, kind: str, status: str, reason: str = "", message: str = "") -> dict[str, Any]:
        return {"type": kind, "status": status, "reason": reason, "message": message,
                "severity": self._severity(kind)}

    def mark_true(self, kind: str) -> None:
        self.set(self._make(kind, TRUE))
        self._recompute_happiness(kind)

    def mark_true_with_reason(self, kind: str, reason: str, message: str) -> None:
        self.set(self._make(kind, TRUE, reason, message))
        self._recompute_happiness(kind)

    def mark_unknown(self, kind: str, reason: str, message: str) -> None:
        self.set(self._make(kind, UNKNOWN, reason, message))
        is_dependent = False
        for dependent in self.dependents:
            current = self.get(dependent)
            if current is not None and current.get("status") == FALSE:  # False trumps Unknown
                happy = self.get(self.happy)
                if happy is None or happy.get("status") != FALSE:
                    self.mark_false(self.happy, reason, message)
                return
            if dependent == kind:
                is_dependent = True
        if is_dependent:
            self.set(self._make(self.happy, UNKNOWN, reason, message))

    def mark_false(self, kind: str, reason: str, message: str) -> None:
        kinds = [kind, self.happy] if kind in self.dependents else [kind]
        for each in kinds:
            self.set(self._make(each, FALSE, reason, message))

    def initialize(self) -> None:
        """``InitializeConditions``: Unknown (True when the happy condition is True) if unset."""
        happy = self.get(self.happy)
        if happy is None:
            happy = self._make(self.happy, UNKNOWN)
            self.set(happy)
        status = TRUE if happy.get("status") == TRUE else UNKNOWN
        for dependent in self.dependents:
            if self.get(dependent) is None:
                self.set(self._make(dependent, status))

    def clear(self, kind: str) -> None:
        """``ClearCondition``: only non-terminal conditions can be cleared."""
        if kind == self.happy or kind in self.dependents or self.get(kind) is None:
            return
        self.status["conditions"] = [c for c in self.status.get("conditions") or []
                                     if c.get("type") != kind]

    def is_happy(self) -> bool:
        happy = self.get(self.happy)
        return happy is not None and happy.get("status") == TRUE

    def _recompute_happiness(self, kind: str) -> None:
        unhappy = self._find_unhappy_dependent()
        if unhappy is not None:
            self.set(self._make(self.happy, unhappy.get("status", UNKNOWN),
                                unhappy.get("reason", ""), unhappy.get("message", "")))
        elif kind != self.happy:
            self.set(self._make(self.happy, TRUE))

    def _find_unhappy_dependent(self) -> dict[str, Any] | None:
        if not self.dependents:
            return None
        terminal = [c for c in self.status.get("conditions") or []
                    if not c.get("severity") and c.get("type") != self.happy]
        # Newest first (stable for equal times, where Go's sort.Slice picks any order).
        terminal.sort(key=lambda c: str(c.get("lastTransitionTime", "")), reverse=True)
        for wanted in (FALSE, UNKNOWN):
            for condition in terminal:
                if condition.get("status") == wanted:
                    return condition
        if len(self.dependents) > len(terminal):
            return {"status": UNKNOWN}
        return None
