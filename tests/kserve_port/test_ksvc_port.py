"""KServe's own cases for the Knative Service it writes, against the port.

Ported from kserve aaac4e294
``pkg/controller/v1beta1/inferenceservice/reconcilers/knative/ksvc_reconciler_test.go``.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.kserve import _api, _knative_kserve
from tests.support.kserve import config as c
from tests.support.kserve._resources import PredictorResources
from tests.support.kube_api import KubeAPI

OWNER = {"metadata": {"name": "test-isvc", "uid": "u1"}}
STATUS = {"latestRolledoutRevision": "test-revision-1",
          "latestReadyRevision": "test-revision-2", "latestCreatedRevision": "test-revision-2",
          "previousRolledoutRevision": "test-revision-0"}
CONFIG = c.KServeConfig(disallowed_labels=("serving.knative.dev/revision",))
FULL_EXT = {"minReplicas": 1, "maxReplicas": 3, "scaleTarget": 10, "scaleMetric": "concurrency",
            "canaryTrafficPercent": 20, "timeout": 300, "containerConcurrency": 100}


def _resources(**annotations: str) -> PredictorResources:
    return PredictorResources(
        name="test-service", namespace="default", labels={"app": "test-app"},
        annotations={c.ROLLOUT_DURATION: "30s", c.OPENSHIFT_PASSTHROUGH: "true",
                     c.ENABLE_TAG_ROUTING: "true", **annotations},
        pod_spec={"containers": [{"name": "test-container", "image": "test-image"}]})


@pytest.mark.parametrize("case, ext, length, canary", [
    ("With canary traffic split", FULL_EXT, 2, 20),
    ("Without canary traffic", {}, 1, 100),
    ("With canary 100 percent", {"canaryTrafficPercent": 100}, 1, 100),
])
def test_create_knative_service(case: str, ext: dict[str, Any], length: int, canary: int) -> None:
    """TestCreateKnativeService/<case>."""
    ksvc = _knative_kserve.create_knative_service(_resources(), ext, STATUS, CONFIG, OWNER)
    assert (ksvc["metadata"]["name"], ksvc["metadata"]["namespace"]) == ("test-service",
                                                                         "default")
    traffic = ksvc["spec"]["traffic"]
    assert len(traffic) == length and traffic[0]["percent"] == canary
    assert traffic[0]["tag"] == "latest"  # enable-tag-routing is "true"
    if length > 1:
        assert traffic[1] == {"revisionName": "test-revision-1", "latestRevision": False,
                              "percent": 100 - canary, "tag": "prev"}
    template = ksvc["spec"]["template"]
    assert template["metadata"]["annotations"][c.KNATIVE_MIN_SCALE] == str(
        ext.get("minReplicas", c.DEFAULT_MIN_REPLICAS))
    if ext.get("maxReplicas"):
        assert template["metadata"]["annotations"][c.KNATIVE_MAX_SCALE] == "3"
    for key in (c.ROLLOUT_DURATION, c.OPENSHIFT_PASSTHROUGH):  # managedKsvcAnnotations
        assert key in ksvc["metadata"]["annotations"]
        assert key not in template["metadata"]["annotations"]
    spec = template["spec"]
    assert spec.get("timeoutSeconds") == ext.get("timeout")
    assert spec.get("responseStartTimeoutSeconds") == ext.get("timeout")
    assert spec.get("containerConcurrency") == ext.get("containerConcurrency")


def test_no_split_without_a_rolled_out_revision() -> None:
    """createKnativeService: canaryTrafficPercent splits only once there is a
    latestRolledoutRevision (the condition of the split's ``if``)."""
    ksvc = _knative_kserve.create_knative_service(_resources(), FULL_EXT, {}, CONFIG, OWNER)
    assert ksvc["spec"]["traffic"] == [{"latestRevision": True, "percent": 100,
                                        "tag": "latest"}]


def test_the_latest_tag_needs_tag_routing() -> None:
    res = _resources()
    res.annotations.pop(c.ENABLE_TAG_ROUTING)
    ksvc = _knative_kserve.create_knative_service(res, FULL_EXT, STATUS, CONFIG, OWNER)
    assert [t.get("tag") for t in ksvc["spec"]["traffic"]] == [None, "prev"]


@pytest.mark.parametrize("case", ["Create a new service when it doesn't exist",
                                  "Update existing service with different configuration"])
def test_ksvc_reconciler_reconcile(api: KubeAPI, case: str) -> None:
    """TestKsvcReconciler_Reconcile/<case>, against the emulated API."""
    snapshot = _api.Snapshot(_api.RawClient(api.api_client()), "default")
    res = PredictorResources(
        name="test-service", namespace="default", labels={"app": "test-app"},
        annotations={c.ROLLOUT_DURATION: "30s", c.ENABLE_TAG_ROUTING: "true"},
        pod_spec={"containers": [{"name": "test-container", "image": "test-image"}]})
    if case.startswith("Update"):
        snapshot.create(_api.KSVC, {
            "metadata": {"name": "test-service", "labels": {"app": "test-app-old"},
                         "annotations": {c.ROLLOUT_DURATION: "60s"}},
            "spec": {"template": {"spec": {"timeoutSeconds": 200, "containerConcurrency": 50,
                                           "containers": [{"name": "test-container",
                                                           "image": "test-image-old"}]}}}})
    desired = _knative_kserve.create_knative_service(res, FULL_EXT, STATUS, CONFIG, OWNER)
    status = _knative_kserve.reconcile_ksvc(snapshot, desired)
    assert status is not None
    stored = _api.Snapshot(_api.RawClient(api.api_client()), "default").get(_api.KSVC,
                                                                            "test-service")
    assert stored is not None
    if case.startswith("Update"):
        assert stored["metadata"]["labels"]["app"] == "test-app"
        assert stored["metadata"]["annotations"][c.ROLLOUT_DURATION] == "30s"
        traffic = stored["spec"]["traffic"]
        assert [(t["percent"], t.get("tag")) for t in traffic] == [(20, "latest"), (80, "prev")]
        assert stored["spec"]["template"]["spec"]["containers"][0]["image"] == "test-image"
        assert stored["metadata"]["generation"] == 2


def test_an_identical_service_is_not_updated(api: KubeAPI) -> None:
    """reconcileKsvc: ``semanticEquals`` first, so nothing is written (and the Knative
    Service's generation stays) when nothing differs."""
    snapshot = _api.Snapshot(_api.RawClient(api.api_client()), "default")
    desired = _knative_kserve.create_knative_service(_resources(), FULL_EXT, STATUS, CONFIG,
                                                     OWNER)
    _knative_kserve.reconcile_ksvc(snapshot, desired)
    before = len(api.log)
    _knative_kserve.reconcile_ksvc(snapshot, _knative_kserve.create_knative_service(
        _resources(), FULL_EXT, STATUS, CONFIG, OWNER))
    assert api.writes(before, include_controllers=True) == []
    assert _knative_kserve.semantic_equals(desired, desired)
    changed = {**desired, "spec": {**desired["spec"], "traffic": []}}
    assert not _knative_kserve.semantic_equals(changed, desired)
