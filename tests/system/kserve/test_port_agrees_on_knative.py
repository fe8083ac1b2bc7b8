"""The port (tests/support/kserve) against the real KServe and Knative controllers: the
same InferenceService through both, and what each writes compared field by field.

Most rollout tests run on the port because it is fast and runs on a fake clock; this is
what keeps it honest in Knative mode. Each step compares the Knative Service KServe
builds (its template's annotations and labels, its own annotations, its traffic) and
the InferenceService status KServe reports from Knative's (the predictor's traffic and
rolled-out revisions), through a canary split, its promotion, and the revisions made.

One thing the port does not do, and the comparison leaves out: KServe copies the
ServingRuntime's own ``spec.annotations`` and ``spec.labels`` onto the pod template
(manifests/10-serving-runtime.yaml's Prometheus annotations and PodMonitor labels); the
port models no ServingRuntime, and those keys never change between revisions.
"""

from __future__ import annotations

import copy
import functools
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from tests.support.cluster._world import RealWorld, is_ready
from tests.support.kserve import KSVC, KServeSim
from tests.support.kube_api import KubeAPI

ROOT = Path(__file__).resolve().parents[3]
PORT_NAMESPACE = "models"
GROUP, VERSION, PLURAL = "serving.kserve.io", "v1beta1", "inferenceservices"
ANNOTATIONS = {"serving.kserve.io/deploymentMode": "Knative",
               "team.example.com/owner": "search",
               "kubectl.kubernetes.io/last-applied-configuration": "{}",
               "serving.knative.dev/rollout-duration": "30s"}


def _isvc(namespace: str, uri: str) -> dict[str, Any]:
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "InferenceService",
            "metadata": {"name": "demo", "namespace": namespace,
                         "annotations": dict(ANNOTATIONS)},
            "spec": {"predictor": {"minReplicas": 2, "model": {
                "modelFormat": {"name": "modelctl"}, "storageUri": uri}}}}


class Port:
    def __init__(self, api: KubeAPI) -> None:
        api_client = api.api_client()
        self.sim = KServeSim(api_client, PORT_NAMESPACE, clock=lambda: 1_800_000_000.0)
        self.custom = client.CustomObjectsApi(api_client)

    def create(self, obj: dict[str, Any]) -> None:
        self.custom.create_namespaced_custom_object(GROUP, VERSION, PORT_NAMESPACE, PLURAL,
                                                    copy.deepcopy(obj))
        self.sim.reconcile()

    def patch(self, body: dict[str, Any]) -> None:
        self.custom.patch_namespaced_custom_object(GROUP, VERSION, PORT_NAMESPACE, PLURAL,
                                                   "demo", body)
        self.sim.reconcile()

    def seen(self) -> dict[str, Any]:
        isvc: Any = self.custom.get_namespaced_custom_object(GROUP, VERSION, PORT_NAMESPACE,
                                                             PLURAL, "demo")
        return _comparable(self.sim.get(KSVC, "demo-predictor"), isvc)


def _runtime_keys() -> tuple[set[str], set[str]]:
    runtime = yaml.safe_load((ROOT / "manifests" / "10-serving-runtime.yaml").read_text())
    return set(runtime["spec"].get("annotations") or {}), set(runtime["spec"].get("labels") or {})


def _without(found: dict[str, str] | None, keys: set[str]) -> dict[str, str]:
    return {k: v for k, v in (found or {}).items() if k not in keys}


def _comparable(ksvc: dict[str, Any] | None, isvc: dict[str, Any]) -> dict[str, Any]:
    assert ksvc is not None
    template = ksvc["spec"]["template"]["metadata"]
    runtime_annotations, runtime_labels = _runtime_keys()
    predictor = ((isvc.get("status") or {}).get("components") or {}).get("predictor") or {}
    return {
        "template annotations": _without(template.get("annotations"), runtime_annotations),
        "template labels": _without(template.get("labels"), runtime_labels),
        "ksvc annotations": {k: v for k, v in (ksvc["metadata"].get("annotations") or {}).items()
                             # what Knative's webhook stamps on every object it admits
                             if not k.startswith("serving.knative.dev/creator")
                             and not k.startswith("serving.knative.dev/lastModifier")},
        "ksvc traffic": ksvc["spec"].get("traffic"),
        "predictor traffic": sorted((t.get("revisionName"), t.get("percent"), t.get("tag"),
                                     bool(t.get("latestRevision")))
                                    for t in predictor.get("traffic") or []),
        "rolled out": (predictor.get("latestRolledoutRevision"),
                       predictor.get("previousRolledoutRevision")),
        "latest ready": predictor.get("latestReadyRevision"),
    }


@pytest.fixture
def port() -> Iterator[Port]:
    api = KubeAPI().start()
    try:
        yield Port(api)
    finally:
        api.stop()


def _real_seen(world: RealWorld) -> dict[str, Any]:
    return _comparable(world.get("ksvc", "demo-predictor"), world.isvc("demo"))


def _settled(world: RealWorld, revisions: int) -> bool:
    """KServe has reported what Knative routes once ``revisions`` are Ready."""
    obj = world.isvc("demo")
    status = obj.get("status") or {}
    ready = [r for r in world.names("revisions.serving.knative.dev")
             if is_ready(world.get("revisions.serving.knative.dev", r) or {})]
    return (is_ready(obj) and len(ready) == revisions
            and status.get("observedGeneration") == obj["metadata"]["generation"])


def _settled_isvc(world: RealWorld, revisions: int, _obj: dict[str, Any]) -> bool:
    return _settled(world, revisions)


def test_the_port_builds_and_splits_as_kserve_and_knative_do(world: RealWorld,
                                                             port: Port) -> None:
    steps: list[tuple[str, dict[str, Any] | None, int]] = [
        ("created", None, 1),
        ("a 10% canary", {"spec": {"predictor": {"canaryTrafficPercent": 10, "model": {
            "storageUri": "s3://models/v2"}}}}, 2),
        ("promoted", {"spec": {"predictor": {"canaryTrafficPercent": None}}}, 2),
    ]
    for what, patch, revisions in steps:
        if patch is None:
            world.cluster.apply([_isvc(world.namespace, "s3://models/v1")], server_side=False)
            port.create(_isvc(PORT_NAMESPACE, "s3://models/v1"))
        else:
            world.kube.patch_isvc(world.namespace, "demo", patch)
            port.patch(patch)
        world.wait_isvc("demo", functools.partial(_settled_isvc, world, revisions),
                        f"{what}, settled")
        real, ported = _real_seen(world), port.seen()
        differ = {key: {"KServe and Knative": real[key], "port": ported[key]}
                  for key in real if ported[key] != real[key]}
        assert not differ, f"{what}: the port differs:\n{json.dumps(differ, indent=1)}"
