"""Knative mode end to end: the official client writes an InferenceService, the stand-in
reconciles it, and what lands in the emulated API is what KServe and Knative would write."""

from __future__ import annotations

from collections.abc import Callable

from tests.kserve_port.conftest import Cluster, isvc
from tests.support.kserve import KSVC, REVISION, ROUTE, SERVICE
from tests.support.kserve.config import KSERVE_DEFAULTS, KServeConfig


def _predictor(c: Cluster, name: str = "demo") -> dict:
    return c.get(name)["status"]["components"]["predictor"]


def test_the_knative_service_is_what_create_knative_service_builds(
        cluster: Callable[..., Cluster]) -> None:
    """ksvc_reconciler.go createKnativeService via predictor.go buildPredictorResources: the
    isvc annotations minus serviceAnnotationDisallowedList, the storage URI annotation,
    the autoscaling ones; the isvc and component labels; one 100% latestRevision target."""
    c = cluster()
    obj = isvc("demo", "Knative", minReplicas=2)
    obj["metadata"]["annotations"].update({
        "team.example.com/owner": "search",
        "kubectl.kubernetes.io/last-applied-configuration": "{}",
        "serving.knative.dev/rollout-duration": "30s"})
    c.create(obj)
    c.sim.reconcile()
    ksvc = c.obj(KSVC, "demo-predictor")
    assert ksvc is not None
    template = ksvc["spec"]["template"]
    assert template["metadata"]["annotations"] == {
        "serving.kserve.io/deploymentMode": "Knative", "team.example.com/owner": "search",
        "internal.serving.kserve.io/storage-initializer-sourceuri": "s3://models/v1",
        "autoscaling.knative.dev/class": "kpa.autoscaling.knative.dev",
        "autoscaling.knative.dev/min-scale": "2"}
    assert ksvc["metadata"]["annotations"] == {"serving.knative.dev/rollout-duration": "30s"}
    assert template["metadata"]["labels"] == {"serving.kserve.io/inferenceservice": "demo",
                                              "component": "predictor"}
    assert ksvc["spec"]["traffic"] == [{"latestRevision": True, "percent": 100}]
    assert ksvc["metadata"]["ownerReferences"][0]["kind"] == "InferenceService"
    assert c.sim.revisions("demo") == ["demo-predictor-00001"]
    revision = c.obj(REVISION, "demo-predictor-00001")
    assert revision is not None and revision["metadata"]["annotations"][
        "internal.serving.kserve.io/storage-initializer-sourceuri"] == "s3://models/v1"
    route = c.obj(ROUTE, "demo-predictor")
    assert route is not None and route["status"]["traffic"] == [
        {"revisionName": "demo-predictor-00001", "latestRevision": True, "percent": 100}]
    external = c.obj(SERVICE, "demo")  # reconcileExternalService
    assert external is not None and external["spec"]["type"] == "ExternalName"
    status = c.get("demo")["status"]
    assert status["url"] == "http://demo.models.svc.cluster.local"
    assert {x["type"]: x["status"] for x in status["conditions"]} == {
        "IngressReady": "True", "LatestDeploymentReady": "True",
        "PredictorConfigurationReady": "True", "PredictorReady": "True",
        "PredictorRouteReady": "True", "Ready": "True", "RoutesReady": "True",
        "Stopped": "False"}


def test_an_annotation_change_is_a_new_revision_unless_disallowed(
        cluster: Callable[..., Cluster]) -> None:
    """With KServe's default disallow-list every annotation reaches the revision
    template, so changing one rolls a new Revision; a disallowed one (or one added to the
    list in the ConfigMap, appended as NewInferenceServicesConfig does) does not."""
    c = cluster(KServeConfig.from_configmap(
        service_annotation_disallowed_list=["modelctl.io/state"]))
    c.create(isvc("demo", "Knative"))
    c.sim.reconcile()
    c.patch("demo", {"metadata": {"annotations": {"modelctl.io/state": "a"}}})
    c.sim.reconcile()
    c.patch("demo", {"metadata": {"annotations": {
        "kubectl.kubernetes.io/last-applied-configuration": "{\"x\": 1}"}}})
    c.sim.reconcile()
    assert c.sim.revisions("demo") == ["demo-predictor-00001"]
    c.patch("demo", {"metadata": {"annotations": {"modelctl.io/version": "7"}}})
    c.sim.reconcile()
    assert c.sim.revisions("demo") == ["demo-predictor-00001", "demo-predictor-00002"]
    assert KSERVE_DEFAULTS.disallowed_annotations == (
        "autoscaling.knative.dev/min-scale", "autoscaling.knative.dev/max-scale",
        "internal.serving.kserve.io/storage-initializer-sourceuri",
        "kubectl.kubernetes.io/last-applied-configuration", "modelFormat")


def test_observed_generation_is_the_knative_services(cluster: Callable[..., Cluster]) -> None:
    """PropagateStatus copies the Knative Service's observedGeneration: a label patch
    leaves the InferenceService at generation 1 but changes the revision template, so the
    Knative Service (and the reported observedGeneration) moves to 2."""
    c = cluster()
    c.create(isvc("demo", "Knative"))
    c.sim.reconcile()
    assert c.get("demo")["status"]["observedGeneration"] == 1
    c.patch("demo", {"metadata": {"labels": {"team": "search"}}})
    c.sim.reconcile()
    obj = c.get("demo")
    assert obj["metadata"]["generation"] == 1
    assert obj["status"]["observedGeneration"] == 2
    assert c.sim.revisions("demo")[-1] == "demo-predictor-00002"


def test_a_canary_split_follows_ksvc_reconciler(cluster: Callable[..., Cluster]) -> None:
    """createKnativeService splits only with a rolled-out revision: canaryTrafficPercent to
    ``latestRevision: true`` (the latest *ready* revision, as the Route resolves it) and the
    rest to latestRolledoutRevision (tag prev). While the new revision is not Ready, both
    targets resolve to the old one; once Ready the split is real. No other rule."""
    c = cluster(ready_delay_s=30.0)
    c.sim.ready_delay_s = 0.0
    c.create(isvc("demo", "Knative"))
    c.sim.reconcile()
    c.sim.ready_delay_s = 30.0
    c.patch("demo", {"spec": {"predictor": {"canaryTrafficPercent": 10, "model": {
        "storageUri": "s3://models/v2"}}}})
    c.sim.reconcile()
    ksvc = c.obj(KSVC, "demo-predictor")
    assert ksvc is not None and ksvc["spec"]["traffic"] == [
        {"latestRevision": True, "percent": 10},
        {"revisionName": "demo-predictor-00001", "latestRevision": False, "percent": 90,
         "tag": "prev"}]
    pending = _predictor(c)
    assert pending["latestCreatedRevision"] == "demo-predictor-00002"
    assert pending["latestReadyRevision"] == "demo-predictor-00001"
    assert {(t["revisionName"], t["percent"]) for t in pending["traffic"]} == {
        ("demo-predictor-00001", 10), ("demo-predictor-00001", 90)}
    assert c.get("demo")["status"]["modelStatus"]["transitionStatus"] == "InProgress"
    c.advance(30.0)
    ready = _predictor(c)
    assert [(t["revisionName"], t["percent"]) for t in ready["traffic"]] == [
        ("demo-predictor-00002", 10), ("demo-predictor-00001", 90)]
    assert ready["latestRolledoutRevision"] == "demo-predictor-00001"  # 10% is no rollout
    c.patch("demo", {"spec": {"predictor": {"canaryTrafficPercent": None}}})
    c.sim.reconcile()
    done = _predictor(c)
    assert done["traffic"] == [{"revisionName": "demo-predictor-00002",
                                "latestRevision": True, "percent": 100}]
    assert (done["latestRolledoutRevision"], done["previousRolledoutRevision"]) == (
        "demo-predictor-00002", "demo-predictor-00001")
    assert c.sim.revisions("demo") == ["demo-predictor-00001", "demo-predictor-00002"]


def test_a_failing_revision_stays_unready_then_fails(cluster: Callable[..., Cluster]) -> None:
    """A revision whose storage fails never becomes Ready: traffic stays on the last Ready
    one; past Knative's 600 s progress deadline it is False, and with it the Configuration,
    the Knative Service and PredictorReady."""
    c = cluster()
    c.create(isvc("demo", "Knative"))
    c.sim.reconcile()
    c.sim.failing_uris.add("s3://models/bad")
    c.patch("demo", {"spec": {"predictor": {"model": {"storageUri": "s3://models/bad"}}}})
    c.sim.reconcile()
    first = c.get("demo")["status"]
    assert first["components"]["predictor"]["latestReadyRevision"] == "demo-predictor-00001"
    ready = {x["type"]: x["status"] for x in first["conditions"]}
    assert ready["PredictorReady"] == "Unknown"
    c.advance(601.0)
    failed = c.get("demo")["status"]
    conditions = {x["type"]: x for x in failed["conditions"]}
    assert conditions["PredictorReady"]["status"] == "False"
    assert conditions["PredictorReady"]["reason"] == "RevisionFailed"
    assert failed["components"]["predictor"]["traffic"][0]["revisionName"] == (
        "demo-predictor-00001")
    assert failed["modelStatus"]["transitionStatus"] == "BlockedByFailedLoad"
