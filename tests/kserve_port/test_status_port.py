"""KServe's own cases for InferenceService status, against the port.

Ported from kserve aaac4e294 ``pkg/apis/serving/v1beta1/inference_service_status_test.go``;
each test names the Go test (and subtest) it ports.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.kserve import _status
from tests.support.kserve._conditions import get_condition


def now() -> float:
    return 1_800_000_000.0


def _cond(kind: str, status: str, reason: str = "", message: str = "") -> dict[str, Any]:
    return {"type": kind, "status": status, "reason": reason, "message": message,
            "lastTransitionTime": "2027-01-15T08:00:00Z"}


AVAILABLE = _cond("Available", "True", "MinimumReplicasAvailable",
                  "Deployment has minimum availability.")
UNAVAILABLE = _cond("Available", "False", "MinimumReplicasUnavailable",
                    "Deployment does not have minimum availability.")


# TestPropagateRawStatus: scenario -> (deployment conditions, expected PredictorReady).
RAW_SCENARIOS = {
    "Available true": ([AVAILABLE], True),
    "Available true, Progressing succeeded": (
        [AVAILABLE, _cond("Progressing", "True", "NewReplicaSetAvailable",
                          "ReplicaSet has successfully progressed.")], True),
    "Available true, Progressing failed": (
        [AVAILABLE, _cond("Progressing", "False", "", "ProgressDeadlineExceeded")], False),
    "Available false, Progressing failed": (
        [UNAVAILABLE, _cond("Progressing", "False", "", "Some error happened")], False),
    "Available false, Progressing completed": (
        [UNAVAILABLE, _cond("Progressing", "True", "NewReplicaSetAvailable")], False),
    "Available false, Progressing ongoing": (
        [UNAVAILABLE, _cond("Progressing", "True", "NewReplicaSetCreated")], False),
    "Available true, ReplicaFailure true": (
        [AVAILABLE, _cond("ReplicaFailure", "True", "replica failure", "replica failure")],
        False),
}


@pytest.mark.parametrize("scenario", list(RAW_SCENARIOS))
def test_propagate_raw_status(scenario: str) -> None:
    """TestPropagateRawStatus/<scenario>."""
    conditions, expected = RAW_SCENARIOS[scenario]
    deployment = {"metadata": {"name": "test-predictor",
                               "annotations": {"deployment.kubernetes.io/revision": "1"}},
                  "spec": {}, "status": {"conditions": conditions}}
    status: dict[str, Any] = {}
    _status.propagate_raw_status(status, "predictor", [deployment],
                                 "http://test-predictor-default.default.example.com", now)
    assert _status.is_condition_ready(status, "PredictorReady") is expected


def test_propagate_raw_status_empty_deployment_list() -> None:
    """TestPropagateRawStatus_EmptyDeploymentList."""
    status: dict[str, Any] = {}
    _status.propagate_raw_status(status, "predictor", [],
                                 "http://test-predictor-default.default.example.com", now)
    assert (get_condition(status, "PredictorReady") or {}).get("status") == "False"
    assert status.get("observedGeneration", 0) == 0


def test_propagate_raw_status_observed_generation_is_the_first_deployments() -> None:
    """PropagateRawStatus's last statement (inference_service_status.go): the
    InferenceService's observedGeneration is the first Deployment's."""
    deployment = {"metadata": {"name": "p"}, "status": {"observedGeneration": 7,
                                                         "conditions": [AVAILABLE]}}
    status: dict[str, Any] = {"observedGeneration": 3}
    _status.propagate_raw_status(status, "predictor", [deployment], None, now)
    assert status["observedGeneration"] == 7


def test_propagate_raw_status_with_messages() -> None:
    """TestPropagateRawStatusWithMessages."""
    status: dict[str, Any] = {}
    _status.propagate_raw_status_with_messages(status, "predictor", "test reason",
                                               "test message", "False", now)
    condition = get_condition(status, "PredictorReady")
    assert condition is not None and condition["status"] == "False"
    assert (condition["message"], condition["reason"]) == ("test message", "test reason")


@pytest.mark.parametrize("component, kind", [("predictor", "PredictorReady"),
                                             ("transformer", "TransformerReady"),
                                             ("explainer", "ExplainerReady")])
def test_propagate_raw_status_with_messages_all_components(component: str, kind: str) -> None:
    """TestPropagateRawStatusWithMessages_AllComponents."""
    status: dict[str, Any] = {}
    _status.propagate_raw_status_with_messages(status, component, "ReconcileFailed",
                                               "some reconcile error", "False", now)
    condition = get_condition(status, kind) or {}
    assert (condition.get("status"), condition.get("reason"), condition.get("message")) == (
        "False", "ReconcileFailed", "some reconcile error")


URL = "http://test-predictor-default.default.example.com"
READY_SERVICE = [_cond("Foo", "True"), _cond("RoutesReady", "True"),
                 _cond("ConfigurationsReady", "True"), _cond("Ready", "True")]


@pytest.mark.parametrize("case", ["latest", "rolled out"])
def test_propagate_status(case: str) -> None:
    """TestPropagateStatus: "Status with Traffic Routing for Latest Revision" and
    "Status with Traffic Routing for Rolledout Revision"."""
    traffic = [{"revisionName": "test-predictor-default-0001", "latestRevision": True,
                "percent": 100 if case == "latest" else 90}]
    service = {"conditions": READY_SERVICE, "latestReadyRevisionName":
               "test-predictor-default-0001", "traffic": traffic, "address": {}, "url": URL}
    status: dict[str, Any] = {}
    if case == "rolled out":
        service["latestCreatedRevisionName"] = "test-predictor-default-0001"
        status["components"] = {"predictor": {
            "latestRolledoutRevision": "test-predictor-default-0001"}}
    _status.propagate_status(status, "predictor", service, now)
    assert _status.is_condition_ready(status, "PredictorReady")
    assert status["components"]["predictor"]["traffic"][0] == traffic[0]


def test_propagate_status_copies_the_knative_observed_generation() -> None:
    """PropagateStatus's last statement: ``ss.ObservedGeneration =
    serviceStatus.ObservedGeneration`` (the Knative Service's, not the InferenceService's)."""
    status: dict[str, Any] = {"observedGeneration": 9}
    _status.propagate_status(status, "predictor", {"observedGeneration": 2,
                                                   "conditions": READY_SERVICE}, now)
    assert status["observedGeneration"] == 2


def _initialized() -> dict[str, Any]:
    status: dict[str, Any] = {}
    _status.conditions(status, now).initialize()
    return status


def _set(status: dict[str, Any], kind: str, value: str) -> None:
    _status.set_condition(status, kind, {"type": kind, "status": value}, now)


ALL = ["predictor", "explainer", "transformer"]


@pytest.mark.parametrize("kind, explainer, expected, reason", [
    ("RoutesReady", "True", "True", None),
    ("RoutesReady", "False", "False", "ExplainerRoutesReady not ready"),
    ("RoutesReady", "Unknown", "Unknown", "ExplainerRoutesReady not ready"),
    ("LatestDeploymentReady", "True", "True", None),
    ("LatestDeploymentReady", "False", "False", "ExplainerConfigurationReady not ready"),
])
def test_propagate_cross_component_status(kind: str, explainer: str, expected: str,
                                          reason: str | None) -> None:
    """TestPropagateCrossComponentStatus: "All components ready sets RoutesReady True",
    "One component not ready sets RoutesReady False", "One component unknown sets
    RoutesReady Unknown", and the two LatestDeploymentReady subtests."""
    status = _initialized()
    mapping = _status.CROSS_COMPONENT[kind]
    _set(status, mapping["predictor"], "True")
    _set(status, mapping["explainer"], explainer)
    _set(status, mapping["transformer"], "True")
    _status.propagate_cross_component_status(status, ALL, kind, now)
    condition = get_condition(status, kind)
    assert condition is not None and condition["status"] == expected
    assert condition.get("reason") == reason


def test_propagate_cross_component_status_edge_cases() -> None:
    """TestPropagateCrossComponentStatus: "No components sets nothing" (True) and
    "Unknown conditionType does nothing"."""
    status = _initialized()
    _status.propagate_cross_component_status(status, [], "RoutesReady", now)
    assert (get_condition(status, "RoutesReady") or {}).get("status") == "True"
    status = _initialized()
    _status.propagate_cross_component_status(status, ["predictor"], "UnknownConditionType", now)
    assert get_condition(status, "UnknownConditionType") is None


def _deployment(name: str, kind: str, status: str, reason: str, message: str = ""
                ) -> dict[str, Any]:
    return {"metadata": {"name": name},
            "status": {"conditions": [_cond(kind, status, reason, message)]}}


def test_get_deployment_condition_single_deployment() -> None:
    """TestGetDeploymentCondition_SingleDeployment."""
    found = _status.get_deployment_condition(
        [_deployment("d", "Available", "True", "MinimumReplicasAvailable", "ok")], "Available")
    assert (found["status"], found["reason"], found["message"]) == (
        "True", "MinimumReplicasAvailable", "ok")


def test_get_deployment_condition_multi_deployment_same_reason() -> None:
    """TestGetDeploymentCondition_MultiDeployment_SameReason: a reason both share is kept
    without the container prefixes."""
    found = _status.get_deployment_condition(
        [_deployment("predictor", "Progressing", "True", "NewReplicaSetAvailable",
                     "Head progressed."),
         _deployment("predictor-worker", "Progressing", "True", "NewReplicaSetAvailable",
                     "Worker progressed.")], "Progressing")
    assert (found["status"], found["reason"]) == ("True", "NewReplicaSetAvailable")


def test_get_deployment_condition_multi_deployment_one_false() -> None:
    """TestGetDeploymentCondition_MultiDeployment_OneFalse."""
    found = _status.get_deployment_condition(
        [_deployment("predictor", "Available", "True", "HeadReady", "Head node ready."),
         _deployment("predictor-worker", "Available", "False", "WorkerNotReady",
                     "Worker node not ready.")], "Available")
    assert (found["type"], found["status"]) == ("Available", "False")
    assert found["message"] == ("predictor-container: Head node ready., "
                                "worker-container: Worker node not ready.")
    assert found["reason"] == "predictor-container: HeadReady, worker-container: WorkerNotReady"


def test_get_deployment_condition_no_matching_condition() -> None:
    """TestGetDeploymentCondition_SingleDeployment_NoMatchingCondition: an empty condition."""
    found = _status.get_deployment_condition(
        [_deployment("d", "Progressing", "True", "x")], "Available")
    assert found == {}


def test_clear_condition() -> None:
    """TestInferenceServiceStatus_ClearCondition: PredictorReady, a terminal condition,
    stays; clearing one never set is harmless. (A non-terminal one, CanaryPredictorReady,
    goes, as ``reconcileCanaryDeployments`` relies on.)"""
    status = _initialized()
    _set(status, "PredictorReady", "True")
    manager = _status.conditions(status, now)
    manager.clear("PredictorReady")
    assert _status.is_condition_ready(status, "PredictorReady")
    manager.clear("TransformerReady")
    _set(status, "CanaryPredictorReady", "True")
    manager.clear("CanaryPredictorReady")
    assert get_condition(status, "CanaryPredictorReady") is None
