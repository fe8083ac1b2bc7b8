"""InferenceService status, as KServe writes it.

Ported from kserve aaac4e294 ``pkg/apis/serving/v1beta1/inference_service_status.go``:
``PropagateStatus``, ``PropagateRawStatus``, ``getDeploymentCondition``,
``PropagateRawStatusWithMessages``, ``PropagateCrossComponentStatus``, ``SetCondition``,
``PropagateModelStatus`` and ``UpdateModelRevisionStates``. The status is the JSON dict
KServe's ``InferenceServiceStatus`` marshals to (omitempty fields left out when empty).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from tests.support.kserve._conditions import FALSE, TRUE, UNKNOWN, ConditionSet, get_condition

PREDICTOR_READY = "PredictorReady"
INGRESS_READY = "IngressReady"
READY_CONDITIONS = {"predictor": PREDICTOR_READY, "transformer": "TransformerReady",
                    "explainer": "ExplainerReady"}
ROUTE_CONDITIONS = {"predictor": "PredictorRouteReady", "transformer": "TransformerRouteReady",
                    "explainer": "ExplainerRoutesReady"}
CONFIGURATION_CONDITIONS = {"predictor": "PredictorConfigurationReady",
                            "transformer": "TransformerConfigurationReady",
                            "explainer": "ExplainerConfigurationReady"}
CROSS_COMPONENT = {"RoutesReady": ROUTE_CONDITIONS,
                   "LatestDeploymentReady": CONFIGURATION_CONDITIONS}
# conditionSet = apis.NewLivingConditionSet(PredictorReady, IngressReady)
ISVC_DEPENDENTS = (PREDICTOR_READY, INGRESS_READY)


def conditions(status: dict[str, Any], now: Callable[[], float]) -> ConditionSet:
    return ConditionSet(status, ISVC_DEPENDENTS, now=now)


def set_condition(status: dict[str, Any], kind: str, condition: dict[str, Any] | None,
                  now: Callable[[], float]) -> None:
    """``SetCondition``: nil does nothing; Unknown/True/False go through the condition set."""
    if condition is None:
        return
    manager = conditions(status, now)
    reason, message = condition.get("reason", ""), condition.get("message", "")
    if condition.get("status") == UNKNOWN:
        manager.mark_unknown(kind, reason, message)
    elif condition.get("status") == TRUE:
        manager.mark_true_with_reason(kind, reason, message)
    elif condition.get("status") == FALSE:
        manager.mark_false(kind, reason, message)


def is_condition_ready(status: dict[str, Any], kind: str) -> bool:
    condition = get_condition(status, kind)
    return condition is not None and condition.get("status") == TRUE


def _component(status: dict[str, Any], component: str) -> dict[str, Any]:
    return dict((status.get("components") or {}).get(component) or {})


def _store(status: dict[str, Any], component: str, spec: dict[str, Any]) -> None:
    spec = {k: v for k, v in spec.items() if v not in (None, "", [])}
    status["components"] = {**(status.get("components") or {}), component: spec}


def _set_observed(status: dict[str, Any], generation: Any) -> None:
    if generation:
        status["observedGeneration"] = int(generation)
    else:
        status.pop("observedGeneration", None)  # int64 omitempty


def propagate_status(status: dict[str, Any], component: str, service_status: dict[str, Any],
                     now: Callable[[], float]) -> None:
    """``PropagateStatus``: a component's revisions, traffic and conditions, and
    ``observedGeneration``, copied from the Knative Service's status."""
    spec = _component(status, component)
    spec["latestCreatedRevision"] = service_status.get("latestCreatedRevisionName", "")
    latest_ready = service_status.get("latestReadyRevisionName", "")
    traffic = service_status.get("traffic") or []
    revision_traffic: dict[str, int] = {}
    for target in traffic:
        if target.get("percent") is not None:
            name = target.get("revisionName", "")
            revision_traffic[name] = revision_traffic.get(name, 0) + int(target["percent"])
    for target in traffic:
        if target.get("revisionName", "") != latest_ready or not target.get("latestRevision"):
            continue
        percent = target.get("percent")
        if spec.get("latestRolledoutRevision", "") != latest_ready:
            if percent is not None and int(percent) == 100:  # the last fully rolled out one
                spec["previousRolledoutRevision"] = spec.get("latestRolledoutRevision", "")
                spec["latestRolledoutRevision"] = latest_ready
        elif (latest_ready == service_status.get("latestCreatedRevisionName", "")
              and percent is not None and int(percent) < 100
              and revision_traffic.get(target.get("revisionName", "")) == 100
              and spec.get("previousRolledoutRevision")):
            # rolled out with 100% and then rolled back: traffic split over the same revision
            spec["latestRolledoutRevision"] = spec["previousRolledoutRevision"]
    if latest_ready != spec.get("latestReadyRevision", ""):
        spec["latestReadyRevision"] = latest_ready
    ready = get_condition(service_status, "Ready")
    if ready is not None and ready.get("status") == TRUE:
        if service_status.get("address") is not None:
            spec["address"] = service_status["address"]
        if service_status.get("url") is not None:
            spec["url"] = service_status["url"]
    set_condition(status, READY_CONDITIONS[component], ready, now)
    set_condition(status, ROUTE_CONDITIONS[component],
                  get_condition(service_status, "RoutesReady"), now)
    spec["traffic"] = traffic
    set_condition(status, CONFIGURATION_CONDITIONS[component],
                  get_condition(service_status, "ConfigurationsReady"), now)
    _store(status, component, spec)
    _set_observed(status, service_status.get("observedGeneration"))


def get_deployment_condition(deployments: Sequence[dict[str, Any]], kind: str) -> dict[str, Any]:
    """``getDeploymentCondition``: the single deployment's condition (an empty one if it
    has none); for two (head and worker), a combined one."""
    found: dict[str, Any] = {}
    if len(deployments) > 1:
        picked = []
        for deployment in deployments:
            prefix = "worker-container: " if "worker" in deployment["metadata"]["name"] else (
                "predictor-container: ")
            for cond in (deployment.get("status") or {}).get("conditions") or []:
                if cond.get("type") == kind:
                    picked.append((prefix, cond))
                    break
        if len(picked) == 2:
            reasons = [cond.get("reason", "") for _, cond in picked]
            found = {"type": kind,
                     "status": TRUE if all(cd.get("status") == TRUE for _, cd in picked) else FALSE,
                     "message": ", ".join(p + cd.get("message", "") for p, cd in picked),
                     "reason": reasons[0] if len(set(reasons)) == 1 else ", ".join(
                         p + cd.get("reason", "") for p, cd in picked)}
    elif len(deployments) == 1:
        for cond in (deployments[0].get("status") or {}).get("conditions") or []:
            if cond.get("type") == kind:
                found = {"type": kind, "status": cond.get("status"),
                         "message": cond.get("message", ""), "reason": cond.get("reason", "")}
                break
    return found


def propagate_raw_status(status: dict[str, Any], component: str,
                         deployments: Sequence[dict[str, Any]], url: str | None,
                         now: Callable[[], float]) -> None:
    """``PropagateRawStatus``: the component's readiness from its Deployment's Available,
    Progressing and ReplicaFailure conditions; ``observedGeneration`` from the *first
    deployment's* ``status.observedGeneration``."""
    spec = _component(status, component)
    kind = READY_CONDITIONS[component]
    ready: dict[str, Any] = {"type": kind, "status": FALSE, "reason": ""}
    available = get_deployment_condition(deployments, "Available")
    if available.get("status") == TRUE:
        ready = {"type": kind, "status": TRUE, "reason": available.get("reason", ""),
                 "message": available.get("message", "")}
    progressing = get_deployment_condition(deployments, "Progressing")
    if progressing.get("status") == FALSE:
        if progressing.get("message"):  # a problem, often ProgressDeadlineExceeded
            ready = {"type": kind, "status": FALSE, "reason": progressing.get("reason", ""),
                     "message": progressing["message"]}
    elif progressing.get("status") == TRUE:
        if progressing.get("reason") == "NewReplicaSetAvailable":
            ready = {"type": kind, "status": TRUE, "reason": progressing["reason"],
                     "message": progressing.get("message", "")}
        elif available.get("status") != TRUE:
            ready = {"type": kind, "status": UNKNOWN, "reason": progressing.get("reason", ""),
                     "message": progressing.get("message", "")}
    if available.get("status") == FALSE:
        ready = {"type": kind, "status": FALSE, "reason": available.get("reason", ""),
                 "message": available.get("message", "")}
    failure = get_deployment_condition(deployments, "ReplicaFailure")
    if failure.get("status") == TRUE:
        ready = {"type": kind, "status": FALSE, "reason": failure.get("reason", ""),
                 "message": failure.get("message", "")}
    if ready["status"] == TRUE and url is not None:
        spec["url"] = url
    set_condition(status, kind, ready, now)
    _store(status, component, spec)
    if deployments:
        _set_observed(status, (deployments[0].get("status") or {}).get("observedGeneration"))


def propagate_raw_status_with_messages(status: dict[str, Any], component: str, reason: str,
                                       message: str, target: str,
                                       now: Callable[[], float]) -> None:
    """``PropagateRawStatusWithMessages``."""
    _store(status, component, _component(status, component))
    set_condition(status, READY_CONDITIONS[component],
                  {"reason": reason, "message": message, "status": target}, now)


def propagate_cross_component_status(status: dict[str, Any], components: Sequence[str],
                                     kind: str, now: Callable[[], float]) -> None:
    """``PropagateCrossComponentStatus``: RoutesReady / LatestDeploymentReady over components."""
    mapping = CROSS_COMPONENT.get(kind)
    if mapping is None:
        return
    cross: dict[str, Any] = {"type": kind, "status": TRUE}
    for component in components:
        condition = get_condition(status, mapping[component])
        if condition is None or condition.get("status") != TRUE:
            unknown = condition is None or condition.get("status") == UNKNOWN
            cross["status"] = UNKNOWN if unknown else FALSE
            cross["reason"] = f"{mapping[component]} not ready"
    set_condition(status, kind, cross, now)


@dataclass(frozen=True)
class Pod:
    """What ``PropagateModelStatus`` reads of a pod: Running and Ready, and the
    storage-initializer init container (running, or terminated with an error)."""

    ready: bool
    initializer_running: bool
    initializer_failed: bool


def _update_model_revision_states(status: dict[str, Any], state: str,
                                  failure: dict[str, Any] | None = None) -> None:
    """``UpdateModelRevisionStates``."""
    model = dict(status.get("modelStatus") or {"transitionStatus": ""})
    states = dict(model.get("states") or {"activeModelState": ""})
    states["targetModelState"] = state
    if state in ("Pending", "Loading"):
        model["transitionStatus"] = "InProgress"
    elif state == "Loaded":
        model["transitionStatus"] = "UpToDate"
        states["activeModelState"] = "Loaded"
    elif state == "FailedToLoad":
        model["transitionStatus"] = "BlockedByFailedLoad"
    model["states"] = states
    if failure is not None:
        model["lastFailureInfo"] = failure
    status["modelStatus"] = model


def propagate_model_status(status: dict[str, Any], component_status: dict[str, Any],
                           pods: Sequence[Pod], raw: bool, service_status: dict[str, Any],
                           now: Callable[[], float]) -> None:
    """``PropagateModelStatus`` over the pods of the latest created revision (Knative) or of
    the stable Deployment (Standard)."""
    model = dict(status.get("modelStatus") or {"transitionStatus": ""})
    copies = dict(model.get("copies") or {"failedCopies": 0})
    ready_copies = sum(1 for pod in pods if pod.ready)
    if ready_copies:
        copies["totalCopies"] = ready_copies
    else:
        copies.pop("totalCopies", None)  # omitempty
    model["copies"] = copies
    status["modelStatus"] = model
    if not pods:
        if not raw and any(cond.get("status") == FALSE
                           for cond in service_status.get("conditions") or []):
            _update_model_revision_states(status, "FailedToLoad")
            return
        _update_model_revision_states(status, "Pending")
        return
    first = pods[0]
    if first.initializer_running:
        _update_model_revision_states(status, "Loading")
        return
    if first.initializer_failed:
        _update_model_revision_states(status, "FailedToLoad", {"reason": "ModelLoadFailed",
                                                               "exitCode": 1})
        return
    if conditions(status, now).is_happy() and (
            raw or component_status.get("latestCreatedRevision")
            == component_status.get("latestReadyRevision")):
        _update_model_revision_states(status, "Loaded")
        return
    _update_model_revision_states(status, "Pending")
