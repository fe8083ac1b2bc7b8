"""KServe's real manager (controllers and webhooks) on the test control plane.

Installed from the same module the manager was built from (``devcluster/modules.txt``):
its CRDs (``config/crd/full``, applied server-side: the InferenceService CRD is about
2 MB), its webhook configurations (``config/webhook/manifests.yaml``) with each
``clientConfig.service`` rewritten to the manager's loopback URL and our CA, and its
``inferenceservice-config`` (``config/configmap/inferenceservice.yaml``) as shipped but
for the settings a test names. The manager serves its webhooks with the certificate it
finds in controller-runtime's default directory, ``$TMPDIR/k8s-webhook-server/
serving-certs`` (``pkg/webhook/server.go``, ``Options.setDefaults``), so it runs with a
``TMPDIR`` of its own. Its controller-runtime webhook server has no host option and
binds every interface (``Options.Host`` empty) on a free port; its metrics and health
endpoints are told 127.0.0.1.

The networking parts no binary can play here, since there is no Envoy, are one small
stand-in (``_gateway.py``): the HTTPRoute status a Gateway API implementation writes.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import yaml

from tests.support.cluster._binaries import Binaries, binaries
from tests.support.cluster._controlplane import ControlPlane
from tests.support.procs import ManagedProcess, free_port, wait_http_ok

NAMESPACE = "kserve"
CONFIG = "inferenceservice-config"
GATEWAY = ("kserve", "kserve-ingress-gateway")  # the shipped kserveIngressGateway


def shipped_config() -> dict[str, Any]:
    """KServe's ``inferenceservice-config`` ConfigMap as the module ships it."""
    path = binaries().kserve_config("inferenceservice.yaml")
    return next(d for d in yaml.safe_load_all(path.read_text())
                if d and d.get("kind") == "ConfigMap")


def config_with(overrides: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The shipped ConfigMap with ``{section: {key: value}}`` changed in its JSON."""
    config = shipped_config()
    data = dict(config["data"])
    for section, values in overrides.items():
        data[section] = json.dumps({**json.loads(data[section]), **values}, indent=2)
    return {**config, "data": data}


class KServe:
    """KServe's CRDs, config and webhooks applied, and its manager running."""

    def __init__(self, plane: ControlPlane, binaries: Binaries,
                 config_overrides: dict[str, dict[str, Any]] | None = None) -> None:
        self.plane = plane
        self.binaries = binaries
        self.overrides = config_overrides or {}
        self.workdir = plane.workdir / "kserve"
        self.workdir.mkdir(exist_ok=True)
        self.proc: ManagedProcess | None = None

    def install(self) -> KServe:
        plane = self.plane
        crds = self.binaries.crds
        for folder in ("kserve", "gateway-api", "keda", "knative", "prometheus-operator",
                       "istio"):
            for path in sorted((crds / folder).glob("*.yaml")):
                plane.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(path))
        plane.kubectl("wait", "--for=condition=Established", "--timeout=60s",
                      "crd", "--all")
        plane.apply([{"apiVersion": "v1", "kind": "Namespace",
                      "metadata": {"name": NAMESPACE}}])
        plane.apply([config_with(self.overrides)])
        self._start_manager()
        self._apply_webhooks()
        # The storage containers a KServe install ships (the default one takes s3://,
        # gs://, hf://, https:// ...): config/storagecontainers/default.yaml.
        plane.kubectl("apply", "-f", str(self.binaries.kserve_config("default.yaml")))
        return self

    def set_config(self, overrides: dict[str, dict[str, Any]]) -> None:
        """Rewrite ``inferenceservice-config`` and restart the manager (it reads the
        ingress and deploy sections once, at start: ``cmd/manager/main.go``)."""
        self.overrides = overrides
        self.plane.apply([config_with(overrides)])
        if self.proc is not None:
            self.proc.stop()
            self.plane.procs.remove(self.proc)
        self._start_manager()

    def _start_manager(self) -> None:
        tmp = self.workdir / "tmp"
        certs = tmp / "k8s-webhook-server" / "serving-certs"
        certs.mkdir(parents=True, exist_ok=True)
        pair = self.plane.pki.issue("kserve-webhook", common="kserve-webhook-server",
                                    server_names=("127.0.0.1",))
        (certs / "tls.crt").write_bytes(pair.cert.read_bytes())
        (certs / "tls.key").write_bytes(pair.key.read_bytes())
        self.webhook_port = free_port()
        probe = free_port()
        proc = ManagedProcess("kserve-manager", [
            str(self.binaries.path("kserve-manager")),
            "-metrics-addr", f"127.0.0.1:{free_port()}",
            "-health-probe-addr", f"127.0.0.1:{probe}",
            "-webhook-port", str(self.webhook_port), "-leader-elect=false",
        ], log_dir=self.plane.logs, env={
            "KUBECONFIG": str(self.plane.admin_kubeconfig), "POD_NAMESPACE": NAMESPACE,
            "TMPDIR": str(tmp)})
        self.plane.procs.append(proc)
        self.proc = proc
        wait_http_ok(f"http://127.0.0.1:{probe}/readyz", timeout_s=60.0, proc=proc)

    def _apply_webhooks(self) -> None:
        path = self.binaries.kserve_config("manifests.yaml")
        ca = base64.b64encode(self.plane.pki.ca_pem).decode()
        docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
        for doc in docs:
            doc["metadata"].pop("creationTimestamp", None)
            for hook in doc.get("webhooks") or []:
                service = hook["clientConfig"].pop("service")
                hook["clientConfig"] = {
                    "url": f"https://127.0.0.1:{self.webhook_port}{service['path']}",
                    "caBundle": ca}
        self.plane.apply(docs)
