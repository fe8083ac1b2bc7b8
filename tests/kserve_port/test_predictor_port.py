"""KServe's own cases for Standard-mode canaries, HPAs and HTTPRoute weights, against the port.

Ported from kserve aaac4e294 ``pkg/controller/v1beta1/inferenceservice/``:
``components/predictor_test.go``, ``reconcilers/ingress/httproute_reconciler_test.go``,
``reconcilers/hpa/hpa_reconciler_test.go`` and
``reconcilers/deployment/deployment_reconciler_test.go``.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.support.kserve import _ingress, _raw, _resources
from tests.support.kserve._resources import PredictorResources


def _isvc(stable: int, canaries: list[tuple[str, int, int | None]],
          statuses: list[tuple[str, bool]] | None) -> dict[str, Any]:
    canary = []
    for name, traffic, own in canaries:
        predictor: dict[str, Any] = {"name": name}
        if own is not None:
            predictor["minReplicas"] = own
        canary.append({"trafficPercent": traffic, "predictor": predictor})
    status = {} if statuses is None else {"canaryStatuses": [
        {"name": n, "ready": r, "trafficPercent": 0} for n, r in statuses]}
    return {"metadata": {"name": "my-model"},
            "spec": {"predictor": {"minReplicas": stable}, "canary": canary}, "status": status}


@pytest.mark.parametrize("case, stable, canaries, statuses, expected", [
    ("no canaries - unchanged", 10, [], None, 10),
    ("canary not in status - stable unchanged", 10, [("v2", 20, None)], None, 10),
    ("canary ready=false - stable unchanged", 10, [("v2", 20, None)], [("v2", False)], 10),
    ("canary ready=true - stable reduced by computed count", 10, [("v2", 20, None)],
     [("v2", True)], 8),
    ("mixed readiness - only ready canary counted", 10, [("v2", 20, None), ("v3", 30, None)],
     [("v2", True), ("v3", False)], 8),
    ("all canaries ready - stable reduced by full sum", 10,
     [("v2", 20, None), ("v3", 30, None)], [("v2", True), ("v3", True)], 5),
    ("reduction floored at 1", 2, [("v2", 50, None)], [("v2", True)], 1),
    ("explicit canary minReplicas honored when ready", 10, [("v2", 20, 3)], [("v2", True)], 7),
    ("explicit canary minReplicas ignored when not ready", 10, [("v2", 20, 3)],
     [("v2", False)], 10),
])
def test_adjust_stable_min_replicas_for_canaries(case: str, stable: int, canaries: Any,
                                                 statuses: Any, expected: int) -> None:
    """TestAdjustStableMinReplicasForCanaries/<case>."""
    isvc = _isvc(stable, canaries, statuses)
    assert _resources.adjust_stable_min_replicas(isvc, stable) == expected


def test_build_canary_predictor_merges_over_the_stable() -> None:
    """buildCanaryPredictor: mergo WithOverride of the canary over a copy of the stable,
    autoscaling fields cleared, minReplicas fixed (what canary_controller_test.go's
    "Should create separate Deployments for stable and canary" relies on: the canary runs
    its own storageUri and keeps the stable's runtime version)."""
    stable = {"minReplicas": 4, "maxReplicas": 8, "scaleTarget": 50, "model": {
        "modelFormat": {"name": "tensorflow"}, "storageUri": "s3://test/model-v1",
        "runtimeVersion": "0.14.0"}, "canaryTrafficPercent": 10}
    canary = {"trafficPercent": 25, "predictor": {"name": "v2", "model": {
        "modelFormat": {"name": "tensorflow"}, "storageUri": "s3://test/model-v2"}}}
    merged = _resources.build_canary_predictor(stable, canary, 1)
    assert merged["model"] == {"modelFormat": {"name": "tensorflow"},
                               "storageUri": "s3://test/model-v2", "runtimeVersion": "0.14.0"}
    assert merged["name"] == "v2" and merged["minReplicas"] == 1
    assert "maxReplicas" not in merged and "scaleTarget" not in merged
    assert stable["model"]["storageUri"] == "s3://test/model-v1"  # a copy was merged


def test_canary_replica_count() -> None:
    """canaryReplicaCount: ceil(stable minReplicas * trafficPercent / 100), the canary's
    own minReplicas first (canary_controller_test.go: 25% of 4 is 1, 50% of 4 is 2)."""
    isvc = {"spec": {"predictor": {"minReplicas": 4}}}
    assert _resources.canary_replica_count(isvc, {"trafficPercent": 25, "predictor": {}}) == 1
    assert _resources.canary_replica_count(isvc, {"trafficPercent": 50, "predictor": {}}) == 2
    assert _resources.canary_replica_count(isvc, {"trafficPercent": 10,
                                                  "predictor": {"minReplicas": 3}}) == 3
    assert _resources.canary_replica_count({"spec": {"predictor": {}}},
                                           {"trafficPercent": 10, "predictor": {}}) == 1


def _route(*ports: int, kind: bool = True, namespace: bool = True) -> dict[str, Any]:
    rules = []
    for port in ports:
        ref: dict[str, Any] = {"name": "my-model-predictor", "port": port}
        if kind:
            ref["kind"] = "Service"
        if namespace:
            ref["namespace"] = "default"
        rules.append({"backendRefs": [ref]})
    return {"spec": {"rules": rules}}


def _weights(route: dict[str, Any], rule: int = 0) -> list[tuple[str, int]]:
    return [(b["name"], b["weight"]) for b in route["spec"]["rules"][rule]["backendRefs"]]


@pytest.mark.parametrize("case, canaries, statuses, expected", [
    ("single canary ready", [("v2", 20)], [("v2", True)],
     [("my-model-predictor", 80), ("my-model-v2-predictor", 20)]),
    ("multiple canaries all ready", [("v2", 20), ("v3", 30)], [("v2", True), ("v3", True)],
     [("my-model-predictor", 50), ("my-model-v2-predictor", 20), ("my-model-v3-predictor", 30)]),
    ("canary not ready - excluded from backends", [("v2", 20)], [("v2", False)],
     [("my-model-predictor", 100)]),
    ("mixed readiness - only ready canary gets traffic", [("v2", 20), ("v3", 30)],
     [("v2", True), ("v3", False)],
     [("my-model-predictor", 80), ("my-model-v2-predictor", 20)]),
    ("no canary statuses - all canaries excluded", [("v2", 20)], None,
     [("my-model-predictor", 100)]),
])
def test_apply_canary_weights(case: str, canaries: list[tuple[str, int]], statuses: Any,
                              expected: list[tuple[str, int]]) -> None:
    """TestApplyCanaryWeights/<case>."""
    isvc = _isvc(1, [(n, t, None) for n, t in canaries], statuses)
    route = _route(80)
    _ingress.apply_canary_weights(isvc, isvc["status"], route)
    assert _weights(route) == expected


def test_apply_canary_weights_dual_protocol_and_empty_rules() -> None:
    """TestApplyCanaryWeights: "dual-protocol rules all ready" (every rule is weighted)
    and "skips rules with no backends"."""
    isvc = _isvc(1, [("v2", 25, None)], [("v2", True)])
    route = _route(9090, 80, kind=False, namespace=False)
    _ingress.apply_canary_weights(isvc, isvc["status"], route)
    for rule in range(2):
        assert [w for _, w in _weights(route, rule)] == [75, 25]
    empty: dict[str, Any] = {"spec": {"rules": [{"backendRefs": None}]}}
    _ingress.apply_canary_weights(_isvc(1, [("v2", 10, None)], [("v2", True)]),
                                  {"canaryStatuses": [{"name": "v2", "ready": True}]}, empty)
    assert empty["spec"]["rules"][0]["backendRefs"] is None


def _weighted(count: int) -> dict[str, Any]:
    return {"spec": {"rules": [{"backendRefs": [
        {"name": "svc", "port": 80, "weight": 100 // count} for _ in range(count)]}]}}


def test_semantic_http_route_equals_backend_ref_count() -> None:
    """TestSemanticHttpRouteEquals_BackendRefCount."""
    assert not _ingress.semantic_http_route_equals(_weighted(1), _weighted(2))
    assert _ingress.semantic_http_route_equals(_weighted(2), _weighted(2))


def test_is_http_route_ready() -> None:
    """TestIsHTTPRouteReady: no parents is not ready (ParentStatusNotAvailable); a False
    parent condition is not ready with its reason; all True is ready."""
    assert _ingress.is_http_route_ready({"status": {}}) == (
        False, "ParentStatusNotAvailable", "HttpRouteNotReady")
    bad = {"status": {"parents": [{"conditions": [
        {"type": "Accepted", "status": "True"},
        {"type": "ResolvedRefs", "status": "False", "reason": "BackendNotFound",
         "message": "not found"}]}]}}
    assert _ingress.is_http_route_ready(bad) == (False, "BackendNotFound", "not found")
    good = copy.deepcopy(bad)
    good["status"]["parents"][0]["conditions"][1]["status"] = "True"
    assert _ingress.is_http_route_ready(good)[0] is True


def _meta(name: str = "basic-ig") -> PredictorResources:
    return PredictorResources(name=name, namespace="basic-ig-namespace",
                              labels={"label": "label-value"},
                              annotations={"annotation": "annotation-value"}, pod_spec={})


def test_create_hpa() -> None:
    """TestCreateHPA: "inference graph default hpa" and "inference graph specified hpa"
    (minReplicas 2, maxReplicas 5, scaleTarget 30, cpu)."""
    owner = {"metadata": {"name": "o", "uid": "u"}}
    default = _raw.create_hpa(_meta(), {}, owner)["spec"]
    assert default == {
        "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "basic-ig"},
        "minReplicas": 1, "maxReplicas": 1, "behavior": {},
        "metrics": [{"type": "Resource", "resource": {
            "name": "cpu", "target": {"type": "Utilization", "averageUtilization": 80}}}]}
    given = _raw.create_hpa(_meta(), {"minReplicas": 2, "maxReplicas": 5, "scaleTarget": 30,
                                      "scaleMetric": "cpu"}, owner)["spec"]
    assert (given["minReplicas"], given["maxReplicas"]) == (2, 5)
    assert given["metrics"][0]["resource"]["target"]["averageUtilization"] == 30


def test_set_default_deployment_spec() -> None:
    """TestSetDefaultDeploymentSpec: RollingUpdate 25%/25%, revisionHistoryLimit 10,
    progressDeadlineSeconds 600 when the predictor sets no strategy; TestCreateDefault-
    Deployment: replicas only with the ``none`` autoscaler class."""
    res = _meta("p")
    spec = _raw.create_deployment(res, {"minReplicas": 3}, {"metadata": {"name": "o"}})["spec"]
    assert spec["strategy"] == {"type": "RollingUpdate",
                                "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": "25%"}}
    assert (spec["revisionHistoryLimit"], spec["progressDeadlineSeconds"]) == (10, 600)
    assert "replicas" not in spec  # the HPA owns them
    res = _meta("p")
    res.annotations["serving.kserve.io/autoscalerClass"] = "none"
    assert _raw.create_deployment(res, {"minReplicas": 3}, {"metadata": {"name": "o"}})["spec"][
        "replicas"] == 3
    recreate = _raw.create_deployment(_meta("p"), {"deploymentStrategy": {"type": "Recreate"}},
                                      {"metadata": {"name": "o"}})["spec"]
    assert recreate["strategy"] == {"type": "Recreate"}
    assert "progressDeadlineSeconds" not in recreate  # only in setDefaultDeploymentSpec
