"""A rollout world on the real control plane: a namespace of its own with the rollout's
RBAC, a local registry with versions 1..N of one model, and InferenceServices that the
real KServe reconciles. The rollout talks to the API server as the ServiceAccount
``modelctl-rollout`` (manifests/30-rollout-rbac.yaml), so a verb its Role lacks is a
real 403; the test itself reads and writes as cluster-admin.

Source: Ready is KServe's own ``Ready`` condition (github.com/kserve/kserve
``pkg/apis/serving/v1beta1/inference_service_status.go``), as ``kubectl wait
--for=condition=Ready`` reads it."""

from __future__ import annotations

import copy
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from registry import Registry
from rollout.backends import make_backend
from rollout.backends._kserve._backend import KServeBackend
from rollout.backends._kserve._kube import KubeClient
from tests.support.cluster._cluster import Cluster
from tests.support.procs import wait_for
from tests.support.rollout_world import MODEL, push_versions

READY_TIMEOUT_S = 60.0


def is_ready(obj: dict[str, Any]) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (obj.get("status") or {}).get("conditions") or [])


@dataclass
class RealWorld:
    cluster: Cluster
    namespace: str
    registry: Registry
    kube: KubeClient  # as modelctl-rollout
    admin: KubeClient  # as cluster-admin
    watchers: list[Watcher] = field(default_factory=list)
    stages: list[str] = field(default_factory=list)

    def uri(self, version: int) -> str:
        return self.registry.storage_uri(MODEL, version)

    def isvc_manifest(self, name: str, mode: str = "Standard", *, version: int = 1,
                      min_replicas: int = 1, annotations: dict[str, str] | None = None,
                      model: dict[str, Any] | None = None) -> dict[str, Any]:
        """An InferenceService as our base renders it: the modelctl runtime's format."""
        meta_annotations = {"serving.kserve.io/deploymentMode": mode,
                            "modelctl.io/model": MODEL, "modelctl.io/version": str(version),
                            **(annotations or {})}
        body = model if model is not None else {"modelFormat": {"name": "modelctl"}}
        return {
            "apiVersion": "serving.kserve.io/v1beta1", "kind": "InferenceService",
            "metadata": {"name": name, "namespace": self.namespace,
                         "annotations": meta_annotations},
            "spec": {"predictor": {"minReplicas": min_replicas, "maxReplicas": 8,
                                   "model": {**body, "storageUri": self.uri(version)}}},
        }

    def create(self, manifest: dict[str, Any], *, wait: bool = True) -> dict[str, Any]:
        self.cluster.apply([copy.deepcopy(manifest)], server_side=False)
        name = manifest["metadata"]["name"]
        if wait:
            return self.wait_isvc(name, is_ready, "Ready")
        return self.isvc(name)

    def isvc(self, name: str) -> dict[str, Any]:
        return self.admin.get_isvc(self.namespace, name)

    def wait_isvc(self, name: str, check: Callable[[dict[str, Any]], bool], what: str,
                  timeout_s: float = READY_TIMEOUT_S) -> dict[str, Any]:
        def passed() -> dict[str, Any] | None:
            obj = self.isvc(name)
            return obj if check(obj) else None

        return wait_for(passed, timeout_s=timeout_s, interval_s=0.2,
                        what=f"InferenceService {self.namespace}/{name} {what}")

    def get(self, kind: str, name: str) -> dict[str, Any] | None:
        """Any namespaced object by kubectl's kind name, or None."""
        done = self.cluster.kubectl("get", kind, name, "-n", self.namespace, "-o", "json",
                                    check=False)
        return json.loads(done.stdout) if done.returncode == 0 else None

    def names(self, kind: str, selector: str | None = None) -> set[str]:
        """The names of this namespace's objects of ``kind`` (with ``selector``'s labels)."""
        labels = ["-l", selector] if selector else []
        out = self.cluster.kubectl("get", kind, "-n", self.namespace, *labels, "-o",
                                   "jsonpath={.items[*].metadata.name}").stdout
        return set(out.split())

    def backend(self, name: str) -> KServeBackend:
        backend = make_backend("kserve", kube=self.kube, namespace=self.namespace, isvc=name)
        assert isinstance(backend, KServeBackend)
        return backend

    def watch(self, sample: Callable[[], Any], interval_s: float = 0.05) -> Watcher:
        """Sample ``sample()`` in the background until the world ends (``Watcher.seen``)."""
        watcher = Watcher(sample, interval_s)
        self.watchers.append(watcher)
        return watcher.start()

    def fail_storage(self, uri: str) -> None:
        """From now on, pods whose storage initializer fetches ``uri`` never start: a
        KWOK Stage (weight 1, so it wins over the default ``pod-ready``, weight 0: KWOK
        ``pkg/utils/lifecycle/lifecycle.go`` ``Match``) gives them what a kubelet shows
        for an init container that keeps failing (``CrashLoopBackOff``, ``Initialized``
        False). KServe names the URI in the pod template's ``storage-initializer-sourceuri``
        annotation (``pkg/controller/v1beta1/inferenceservice/components/predictor.go``),
        which its injector reads (``pkg/webhook/admission/pod/
        storage_initializer_injector.go``)."""
        name = f"storage-fails-{self.namespace}-{len(self.stages)}"
        self.cluster.apply([storage_failure_stage(name, uri)])
        self.stages.append(name)

    def close(self) -> None:
        for watcher in self.watchers:
            watcher.stop()
        for name in self.stages:
            self.cluster.kubectl("delete", "stage.kwok.x-k8s.io", name, "--ignore-not-found")


SOURCE_URI = "internal.serving.kserve.io/storage-initializer-sourceuri"
_FAILING_STATUS = """\
{{ $now := Now }}
conditions:
- {type: PodScheduled, status: "True", lastTransitionTime: {{ $now | Quote }}}
- {type: Initialized, status: "False", reason: ContainersNotInitialized,
   lastTransitionTime: {{ $now | Quote }}}
- {type: ContainersReady, status: "False", reason: ContainersNotReady,
   lastTransitionTime: {{ $now | Quote }}}
- {type: Ready, status: "False", reason: ContainersNotReady,
   lastTransitionTime: {{ $now | Quote }}}
initContainerStatuses:
{{ range .spec.initContainers }}
- image: {{ .image | Quote }}
  name: {{ .name | Quote }}
  ready: false
  restartCount: 3
  lastState: {terminated: {exitCode: 1, reason: Error}}
  state: {waiting: {reason: CrashLoopBackOff}}
{{ end }}
containerStatuses:
{{ range .spec.containers }}
- image: {{ .image | Quote }}
  name: {{ .name | Quote }}
  ready: false
  restartCount: 0
  state: {waiting: {reason: PodInitializing}}
{{ end }}
hostIP: {{ NodeIPWith .spec.nodeName | Quote }}
podIP: POD_IP
phase: Pending
startTime: {{ $now | Quote }}
""".replace("POD_IP", '{{ PodIPWith .spec.nodeName ( or .spec.hostNetwork false ) '
            '( or .metadata.uid "" ) ( or .metadata.name "" ) ( or .metadata.namespace "" ) '
            "| Quote }}")  # as KWOK's pod-ready writes it


def storage_failure_stage(name: str, uri: str) -> dict[str, Any]:
    """A KWOK Stage for pods whose storage initializer fetches ``uri`` (selected as KWOK's
    ``pod-ready`` selects: not deleted, no pod IP yet)."""
    return {
        "apiVersion": "kwok.x-k8s.io/v1alpha1", "kind": "Stage", "metadata": {"name": name},
        "spec": {
            "resourceRef": {"apiGroup": "v1", "kind": "Pod"}, "weight": 1,
            "selector": {"matchExpressions": [
                {"key": ".metadata.deletionTimestamp", "operator": "DoesNotExist"},
                {"key": ".status.podIP", "operator": "DoesNotExist"},
                {"key": f'.metadata.annotations["{SOURCE_URI}"]', "operator": "In",
                 "values": [uri]}]},
            "next": {"statusTemplate": _FAILING_STATUS},
        },
    }


class Watcher:
    """A background sampler: what a watch would have seen, at a fine enough interval."""

    def __init__(self, sample: Callable[[], Any], interval_s: float) -> None:
        self._sample = sample
        self._interval_s = interval_s
        self._stop = threading.Event()
        self.seen: list[tuple[float, Any]] = []
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def start(self) -> Watcher:
        self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.seen.append((time.monotonic(), self._sample()))
            except Exception as exc:  # a read that failed is a gap, not an end
                self.seen.append((time.monotonic(), exc))
            self._stop.wait(self._interval_s)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


def make_real_world(cluster: Cluster, tmp: Path, versions: int = 3,
                    namespace: str | None = None) -> RealWorld:
    """A world in ``namespace`` (made by ``Cluster.new_namespace``), or in a new one."""
    namespace = namespace or cluster.new_namespace()
    return RealWorld(cluster=cluster, namespace=namespace,
                     registry=push_versions(tmp, versions),
                     kube=cluster.rollout_client(namespace, tmp),
                     admin=cluster.admin(namespace))
