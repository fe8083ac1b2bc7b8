"""A small world for rollout tests: an emulated API server, a KServe stand-in, a registry.

``World`` holds a real local registry with versions 1..N of one model (``stable``
on version 1), the emulated Kubernetes API with one InferenceService serving
version 1, and a ``KServeSim`` that has reconciled it to Ready.

The stand-in runs with KServe's shipped ``inferenceservice-config``
(``KSERVE_DEFAULTS``: its annotation disallow-list, so every InferenceService
annotation reaches the revisions and pods), except that Standard-mode worlds turn
on ``enableGatewayApi`` by default: without it KServe splits no Standard-mode
traffic at all, and rollouts there refuse to start (tested apart). Source: kserve
``config/configmap/inferenceservice.yaml`` (``enableGatewayApi: false``) and
``pkg/controller/v1beta1/inferenceservice/reconcilers/ingress/httproute_reconciler.go``
(``applyCanaryWeights``).
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubernetes import client

from registry import Registry
from rollout.backends import make_backend
from rollout.backends._kserve._backend import KServeBackend
from rollout.backends._kserve._kube import KubeClient
from rollout.backends._kserve._state_store import StateStore
from tests.support.kserve_sim import KSERVE_DEFAULTS, KServeConfig, KServeSim
from tests.support.kube_api import KubeAPI

MODEL = "demo-fixed"
NAMESPACE = "models"
ISVC = "demo"


def push_versions(root: Path, count: int) -> Registry:
    """A registry at ``root`` with ``count`` versions of MODEL; ``stable`` names version 1."""
    reg = Registry.open(str(root / "registry"))
    for number in range(1, count + 1):
        src = root / f"src-{number}"
        src.mkdir()
        (src / "task.json").write_text(f'{{"latency_ms": {number}}}')
        reg.push(src, MODEL, "fixed-latency")
    reg.set_alias(MODEL, "stable", 1)
    return reg


def isvc_manifest(name: str, mode: str, storage_uri: str, *, version: int | None = 1,
                  model: str | None = MODEL) -> dict[str, Any]:
    """An InferenceService as `kubectl apply` would create it (no status yet)."""
    annotations = {"serving.kserve.io/deploymentMode": mode}
    if model is not None:
        annotations["modelctl.io/model"] = model
    if version is not None:
        annotations["modelctl.io/version"] = str(version)
    return {
        "apiVersion": "serving.kserve.io/v1beta1",
        "kind": "InferenceService",
        "metadata": {"name": name, "namespace": NAMESPACE, "annotations": annotations},
        "spec": {"predictor": {
            "minReplicas": 1,
            "model": {"modelFormat": {"name": "modelctl"}, "runtime": "modelctl-predictor",
                      "storageUri": storage_uri},
        }},
    }


@dataclass
class World:
    api: KubeAPI
    sim: KServeSim
    registry: Registry
    kube: KubeClient
    clock: Callable[[], float]

    def create(self, manifest: dict[str, Any]) -> None:
        custom = client.CustomObjectsApi(self.api.api_client())
        custom.create_namespaced_custom_object(
            "serving.kserve.io", "v1beta1", NAMESPACE, "inferenceservices",
            copy.deepcopy(manifest))

    def isvc(self, name: str = ISVC) -> dict[str, Any]:
        return self.kube.get_isvc(NAMESPACE, name)

    def backend(self, name: str = ISVC) -> KServeBackend:
        """The ``kserve`` backend of ``name``, built the one way there is (``make_backend``)."""
        backend = make_backend("kserve", kube=self.kube, namespace=NAMESPACE, isvc=name)
        assert isinstance(backend, KServeBackend)
        return backend

    def uri(self, version: int) -> str:
        return self.registry.storage_uri(MODEL, version)

    def events(self, name: str = ISVC) -> list[dict[str, Any]]:
        return self.kube.list_events(NAMESPACE, name)

    def state(self, name: str = ISVC) -> dict[str, Any] | None:
        """The rollout state as stored (the ConfigMap's JSON), or None."""
        stored = StateStore(self.kube, NAMESPACE, name).read().state
        return stored.to_dict() if stored else None


def make_world(tmp: Path, clock: Callable[[], float], *, mode: str = "Knative",
               versions: int = 3, ready_delay_s: float = 0.0,
               config: KServeConfig | None = None) -> World:
    """Start the API server, load one InferenceService serving version 1, reconcile it."""
    api = KubeAPI().start()
    reg = push_versions(tmp, versions)
    kube = KubeClient.from_host(api.host, namespace=NAMESPACE)
    if config is None:
        config = (KSERVE_DEFAULTS if mode in ("Knative", "Serverless")
                  else dataclasses.replace(KSERVE_DEFAULTS, enable_gateway_api=True))
    sim = KServeSim(api.api_client(), NAMESPACE, clock=clock, ready_delay_s=ready_delay_s,
                    config=config)
    world = World(api=api, sim=sim, registry=reg, kube=kube, clock=clock)
    world.create(isvc_manifest(ISVC, mode, world.uri(1)))
    sim.ready_delay_s = 0.0
    sim.reconcile()
    sim.ready_delay_s = ready_delay_s
    return world


# -- queue mode -----------------------------------------------------------------------
KEDA = ("keda.sh", "v1alpha1", NAMESPACE, "scaledobjects")


def add_queue_workers(world: World) -> None:
    """The queue overlay's worker Deployment and ScaledObject for ISVC serving version 1,
    rendered by ``deploy render``'s code with real kustomize, created and reconciled."""
    from deploycheck import RenderRequest, find_kubectl, render
    from tests.support.manifests import OVERLAYS

    docs = render(RenderRequest(MODEL, "1", "queue", namespace=NAMESPACE, name=ISVC),
                  OVERLAYS / "queue", find_kubectl(),
                  lambda model, ref: world.uri(int(ref)), lambda model, ref: ref)
    api = world.api.api_client()
    for doc in docs:
        body: Any = copy.deepcopy(doc)  # the client sends plain dicts as they are
        if doc["kind"] == "Deployment":
            client.AppsV1Api(api).create_namespaced_deployment(NAMESPACE, body)
        elif doc["kind"] == "ScaledObject":
            client.CustomObjectsApi(api).create_namespaced_custom_object(*KEDA, body)
    world.sim.reconcile()


def get_or_none(world: World, kind: str, name: str) -> dict[str, Any] | None:
    """A Deployment or ScaledObject of the namespace, or None."""
    from rollout import NotFound

    try:
        if kind == "Deployment":
            return world.kube.get_deployment(NAMESPACE, name)
        return world.kube.get_scaledobject(NAMESPACE, name)
    except NotFound:
        return None


def storage_uri(deployment: dict[str, Any] | None) -> str | None:
    """What a worker Deployment's storage initializer downloads."""
    assert deployment is not None
    [init] = deployment["spec"]["template"]["spec"]["initContainers"]
    return str(init["args"][0])


def streams(scaler: dict[str, Any] | None) -> set[str]:
    """The streams a ScaledObject's triggers read."""
    assert scaler is not None
    return {t["metadata"]["stream"] for t in scaler["spec"]["triggers"]}
