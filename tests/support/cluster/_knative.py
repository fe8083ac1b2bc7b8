"""Knative Serving's real controller, webhook and autoscaler on the test control plane
(knative.dev/serving v0.48.1, the version KServe v0.20.0's go.mod pins), so a Knative-mode
InferenceService makes a Knative Service, Configurations, Revisions, PodAutoscalers and
Deployments for real.

Installed as Serving's own ``config/core`` does: its CRDs (with knative.dev/networking's
and knative.dev/caching's), its ConfigMaps (``config/core/configmaps``, and
``config-network`` from knative.dev/networking) and its webhook configurations
(``config/core/webhooks``), each component with the environment its Deployment gives it
(``config/core/deployments/*.yaml``: ``SYSTEM_NAMESPACE``, ``POD_NAME``,
``CONFIG_LOGGING_NAME``, ``CONFIG_OBSERVABILITY_NAME``; ``WEBHOOK_PORT``, ``POD_IP``).

Where this differs from a cluster, and why:

- The controller and the autoscaler each run in a network namespace of their own
  (``_netns``): both bind a fixed ``:8080``.
- The webhook runs on the host, on a free port of every interface (knative.dev/pkg
  ``webhook/webhook.go`` listens on ``:<port>``). Its configurations may name only a
  Service (knative.dev/pkg ``webhook/resourcesemantics/*/reconcile*.go`` fail without
  ``clientConfig.service``), which the API server resolves through the Service's
  EndpointSlices (``--enable-aggregator-routing``; k8s.io/apiserver
  ``pkg/util/proxy/proxy.go``, ``ResolveEndpoint``). An EndpointSlice may not hold a
  loopback address (``ValidateEndpointIP``), so the selector-less Service ``webhook``
  has one EndpointSlice to this host's own address (``host_address``).
- The activator (data plane) is not run; ``activator-service`` has no endpoints, which
  the ServerlessService reconciler handles by serving from the revision's pods
  ("Forcing SKS into Serve mode, no activator endpoints", knative.dev/serving
  ``pkg/reconciler/serverlessservice/serverlessservice.go``), and
  ``target-burst-capacity: "0"`` keeps the autoscaler from asking for it while scaled up.
- No registry is reachable, so tag-to-digest resolution (``pkg/reconciler/revision/
  resolve.go``) skips the registries of the images our pods name.
- The autoscaler scrapes no pod (KWOK pods serve nothing): with no metrics it holds each
  revision at its ``min-scale`` (KServe sets it from ``minReplicas``).
"""

from __future__ import annotations

import ipaddress
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from tests.support.cluster import _netns as netns
from tests.support.cluster._binaries import Binaries
from tests.support.cluster._controlplane import ControlPlane
from tests.support.procs import ManagedProcess, free_port, wait_for

NAMESPACE = "knative-serving"
SKIP_TAG_RESOLVING = "kind.local,ko.local,dev.local,ghcr.io,index.docker.io,docker.io"
# What differs from the shipped values here (the docstring says why, line by line).
CONFIG = {
    "config-deployment": {"registries-skipping-tag-resolving": SKIP_TAG_RESOLVING},
    "config-autoscaler": {"target-burst-capacity": "0"},
}


def host_address() -> str:
    """This host's first global IPv4 address: an EndpointSlice refuses loopback."""
    out = subprocess.run(["ip", "-4", "-o", "addr", "show", "scope", "global"],
                         capture_output=True, text=True, check=False).stdout
    for line in out.splitlines():
        address = ipaddress.ip_interface(line.split()[3]).ip
        if not (address.is_loopback or address.is_link_local):
            return str(address)
    raise RuntimeError("Knative's webhook needs an IPv4 address of this host that is not "
                       "loopback (an EndpointSlice refuses 127.0.0.0/8); `ip -4 addr` shows none")


def shipped_configmaps(binaries: Binaries) -> list[dict[str, Any]]:
    """Knative Serving's ConfigMaps as shipped, with ``CONFIG`` applied."""
    docs = []
    for path in binaries.knative_config("configmaps"):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc and doc.get("kind") == "ConfigMap":
                doc["metadata"]["namespace"] = NAMESPACE
                doc["data"] = {**(doc.get("data") or {}),
                               **CONFIG.get(doc["metadata"]["name"], {})}
                docs.append(doc)
    return docs


class KnativeServing:
    """Knative Serving's config applied, and its controller, webhook and autoscaler
    running; ``install`` returns once its webhook configurations carry their CA."""

    def __init__(self, plane: ControlPlane, binaries: Binaries) -> None:
        self.plane = plane
        self.binaries = binaries
        self.workdir = plane.workdir / "knative"
        self.workdir.mkdir(exist_ok=True)

    def install(self) -> KnativeServing:
        plane = self.plane
        plane.apply([{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}])
        plane.apply(shipped_configmaps(self.binaries))
        self._apply_services()
        self._start("webhook", netns=False, env={
            "WEBHOOK_NAME": "webhook", "WEBHOOK_PORT": str(self.webhook_port)})
        docs = [d for p in self.binaries.knative_config("webhooks")
                for d in yaml.safe_load_all(p.read_text()) if d]
        plane.apply(docs)
        wait_for(self._webhooks_have_ca, timeout_s=60.0, interval_s=0.2,
                 what="Knative's webhook configurations with its CA")
        missing = netns.available()
        if missing is not None:
            raise RuntimeError("Knative's controller and autoscaler each need a network "
                               "namespace of their own (both bind a fixed :8080): run as "
                               f"root or allow unprivileged user namespaces ({missing})")
        self._start("controller", netns=True)
        self._start("autoscaler", netns=True, env={"POD_IP": host_address()})
        return self

    def _apply_services(self) -> None:
        """``webhook`` to this host's address; ``activator-service`` with no endpoints."""
        self.webhook_port = free_port()
        port = {"name": "https-webhook", "port": 443, "targetPort": self.webhook_port}
        self.plane.apply([
            {"apiVersion": "v1", "kind": "Service",
             "metadata": {"name": "webhook", "namespace": NAMESPACE},
             "spec": {"ports": [port]}},
            {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
             "metadata": {"name": "webhook-host", "namespace": NAMESPACE, "labels": {
                 "kubernetes.io/service-name": "webhook",
                 "endpointslice.kubernetes.io/managed-by": "modelctl-tests"}},
             "addressType": "IPv4",
             "endpoints": [{"addresses": [host_address()], "conditions": {"ready": True}}],
             "ports": [{"name": "https-webhook", "port": self.webhook_port,
                        "protocol": "TCP"}]},
            {"apiVersion": "v1", "kind": "Service",
             "metadata": {"name": "activator-service", "namespace": NAMESPACE},
             "spec": {"ports": [{"name": "http", "port": 80, "targetPort": 8012}]}},
            {"apiVersion": "v1", "kind": "Endpoints",
             "metadata": {"name": "activator-service", "namespace": NAMESPACE}},
        ])

    def _webhooks_have_ca(self) -> bool:
        for kind in ("mutatingwebhookconfiguration", "validatingwebhookconfiguration"):
            out = self.plane.kubectl("get", kind, "-o", "json", check=False)
            if out.returncode != 0:
                return False
            for item in yaml.safe_load(out.stdout)["items"]:
                if item["metadata"]["name"].endswith("serving.knative.dev") and not all(
                        h["clientConfig"].get("caBundle") for h in item.get("webhooks") or []):
                    return False
        return True

    def _start(self, component: str, *, netns: bool, env: dict[str, str] | None = None,
               ) -> ManagedProcess:
        binary = str(self.binaries.path(f"knative-{component}"))
        argv = [binary]
        if netns:
            argv = self._netns_argv(component, int(self.plane.server.rsplit(":", 1)[1])) + argv
        proc = ManagedProcess(f"knative-{component}", argv, log_dir=self.plane.logs, env={
            "KUBECONFIG": str(self.plane.admin_kubeconfig), "SYSTEM_NAMESPACE": NAMESPACE,
            "POD_NAME": f"{component}-0", "CONFIG_LOGGING_NAME": "config-logging",
            "CONFIG_OBSERVABILITY_NAME": "config-observability",
            "PROFILING_PORT": str(free_port()), "KUBE_API_QPS": "200", "KUBE_API_BURST": "400",
            **(env or {})})
        self.plane.procs.append(proc)
        return proc

    def _netns_argv(self, component: str, port: int) -> list[str]:
        """The relay (``_netns.py``, stdlib only) in front of the command; inside, the
        API server's own address, so the admin kubeconfig serves as it is."""
        return [sys.executable, str(Path(__file__).with_name("_netns.py")),
                "--port", str(port), "--server", f"127.0.0.1:{port}",
                "--socket", str(self.workdir / f"{component}.sock"), "--"]
