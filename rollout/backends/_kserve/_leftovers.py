"""What KServe leaves behind in Standard mode, and the rollout deletes.

KServe v0.20.0 deletes the Deployments and Services the spec no longer names
(``components/predictor.go``, the orphan clean-up after ``reconcileCanaryDeployments``)
but not their HorizontalPodAutoscalers: after a rollback the canary's
``<isvc>-<name>-predictor`` stays, after a promotion the old stable's, each aiming at a
Deployment that is gone (``FailedGetScale`` events). It sets no owner on a canary's
autoscaler either, so deleting the InferenceService would not collect it. The rollout
deletes the one its own rollout left, and only one KServe made for this InferenceService.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rollout._state import Phase, RolloutState
from rollout.backends._kserve._knative import predictor
from rollout.backends._kserve._standard import entries, service_name

ISVC_LABEL = "serving.kserve.io/inferenceservice"  # constants.InferenceServicePodLabelKey


def leftover_hpa_name(obj: Mapping[str, Any], state: RolloutState | None) -> str | None:
    """The HorizontalPodAutoscaler KServe leaves once the spec no longer names its
    Deployment: the canary's after a rollback, the old stable's after a promotion."""
    if state is None or entries(obj):
        return None
    isvc = str((obj.get("metadata") or {}).get("name"))
    canary = state.backend_data.get("canary_name") or None
    if state.phase is Phase.PROMOTED and canary and predictor(obj).get("name") == canary:
        return service_name(isvc, state.backend_data.get("stable_name") or None)
    if state.phase in (Phase.ROLLING_BACK, Phase.ROLLED_BACK) and canary:
        return service_name(isvc, canary)
    return None


def owned_by(obj: Mapping[str, Any] | None, isvc: Mapping[str, Any]) -> bool:
    """KServe made ``obj`` for this InferenceService: it is owned by it, or (v0.20.0 sets
    no owner on a canary's autoscaler) carries KServe's label naming it."""
    meta = isvc.get("metadata") or {}
    mine = (obj or {}).get("metadata") or {}
    if any(r.get("uid") == meta.get("uid") and r.get("kind") == "InferenceService"
           for r in mine.get("ownerReferences") or []):
        return bool(meta.get("uid"))
    return bool(meta.get("name")) and (mine.get("labels") or {}).get(ISVC_LABEL) == meta["name"]
