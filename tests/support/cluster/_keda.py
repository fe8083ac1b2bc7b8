"""KEDA's real operator on the test control plane: ScaledObjects validated by its CRD,
turned into HPAs (``keda-hpa-<name>``), and scaled to and from zero on what its
scalers read (a redis-streams trigger reads a real local redis-server).

Flags and environment as KEDA's own Deployment sets them (kedacore/keda v2.18.0,
``cmd/operator/main.go``; ``pkg/util/env_resolver.go`` ``GetClusterObjectNamespace``,
``GetPodNamespace``), with every listener on 127.0.0.1. Its gRPC metrics service serves
the certificate in ``--cert-dir`` (``ca.crt``, ``tls.crt``, ``tls.key``;
``pkg/metricsservice/utils`` ``LoadGrpcTLSCredentials``), issued by the cluster's CA.
KEDA's metrics adapter (what an HPA asks for the external metric) is not run: the
operator's own polling does the scaling to and from zero that these tests check.
"""

from __future__ import annotations

from tests.support.cluster._binaries import Binaries
from tests.support.cluster._controlplane import ControlPlane
from tests.support.procs import ManagedProcess, free_port, wait_http_ok

NAMESPACE = "keda"


def start_keda(plane: ControlPlane, binaries: Binaries) -> ManagedProcess:
    certs = plane.workdir / "keda-certs"
    certs.mkdir(exist_ok=True)
    pair = plane.pki.issue("keda-operator", common="keda-operator", client=True,
                           server_names=("127.0.0.1", "keda-operator.keda.svc"))
    (certs / "tls.crt").write_bytes(pair.cert.read_bytes())
    (certs / "tls.key").write_bytes(pair.key.read_bytes())
    (certs / "ca.crt").write_bytes(plane.pki.ca_pem)
    plane.apply([{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}])
    probe = free_port()
    proc = ManagedProcess("keda-operator", [
        str(binaries.path("keda-operator")),
        "--metrics-bind-address", f"127.0.0.1:{free_port()}",
        "--health-probe-bind-address", f"127.0.0.1:{probe}",
        "--metrics-service-bind-address", f"127.0.0.1:{free_port()}",
        "--cert-dir", str(certs), "--leader-elect=false",
        "--enable-webhook-patching=false", "--zap-log-level=info",
    ], log_dir=plane.logs, env={
        "KUBECONFIG": str(plane.admin_kubeconfig), "POD_NAMESPACE": NAMESPACE,
        "WATCH_NAMESPACE": "", "KEDA_CLUSTER_OBJECT_NAMESPACE": NAMESPACE})
    plane.procs.append(proc)
    wait_http_ok(f"http://127.0.0.1:{probe}/readyz", timeout_s=60.0, proc=proc)
    return proc
