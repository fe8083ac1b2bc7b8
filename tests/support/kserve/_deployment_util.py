"""Kubernetes' deployment helpers the Deployment controller stand-in uses.

Ported from kubernetes/kubernetes ``pkg/controller/deployment/util/deployment_util.go``
(``HasProgressDeadline``, ``DeploymentComplete``, ``DeploymentTimedOut``,
``DeploymentProgressing``, ``ResolveFenceposts``, ``MaxSurge``, ``MaxUnavailable``,
``SetDeploymentCondition``) and apimachinery ``intstr.GetScaledValueFromIntOrPercent``.
Deployments are the JSON dicts the API stores.
"""

from __future__ import annotations

import math
from typing import Any

from tests.support.kserve._conditions import parse_timestamp, timestamp

TRUE, FALSE = "True", "False"


def scaled_value(value: Any, total: int, round_up: bool) -> int:
    """intstr ``GetScaledValueFromIntOrPercent`` (rounding up or down)."""
    if isinstance(value, int):
        return value
    text = str(value)
    scaled = int(text.rstrip("%")) * total / 100
    return math.ceil(scaled) if round_up else math.floor(scaled)


def has_progress_deadline(d: dict[str, Any]) -> bool:
    """``HasProgressDeadline``: set and not MaxInt32."""
    deadline = (d.get("spec") or {}).get("progressDeadlineSeconds")
    return deadline is not None and int(deadline) != 2**31 - 1


def deployment_complete(d: dict[str, Any], status: dict[str, Any]) -> bool:
    """``DeploymentComplete``: every desired replica updated and available, no old pod."""
    replicas = spec_replicas(d)
    return (int(status.get("updatedReplicas") or 0) == replicas
            and int(status.get("replicas") or 0) == replicas
            and int(status.get("availableReplicas") or 0) == replicas
            and int(status.get("observedGeneration") or 0) >= int(
                d.get("metadata", {}).get("generation") or 0))


def deployment_timed_out(d: dict[str, Any], status: dict[str, Any], now: float) -> bool:
    """``DeploymentTimedOut``: the Progressing condition last updated longer than
    progressDeadlineSeconds ago (never after a completed rollout)."""
    if not has_progress_deadline(d):
        return False
    cond = get_condition(status, "Progressing")
    if cond is None or cond.get("reason") == "NewReplicaSetAvailable":
        return False
    if cond.get("reason") == "ProgressDeadlineExceeded":
        return True
    since = parse_timestamp(cond.get("lastUpdateTime"))
    deadline = float(d["spec"]["progressDeadlineSeconds"])
    return since is not None and since + deadline < now


def spec_replicas(d: dict[str, Any]) -> int:
    value = (d.get("spec") or {}).get("replicas")
    return 1 if value is None else int(value)


def resolve_fenceposts(d: dict[str, Any]) -> tuple[int, int]:
    """``ResolveFenceposts`` (0 and 0 resolve to maxUnavailable 1); zero unless rolling."""
    strategy = (d.get("spec") or {}).get("strategy") or {}
    if strategy.get("type", "RollingUpdate") != "RollingUpdate":
        return 0, 0
    rolling = strategy.get("rollingUpdate") or {}
    replicas = spec_replicas(d)
    surge = scaled_value(rolling.get("maxSurge", 0), replicas, True)  # ValueOrDefault(.., 0)
    unavailable = scaled_value(rolling.get("maxUnavailable", 0), replicas, False)
    if surge == 0 and unavailable == 0:
        unavailable = 1
    return surge, unavailable


def max_surge(d: dict[str, Any]) -> int:
    return resolve_fenceposts(d)[0]


def max_unavailable(d: dict[str, Any]) -> int:
    """``MaxUnavailable``: 0 unless a rolling update, never more than the replicas."""
    if spec_replicas(d) == 0:
        return 0
    return min(resolve_fenceposts(d)[1], spec_replicas(d))


def get_condition(status: dict[str, Any], kind: str) -> dict[str, Any] | None:
    return next((x for x in status.get("conditions") or [] if x.get("type") == kind), None)


def set_condition(status: dict[str, Any], kind: str, value: str, reason: str, message: str,
                   now: float) -> None:
    """``SetDeploymentCondition``: same status and reason is no change; same status keeps
    lastTransitionTime; the condition is moved to the end."""
    current = get_condition(status, kind)
    if current is not None and current.get("status") == value and current.get("reason") == reason:
        return
    cond: dict[str, Any] = {"type": kind, "status": value, "lastUpdateTime": timestamp(now),
            "lastTransitionTime": timestamp(now), "reason": reason, "message": message}
    if current is not None and current.get("status") == value:
        cond["lastTransitionTime"] = current.get("lastTransitionTime")
    status["conditions"] = [x for x in status.get("conditions") or [] if x.get("type") != kind]
    status["conditions"].append(cond)


def deployment_progressing(old: dict[str, Any], new: dict[str, Any]) -> bool:
    """``DeploymentProgressing``: pods updated, old pods gone, or more ready/available."""
    def get(status: dict[str, Any], key: str) -> int:
        return int(status.get(key) or 0)
    old_old = get(old, "replicas") - get(old, "updatedReplicas")
    new_old = get(new, "replicas") - get(new, "updatedReplicas")
    return (get(new, "updatedReplicas") > get(old, "updatedReplicas") or new_old < old_old
            or get(new, "readyReplicas") > get(old, "readyReplicas")
            or get(new, "availableReplicas") > get(old, "availableReplicas"))
