"""A real Kubernetes control plane on 127.0.0.1: etcd, kube-apiserver,
kube-controller-manager, kube-scheduler and KWOK, from ``devcluster/build.sh``.

Flags follow what KWOK's own binary runtime passes (sigs.k8s.io/kwok v0.7.0,
``pkg/kwokctl/components/kube_apiserver.go``, ``kube_controller_manager.go``,
``kube_scheduler.go``, ``kwok_controller.go``), with RBAC authorization, service-account
tokens and admission webhooks on, and ``--enable-aggregator-routing`` since no
kube-proxy runs. KWOK plays the kubelet: Nodes annotated ``kwok.x-k8s.io/node: fake``
are kept Ready, and Pods scheduled to them go Running and Ready by its default Stages
(``kustomize/stage/node/fast``, ``kustomize/stage/pod/fast``), with no container
runtime. Every process is started here and stopped by its PID.
"""

from __future__ import annotations

import contextlib
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tests.support.cluster._binaries import Binaries
from tests.support.cluster._pki import PKI, KeyPair
from tests.support.procs import ManagedProcess, free_port, wait_for, wait_http_ok

SERVICE_CIDR = "10.96.0.0/16"
NODE_ANNOTATION = "kwok.x-k8s.io/node"
START_TIMEOUT_S = 60.0


def write_kubeconfig(path: Path, server: str, ca: Path, *, user: str,
                     pair: KeyPair | None = None, token: str | None = None) -> Path:
    """A kubeconfig with one cluster, one user (a client certificate or a token)."""
    creds: dict[str, Any] = {}
    if pair is not None:
        creds = {"client-certificate": str(pair.cert), "client-key": str(pair.key)}
    if token is not None:
        creds = {"token": token}
    doc = {
        "apiVersion": "v1", "kind": "Config", "current-context": "modelctl-test",
        "clusters": [{"name": "modelctl-test",
                      "cluster": {"server": server, "certificate-authority": str(ca)}}],
        "users": [{"name": user, "user": creds}],
        "contexts": [{"name": "modelctl-test",
                      "context": {"cluster": "modelctl-test", "user": user}}],
    }
    path.write_text(yaml.safe_dump(doc))
    path.chmod(0o600)
    return path


@dataclass
class ControlPlane:
    """The processes of one control plane, and how to reach it as cluster-admin."""

    workdir: Path
    binaries: Binaries
    pki: PKI = field(init=False)
    server: str = field(init=False, default="")
    admin_kubeconfig: Path = field(init=False)
    procs: list[ManagedProcess] = field(default_factory=list)
    started_in_s: float = field(init=False, default=0.0)

    def __post_init__(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.logs = self.workdir / "logs"
        self.logs.mkdir(exist_ok=True)
        self.pki = PKI(self.workdir / "pki")
        self.admin_kubeconfig = self.workdir / "admin.kubeconfig"

    # -- start ------------------------------------------------------------------------
    def start(self) -> ControlPlane:
        started = time.monotonic()
        try:
            self._start_etcd()
            self._start_apiserver()
            self._start_controllers()
            self.wait_for_namespace("default", START_TIMEOUT_S)
            self.add_node("kwok-node-0")
            self.add_node("kwok-gpu-node-0", gpus=8)
        except BaseException:
            self.stop()
            raise
        self.started_in_s = time.monotonic() - started
        return self

    def _spawn(self, name: str, argv: list[str], env: dict[str, str] | None = None,
               ) -> ManagedProcess:
        proc = ManagedProcess(name, argv, log_dir=self.logs, env=env)
        self.procs.append(proc)
        return proc

    def _start_etcd(self) -> None:
        client, peer = free_port(), free_port()
        self.etcd_url = f"http://127.0.0.1:{client}"
        proc = self._spawn("etcd", [
            str(self.binaries.path("etcd")), "--data-dir", str(self.workdir / "etcd"),
            "--name", "node0", "--listen-client-urls", self.etcd_url,
            "--advertise-client-urls", self.etcd_url,
            "--listen-peer-urls", f"http://127.0.0.1:{peer}",
            "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
            "--initial-cluster", f"node0=http://127.0.0.1:{peer}",
            "--listen-metrics-urls", f"http://127.0.0.1:{free_port()}",
            "--unsafe-no-fsync", "--quota-backend-bytes", str(2 * 1024**3),
            "--log-level", "warn"])
        self._wait_healthy(proc, f"{self.etcd_url}/health", tls=False)

    def _start_apiserver(self) -> None:
        port = free_port()
        self.server = f"https://127.0.0.1:{port}"
        serving = self.pki.issue("apiserver", common="kube-apiserver", server_names=(
            "127.0.0.1", "localhost", "kubernetes", "kubernetes.default",
            "kubernetes.default.svc", "kubernetes.default.svc.cluster.local", "10.96.0.1"))
        self.admin = self.pki.issue("admin", common="kubernetes-admin", org="system:masters",
                                    client=True)
        proxy = self.pki.issue("front-proxy-client", common="front-proxy-client",
                               client=True)
        self.sa_key = self.pki.signing_key("sa")
        write_kubeconfig(self.admin_kubeconfig, self.server, self.pki.ca.cert,
                         user="kubernetes-admin", pair=self.admin)
        proc = self._spawn("kube-apiserver", [
            str(self.binaries.path("kube-apiserver")),
            "--etcd-servers", self.etcd_url, "--bind-address", "127.0.0.1",
            "--advertise-address", "127.0.0.1", "--secure-port", str(port),
            "--cert-dir", str(self.workdir / "apiserver-certs"),
            "--tls-cert-file", str(serving.cert), "--tls-private-key-file", str(serving.key),
            "--client-ca-file", str(self.pki.ca.cert),
            "--service-account-key-file", str(self.sa_key.cert),
            "--service-account-signing-key-file", str(self.sa_key.key),
            "--service-account-issuer", "https://kubernetes.default.svc.cluster.local",
            "--authorization-mode", "Node,RBAC",
            "--enable-admission-plugins", "NodeRestriction,ExtendedResourceToleration",
            "--service-cluster-ip-range", SERVICE_CIDR,
            "--enable-aggregator-routing=true", "--allow-privileged=true",
            "--requestheader-client-ca-file", str(self.pki.ca.cert),
            "--requestheader-allowed-names", "front-proxy-client",
            "--requestheader-username-headers", "X-Remote-User",
            "--requestheader-group-headers", "X-Remote-Group",
            "--requestheader-extra-headers-prefix", "X-Remote-Extra-",
            "--proxy-client-cert-file", str(proxy.cert),
            "--proxy-client-key-file", str(proxy.key),
            "--enable-priority-and-fairness=false", "--profiling=false",
            "--max-requests-inflight=0", "--max-mutating-requests-inflight=0",
            "--endpoint-reconciler-type", "none", "--v=1"])
        self._wait_healthy(proc, f"{self.server}/readyz", tls=True)

    def _start_controllers(self) -> None:
        kcm_port, scheduler_port = free_port(), free_port()
        kcm = self._spawn("kube-controller-manager", [
            *self._component_args("kube-controller-manager", kcm_port),
            "--root-ca-file", str(self.pki.ca.cert),
            "--service-account-private-key-file", str(self.sa_key.key),
            "--use-service-account-credentials=false",
            "--controllers", "*,-nodeipam,-service-lb-controller,-cloud-node-lifecycle",
            "--horizontal-pod-autoscaler-sync-period", "5s"])
        scheduler = self._spawn("kube-scheduler", self._component_args("kube-scheduler",
                                                                      scheduler_port))
        self._apply_stages()
        kwok_serving = self.pki.issue("kwok", common="kwok", server_names=("127.0.0.1",))
        kwok = self._spawn("kwok", [
            str(self.binaries.path("kwok")), "--kubeconfig", str(self.admin_kubeconfig),
            "--manage-all-nodes=false",
            f"--manage-nodes-with-annotation-selector={NODE_ANNOTATION}=fake",
            "--node-ip", "127.0.0.1", "--node-name", "kwok-controller",
            "--server-address", f"127.0.0.1:{free_port()}",
            "--tls-cert-file", str(kwok_serving.cert),
            "--tls-private-key-file", str(kwok_serving.key),
            "--node-lease-duration-seconds", "40", "--enable-crds=Stage"])
        # Their /healthz is open to anyone (--authorization-always-allow-paths' default),
        # served with a certificate each made for itself; KWOK's liveness shows in the
        # node it keeps Ready (add_node).
        for proc, port in ((kcm, kcm_port), (scheduler, scheduler_port)):
            self._wait_healthy(proc, f"https://127.0.0.1:{port}/healthz", tls=False)
        if kwok.poll() is not None:
            raise RuntimeError(f"kwok exited with {kwok.poll()}:\n{kwok.output_tail()}")

    def _apply_stages(self) -> None:
        """KWOK's own default Stages as objects, so a test can add one (``add_stage``)."""
        crd, stages = self.binaries.kwok_stages()
        self.kubectl("apply", "--server-side", "-f", str(crd))
        self.kubectl("wait", "--for=condition=Established", "--timeout=60s",
                     "crd/stages.kwok.x-k8s.io")
        for path in stages:
            self.kubectl("apply", "--server-side", "-f", str(path))

    def _component_args(self, name: str, port: int) -> list[str]:
        """What kube-controller-manager and kube-scheduler share: the admin kubeconfig for
        the API and for checking their own callers, their port on 127.0.0.1, no leader
        election, no client-side throttling."""
        kubeconfig = str(self.admin_kubeconfig)
        return [str(self.binaries.path(name)), "--kubeconfig", kubeconfig,
                "--authentication-kubeconfig", kubeconfig,
                "--authorization-kubeconfig", kubeconfig,
                "--bind-address", "127.0.0.1", "--secure-port", str(port),
                "--leader-elect=false", "--kube-api-qps", "1000", "--kube-api-burst", "1000",
                "--v=1"]

    def _wait_healthy(self, proc: ManagedProcess, url: str, *, tls: bool) -> None:
        """``tls``: our own server (our CA, the admin's client certificate); otherwise
        etcd's plain HTTP or a /healthz on a certificate the component made itself."""
        if tls:
            wait_http_ok(url, timeout_s=START_TIMEOUT_S, proc=proc, verify=str(self.pki.ca.cert),
                         cert=(str(self.admin.cert), str(self.admin.key)))
        else:
            wait_http_ok(url, timeout_s=START_TIMEOUT_S, proc=proc, verify=False)

    # -- use --------------------------------------------------------------------------
    def kubectl(self, *args: str, kubeconfig: Path | None = None, input: str | None = None,
                check: bool = True, timeout_s: float = 120.0) -> subprocess.CompletedProcess[str]:
        """Run kubectl against this control plane (as cluster-admin unless told)."""
        cmd = [str(self.binaries.kubectl()), "--kubeconfig",
               str(kubeconfig or self.admin_kubeconfig), *args]
        done = subprocess.run(cmd, input=input, capture_output=True, text=True,
                              timeout=timeout_s, check=False)
        if check and done.returncode != 0:
            raise RuntimeError(f"kubectl {' '.join(args)} failed ({done.returncode}):\n"
                               f"{done.stdout}\n{done.stderr}")
        return done

    def apply(self, docs: list[dict[str, Any]] | str, *, server_side: bool = True,
              kubeconfig: Path | None = None) -> str:
        text = docs if isinstance(docs, str) else yaml.safe_dump_all(docs)
        args = ["apply", "-f", "-"]
        if server_side:
            args += ["--server-side", "--force-conflicts", "--field-manager", "modelctl-tests"]
        return self.kubectl(*args, input=text, kubeconfig=kubeconfig).stdout

    def wait_for_namespace(self, name: str, timeout_s: float) -> None:
        wait_for(lambda: self.kubectl("get", "namespace", name, check=False).returncode == 0,
                 timeout_s=timeout_s, interval_s=0.2, what=f"namespace {name}")

    def add_node(self, name: str, *, gpus: int = 0) -> None:
        """A Node KWOK keeps Ready with plenty of room. ``gpus``: it also advertises
        ``nvidia.com/gpu`` as NVIDIA's device plugin does, carries the label NVIDIA's GPU
        feature discovery sets (``nvidia.com/gpu.present``) and the taint GPU node pools
        carry (``nvidia.com/gpu:NoSchedule``), so only pods that ask for one land there."""
        room = {"cpu": "64", "memory": "512Gi", "pods": "250"}
        labels = {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
                  "kubernetes.io/arch": "amd64", "type": "kwok"}
        spec: dict[str, Any] = {}
        if gpus:
            room["nvidia.com/gpu"] = str(gpus)
            labels["nvidia.com/gpu.present"] = "true"
            spec["taints"] = [{"key": "nvidia.com/gpu", "value": "present",
                               "effect": "NoSchedule"}]
        self.apply([{
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "annotations": {NODE_ANNOTATION: "fake"},
                         "labels": labels},
            "spec": spec, "status": {"allocatable": room, "capacity": room},
        }], server_side=False)
        ready = "jsonpath={.status.conditions[?(@.type==\"Ready\")].status}"
        wait_for(lambda: self.kubectl("get", "node", name, "-o", ready,
                                      check=False).stdout == "True",
                 timeout_s=START_TIMEOUT_S, what=f"node {name} Ready")

    def stop(self) -> None:
        for proc in reversed(self.procs):
            with contextlib.suppress(Exception):
                proc.stop(timeout_s=10.0)
        self.procs.clear()
