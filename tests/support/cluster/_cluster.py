"""One test cluster: the control plane, KServe, Knative Serving and KEDA on it, the
networking stand-ins, and how a test gets a namespace of its own with modelctl's
manifests applied.

Source: the Gateway KServe's HTTPRoutes name is ``kserveIngressGateway`` of its shipped
``config/configmap/inferenceservice.yaml`` (github.com/kserve/kserve v0.20.0); the
rollout's token is a TokenRequest, as ``kubectl create token`` makes it
(``staging/src/k8s.io/kubectl/pkg/cmd/create/create_token.go``) and as a Job's
projected service-account token holds one."""

from __future__ import annotations

import copy
import itertools
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from kubernetes import config

from rollout.backends._kserve._kube import KubeClient
from tests.support.cluster._binaries import ROOT, binaries
from tests.support.cluster._controlplane import ControlPlane, write_kubeconfig
from tests.support.cluster._keda import start_keda
from tests.support.cluster._knative import KnativeServing
from tests.support.cluster._kserve import GATEWAY, KServe
from tests.support.cluster._networking import NetworkingStandIn

MANIFESTS = ROOT / "manifests"
# What a Standard-mode canary needs of KServe's shipped config (docs/ROLLOUT.md).
GATEWAY_API = {"ingress": {"enableGatewayApi": True}}
_counter = itertools.count(1)


@dataclass
class Cluster:
    plane: ControlPlane
    kserve: KServe
    knative: KnativeServing
    networking: NetworkingStandIn
    namespaces: list[str] = field(default_factory=list)
    started_in_s: float = 0.0

    def api_client(self) -> Any:
        return config.new_client_from_config(config_file=str(self.plane.admin_kubeconfig))

    def admin(self, namespace: str = "default") -> KubeClient:
        return KubeClient(self.api_client(), namespace=namespace)

    def kubectl(self, *args: str, **kwargs: Any) -> Any:
        return self.plane.kubectl(*args, **kwargs)

    def apply(self, docs: list[dict[str, Any]] | str, **kwargs: Any) -> str:
        return self.plane.apply(docs, **kwargs)

    def new_namespace(self, prefix: str = "t") -> str:
        """A fresh namespace with the rollout's ServiceAccount, Role and RoleBinding
        (manifests/30-rollout-rbac.yaml), the models' ServiceAccount, and the Secrets of
        manifests/templates/ as a user creates them (placeholder values)."""
        name = f"{prefix}-{next(_counter)}"
        self.apply([{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}])
        docs = []
        paths = [MANIFESTS / "20-registry-access.yaml", MANIFESTS / "30-rollout-rbac.yaml",
                 *sorted((MANIFESTS / "templates").glob("*-secret.yaml"))]
        for path in paths:
            for doc in yaml.safe_load_all(path.read_text()):
                if doc:
                    doc = copy.deepcopy(doc)
                    doc["metadata"]["namespace"] = name
                    for subject in doc.get("subjects") or []:
                        subject["namespace"] = name
                    docs.append(doc)
        self.apply(docs)
        self.namespaces.append(name)
        return name

    def rollout_kubeconfig(self, namespace: str, folder: Path) -> Path:
        """A kubeconfig that authenticates as ``modelctl-rollout`` in ``namespace`` with a
        token from the TokenRequest API (what a Job's projected token holds)."""
        token = self.kubectl("create", "token", "modelctl-rollout", "-n", namespace,
                             "--duration", "2h").stdout.strip()
        path = folder / f"rollout-{namespace}.kubeconfig"
        write_kubeconfig(path, self.plane.server, self.plane.pki.ca.cert,
                         user=f"system:serviceaccount:{namespace}:modelctl-rollout",
                         token=token)
        return path

    def rollout_client(self, namespace: str, folder: Path) -> KubeClient:
        path = self.rollout_kubeconfig(namespace, folder)
        return KubeClient(config.new_client_from_config(config_file=str(path)),
                          namespace=namespace)

    def stop(self) -> None:
        self.networking.stop()
        self.plane.stop()


def _apply_platform(cluster: Cluster) -> None:
    """The cluster-wide part of modelctl's manifests (the ClusterServingRuntime), and
    the Gateway KServe's shipped config names for its HTTPRoutes."""
    runtime = yaml.safe_load((MANIFESTS / "10-serving-runtime.yaml").read_text())
    cluster.apply([runtime])
    namespace, name = GATEWAY
    cluster.apply([
        {"apiVersion": "gateway.networking.k8s.io/v1", "kind": "GatewayClass",
         "metadata": {"name": "modelctl-test"},
         "spec": {"controllerName": "modelctl.io/test-gateway"}},
        {"apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
         "metadata": {"name": name, "namespace": namespace},
         "spec": {"gatewayClassName": "modelctl-test",
                  "listeners": [{"name": "http", "port": 80, "protocol": "HTTP",
                                 "allowedRoutes": {"namespaces": {"from": "All"}}}]}},
    ])


def start_cluster(workdir: Path) -> Cluster:
    """Start everything; the caller stops it (``Cluster.stop``)."""
    started = time.monotonic()
    plane = ControlPlane(workdir, binaries()).start()
    try:
        kserve = KServe(plane, binaries(), GATEWAY_API).install()
        knative = KnativeServing(plane, binaries()).install()
        start_keda(plane, binaries())
        api = config.new_client_from_config(config_file=str(plane.admin_kubeconfig))
        networking = NetworkingStandIn(api).start()
    except BaseException:
        plane.stop()
        raise
    cluster = Cluster(plane=plane, kserve=kserve, knative=knative, networking=networking)
    try:
        _apply_platform(cluster)
    except BaseException:
        cluster.stop()
        raise
    cluster.started_in_s = time.monotonic() - started
    return cluster

