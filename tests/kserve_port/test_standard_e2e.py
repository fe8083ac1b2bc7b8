"""Standard mode end to end, including KServe's own canary controller cases.

The ``Describe("Canary deployment controller")`` contexts are ported from kserve aaac4e294
``pkg/controller/v1beta1/inferenceservice/canary_controller_test.go`` (there,
``markCanaryAvailable`` plays the Deployment controller; here the stand-in's Deployment
controller makes the canary available).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from tests.kserve_port.conftest import Cluster, isvc
from tests.support.kserve import DEPLOYMENT, HPA, HTTPROUTE, INGRESS, SERVICE
from tests.support.kserve.config import KSERVE_DEFAULTS

SOURCE_URI = "internal.serving.kserve.io/storage-initializer-sourceuri"
GATEWAY = dataclasses.replace(KSERVE_DEFAULTS, enable_gateway_api=True)


def _canary(name: str, traffic: int, uri: str) -> dict[str, Any]:
    return {"trafficPercent": traffic, "predictor": {"name": name, "model": {
        "modelFormat": {"name": "tensorflow"}, "storageUri": uri, "runtimeVersion": "0.14.0"}}}


def _canary_isvc(name: str, min_replicas: int, canaries: list[dict[str, Any]],
                 autoscaler: str = "none") -> dict[str, Any]:
    """makeCanaryISVC: Standard, autoscaler class ``none`` (getDefaultAnnotations)."""
    obj = isvc(name, "Standard", "s3://test/model-v1", minReplicas=min_replicas)
    obj["metadata"]["annotations"]["serving.kserve.io/autoscalerClass"] = autoscaler
    obj["spec"]["predictor"]["model"] = {"modelFormat": {"name": "tensorflow"},
                                         "storageUri": "s3://test/model-v1",
                                         "runtimeVersion": "0.14.0"}
    obj["spec"]["canary"] = canaries
    return obj


def _replicas(c: Cluster, name: str) -> int | None:
    deployment = c.obj(DEPLOYMENT, name)
    return None if deployment is None else deployment["spec"].get("replicas")


def test_should_create_separate_deployments_for_stable_and_canary(
        cluster: Callable[..., Cluster]) -> None:
    """"When creating an InferenceService with a canary" / "Should create separate
    Deployments for stable and canary": stable 3 (4 - 1 once the canary is Ready),
    canary 1 (25% of 4), each running its own storage URI."""
    c = cluster()
    c.create(_canary_isvc("canary-create-test", 4, [_canary("v2", 25, "s3://test/model-v2")]))
    c.sim.reconcile()
    assert _replicas(c, "canary-create-test-predictor") == 3
    assert _replicas(c, "canary-create-test-v2-predictor") == 1
    canary = c.obj(DEPLOYMENT, "canary-create-test-v2-predictor")
    stable = c.obj(DEPLOYMENT, "canary-create-test-predictor")
    assert canary and canary["spec"]["template"]["metadata"]["annotations"][SOURCE_URI] == (
        "s3://test/model-v2")
    assert stable and stable["spec"]["template"]["metadata"]["annotations"][SOURCE_URI] == (
        "s3://test/model-v1")
    assert stable["metadata"]["labels"] == {
        "serving.kserve.io/inferenceservice": "canary-create-test", "component": "predictor",
        "app": "isvc.canary-create-test-predictor"}
    status = c.get("canary-create-test")["status"]
    assert status["canaryStatuses"] == [{"name": "v2", "ready": True, "trafficPercent": 25,
                                         "modelStatus": {"transitionStatus": ""}}]
    assert {x["type"]: x.get("reason") for x in status["conditions"]}[
        "CanaryPredictorReady"] == "AllCanariesReady"


def test_should_adjust_replica_counts(cluster: Callable[..., Cluster]) -> None:
    """"When bumping canary traffic" / "Should adjust replica counts": 50% of 4 is 2
    canary and 2 stable."""
    c = cluster()
    c.create(_canary_isvc("canary-traffic-test", 4, [_canary("v2", 25, "s3://test/model-v2")]))
    c.sim.reconcile()
    c.patch("canary-traffic-test", {"spec": {"canary": [_canary("v2", 50, "s3://test/model-v2")]}})
    c.sim.reconcile()
    assert _replicas(c, "canary-traffic-test-v2-predictor") == 2
    assert _replicas(c, "canary-traffic-test-predictor") == 2


def test_should_not_trigger_a_redeployment_of_the_canary_pods(
        cluster: Callable[..., Cluster]) -> None:
    """"When promoting a canary" / "Should not trigger a redeployment of the canary pods":
    predictor.name v2, its storageUri, no canary: the v2 Deployment keeps its pod template
    (one rollout) and the old stable one is deleted, with its Service."""
    c = cluster()
    c.create(_canary_isvc("canary-promote-test", 4, [_canary("v2", 25, "s3://test/model-v2")]))
    c.sim.reconcile()
    before = c.obj(DEPLOYMENT, "canary-promote-test-v2-predictor")
    assert before is not None
    predictor = c.get("canary-promote-test")["spec"]["predictor"]
    predictor["name"] = "v2"
    predictor["model"]["storageUri"] = "s3://test/model-v2"
    c.patch("canary-promote-test", {"spec": {"predictor": predictor, "canary": None}})
    c.sim.reconcile()
    after = c.obj(DEPLOYMENT, "canary-promote-test-v2-predictor")
    assert after is not None
    assert after["spec"]["template"]["metadata"]["annotations"] == (
        before["spec"]["template"]["metadata"]["annotations"])
    assert c.sim.rollouts("canary-promote-test") == {"canary-promote-test-v2-predictor": 1}
    assert after["spec"]["replicas"] == 4  # now the stable: its minReplicas
    assert c.obj(DEPLOYMENT, "canary-promote-test-predictor") is None
    assert c.obj(SERVICE, "canary-promote-test-predictor") is None


def test_should_delete_the_canary_and_restore_stable_replicas(
        cluster: Callable[..., Cluster]) -> None:
    """"When removing a canary" / "Should delete the canary Deployment and Service and
    restore stable replicas"."""
    c = cluster()
    c.create(_canary_isvc("canary-remove-test", 4, [_canary("v2", 25, "s3://test/model-v2")]))
    c.sim.reconcile()
    assert _replicas(c, "canary-remove-test-predictor") == 3
    c.patch("canary-remove-test", {"spec": {"canary": None}})
    c.sim.reconcile()
    assert c.obj(DEPLOYMENT, "canary-remove-test-v2-predictor") is None
    assert c.obj(SERVICE, "canary-remove-test-v2-predictor") is None
    assert _replicas(c, "canary-remove-test-predictor") == 4
    status = c.get("canary-remove-test")["status"]
    assert "canaryStatuses" not in status
    assert "CanaryPredictorReady" not in {x["type"] for x in status["conditions"]}


def test_should_create_separate_deployments_with_correct_replica_split(
        cluster: Callable[..., Cluster]) -> None:
    """"When creating multiple canaries": 4 in all, 2 stable, 1 per 25% canary."""
    c = cluster()
    c.create(_canary_isvc("canary-multi-test", 4, [_canary("v2", 25, "s3://test/model-v2"),
                                                   _canary("v3", 25, "s3://test/model-v3")]))
    c.sim.reconcile()
    assert _replicas(c, "canary-multi-test-predictor") == 2
    assert _replicas(c, "canary-multi-test-v2-predictor") == 1
    assert _replicas(c, "canary-multi-test-v3-predictor") == 1


def test_the_canary_hpa_is_owned_by_the_inference_service(
        cluster: Callable[..., Cluster]) -> None:
    """"When the canary uses an HPA autoscaler" / "Should set an owner reference on the
    canary HPA"; with the HPA class the HPA controller, not KServe, sizes the Deployments."""
    c = cluster()
    c.create(_canary_isvc("canary-hpa-test", 4, [_canary("v2", 25, "s3://test/model-v2")],
                          autoscaler="hpa"))
    c.sim.reconcile()
    hpa = c.obj(HPA, "canary-hpa-test-v2-predictor")
    assert hpa is not None
    owner = next(r for r in hpa["metadata"]["ownerReferences"] if r.get("controller"))
    assert (owner["kind"], owner["name"]) == ("InferenceService", "canary-hpa-test")
    assert (hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"]) == (1, 1)
    stable = c.obj(HPA, "canary-hpa-test-predictor")
    assert stable and (stable["spec"]["minReplicas"], stable["spec"]["maxReplicas"]) == (3, 3)
    assert _replicas(c, "canary-hpa-test-predictor") == 3


def test_adding_a_canary_does_not_move_observed_generation(
        cluster: Callable[..., Cluster]) -> None:
    """PropagateRawStatus: observedGeneration is the stable Deployment's; a canary leaves
    that Deployment as it was, so the InferenceService's generation moves and it does not."""
    c = cluster()
    c.create(_canary_isvc("demo", 1, []))
    c.sim.reconcile()
    assert c.get("demo")["status"]["observedGeneration"] == 1
    c.patch("demo", {"spec": {"canary": [_canary("v2", 10, "s3://test/model-v2")]}})
    c.sim.reconcile()
    obj = c.get("demo")
    assert obj["metadata"]["generation"] == 2 and obj["status"]["observedGeneration"] == 1


def test_an_annotation_change_restarts_the_pods(cluster: Callable[..., Cluster]) -> None:
    """The pod template carries the isvc annotations (buildPredictorResources): a new one
    is a new ReplicaSet (a rollout); while it rolls, Available stays True, so PredictorReady
    does too (PropagateRawStatus), with Progressing ReplicaSetUpdated."""
    c = cluster()
    c.create(_canary_isvc("demo", 1, []))
    c.sim.reconcile()
    c.sim.ready_delay_s = 20.0
    c.patch("demo", {"metadata": {"annotations": {"modelctl.io/version": "2"}}})
    c.sim.reconcile()
    assert c.sim.rollouts("demo") == {"demo-predictor": 2}
    rolling = c.obj(DEPLOYMENT, "demo-predictor")
    assert rolling is not None
    assert (rolling["status"]["replicas"], rolling["status"]["updatedReplicas"]) == (2, 1)
    assert {x["type"]: x["reason"] for x in rolling["status"]["conditions"]}[
        "Progressing"] == "ReplicaSetUpdated"
    ready = {x["type"]: x["status"] for x in c.get("demo")["status"]["conditions"]}
    assert ready["PredictorReady"] == "True"
    c.advance(20.0)
    done = c.obj(DEPLOYMENT, "demo-predictor")
    assert done is not None and done["status"]["replicas"] == 1
    assert {x["type"]: x["reason"] for x in done["status"]["conditions"]}[
        "Progressing"] == "NewReplicaSetAvailable"


def test_without_the_gateway_api_nothing_is_split(cluster: Callable[..., Cluster]) -> None:
    """enableGatewayApi false (shipped): kube_ingress_reconciler.go routes every host to
    the stable predictor Service; no HTTPRoute, whatever the canaries."""
    c = cluster()
    c.create(_canary_isvc("demo", 4, [_canary("v2", 25, "s3://test/model-v2")]))
    c.sim.reconcile()
    assert c.obj(HTTPROUTE, "demo-predictor") is None
    ingress = c.obj(INGRESS, "demo")
    assert ingress is not None
    backends = {p["backend"]["service"]["name"] for rule in ingress["spec"]["rules"]
                for p in rule["http"]["paths"]}
    assert backends == {"demo-predictor"}
    assert [r["host"] for r in ingress["spec"]["rules"]] == [
        "demo-models.example.com", "demo-predictor-models.example.com"]


def test_with_the_gateway_api_only_ready_canaries_get_weight(
        cluster: Callable[..., Cluster]) -> None:
    """enableGatewayApi true: HTTPRoutes ``<isvc>-predictor`` and ``<isvc>``, written once
    the predictor is Ready; applyCanaryWeights gives a canary its share only once
    canaryStatuses reports it Ready."""
    c = cluster(GATEWAY, ready_delay_s=0.0)
    c.create(_canary_isvc("demo", 4, []))
    c.sim.reconcile()
    c.sim.ready_delay_s = 10.0
    c.patch("demo", {"spec": {"canary": [_canary("v2", 25, "s3://test/model-v2")]}})
    c.sim.reconcile()

    def weights(name: str) -> list[tuple[str, int | None]]:
        route = c.obj(HTTPROUTE, name)
        assert route is not None
        return [(b["name"], b.get("weight")) for b in route["spec"]["rules"][0]["backendRefs"]]

    assert weights("demo-predictor") == [("demo-predictor", 100)]
    assert weights("demo") == [("demo-predictor", 100)]
    c.advance(10.0)
    assert weights("demo-predictor") == [("demo-predictor", 75), ("demo-v2-predictor", 25)]
    route = c.obj(HTTPROUTE, "demo-predictor")
    assert route is not None and {x["type"] for x in route["status"]["parents"][0][
        "conditions"]} == {"Accepted", "ResolvedRefs"}
    assert {x["type"]: x["status"] for x in c.get("demo")["status"]["conditions"]}[
        "IngressReady"] == "True"


def test_deleting_the_inference_service_collects_what_kserve_made(
        cluster: Callable[..., Cluster]) -> None:
    """Everything KServe writes carries a controller ownerReference to the InferenceService
    (SetControllerReference), so the garbage collector removes it with its owner."""
    c = cluster()
    c.create(_canary_isvc("demo", 2, [_canary("v2", 50, "s3://test/model-v2")]))
    c.sim.reconcile()
    assert c.obj(DEPLOYMENT, "demo-v2-predictor") is not None
    c.sim.paused = True
    c.custom.delete_namespaced_custom_object("serving.kserve.io", "v1beta1", "models",
                                             "inferenceservices", "demo")
    c.sim.reconcile()  # paused: nothing moves
    assert c.obj(DEPLOYMENT, "demo-predictor") is not None
    c.sim.paused = False
    c.sim.reconcile()
    for kind, name in ((DEPLOYMENT, "demo-predictor"), (DEPLOYMENT, "demo-v2-predictor"),
                       (SERVICE, "demo-predictor"), (INGRESS, "demo")):
        assert c.obj(kind, name) is None, (kind, name)
    assert c.sim.rollouts("demo") == {}
