"""Promises: the container runs as non-root on a read-only root filesystem; the rollout's
RBAC Role is least privilege (against the code's calls, and against the calls it makes
at run time); only safetensors weights load; body and text sizes have documented
limits. (No secret in logs, help, arguments or errors: test_secrets.py.)
"""

from __future__ import annotations

import os
import pickle
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import fields
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest
import yaml

from deploycheck._canary import canary_predictor
from deploycheck._rbac import check_role
from deploycheck._rules import deployment_mode, knative_pod_fields
from predictor._config import ServerConfig
from predictor._head import MAX_HEAD_BYTES
from registry import Registry
from tests.support import ManagedProcess, free_port, wait_http_ok
from tests.support.rollout_world import ISVC, MODEL, NAMESPACE, make_world
from tests.system.reliability._support import (
    ROOT,
    Predictor,
    add,
    http_request,
    raw_exchange,
    record,
)

MANIFESTS = ROOT / "manifests"
KUSTOMIZE = ROOT / "kustomize" / "overlays"


def load_all(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


# -- non-root, read-only root filesystem --------------------------------------------------
def _effective(pod: dict[str, Any], container: dict[str, Any]) -> dict[str, Any]:
    return {**(pod.get("securityContext") or {}), **(container.get("securityContext") or {})}


def _check_container(where: str, context: dict[str, Any], volumes: list[dict[str, Any]],
                     mounts: list[dict[str, Any]]) -> None:
    assert context.get("runAsNonRoot") is True, where
    assert context.get("runAsUser", 1) != 0, where
    assert context.get("readOnlyRootFilesystem") is True, where
    assert context.get("allowPrivilegeEscalation") is False, where
    assert context.get("privileged") in (None, False), where
    assert "ALL" in ((context.get("capabilities") or {}).get("drop") or []), where
    assert not ((context.get("capabilities") or {}).get("add")), where
    by_name = {v["name"]: v for v in volumes}
    for mount in mounts:  # the only writable places are scratch volumes
        volume = by_name[mount["name"]]
        assert "hostPath" not in volume, (where, volume)
        assert "emptyDir" in volume or mount.get("readOnly") is True, (where, mount)


def rendered_overlays() -> dict[str, list[dict[str, Any]]]:
    from deploycheck import _kustomize, find_kubectl

    kubectl = find_kubectl()
    return {p.name: [d for d in yaml.safe_load_all(_kustomize.build(p, kubectl)) if d]
            for p in sorted(KUSTOMIZE.iterdir()) if (p / "kustomization.yaml").is_file()}


def test_every_container_runs_as_non_root_on_a_read_only_root() -> None:
    runtime = load_all(MANIFESTS / "10-serving-runtime.yaml")[0]["spec"]
    [container] = runtime["containers"]
    _check_container("ClusterServingRuntime", _effective({}, container), runtime["volumes"],
                     container["volumeMounts"])
    job = load_all(MANIFESTS / "templates" / "rollout-job.yaml")[0]["spec"]["template"]["spec"]
    for c in job["containers"]:
        _check_container("rollout Job", _effective(job, c), job["volumes"], c["volumeMounts"])
    checked = 2
    for overlay, docs in rendered_overlays().items():
        for doc in docs:
            if doc.get("kind") != "InferenceService":
                continue
            stable = doc["spec"]["predictor"]
            # A canary runs as KServe builds it: its entry merged over the stable.
            components = [stable] + [canary_predictor(stable, c)
                                     for c in doc["spec"].get("canary", [])]
            for component in components:
                pod = component.get("securityContext") or {}
                if deployment_mode(doc) == "Standard":
                    assert pod.get("runAsNonRoot") is True and pod.get("runAsUser") != 0, overlay
                else:  # Knative refuses a pod-level one: the container's does it all
                    assert knative_pod_fields(doc) == [], overlay
                assert component.get("automountServiceAccountToken") is False, overlay
                # KServe runs the runtime's container with the model's fields on top: the
                # model may not weaken the runtime's securityContext.
                model = component["model"].get("securityContext") or {}
                merged = {**_effective(component, container), **model}
                _check_container(f"{overlay}: {doc['metadata']['name']}", merged,
                                 runtime["volumes"], container["volumeMounts"])
                checked += 1
    users = [line.split()[1] for line in (ROOT / "Dockerfile").read_text().splitlines()
             if line.startswith("USER ")]
    assert users and users[-1].split(":")[0].isdigit() and int(users[-1].split(":")[0]) != 0
    record("security.pod_specs_checked", checked)


@pytest.fixture(scope="module")
def demo_registry(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from scripts.demo_models import ensure_demo

    root = tmp_path_factory.mktemp("security") / "registry"
    ensure_demo(str(root), "demo-embed")
    return root


def test_the_predictor_serves_as_nobody_on_a_read_only_root(
    demo_registry: Path, tmp_path: Path
) -> None:
    """The pod's constraints, for real: a private mount namespace where / is read-only,
    the model is a read-only mount, /tmp is an empty tmpfs, and the process is uid 65534
    with no way to regain privileges. It loads the real embedding model and answers."""
    if shutil.which("unshare") is None or subprocess.run(
            ["unshare", "--mount", "true"], capture_output=True).returncode != 0:
        pytest.skip("needs root and unshare(1) for a private mount namespace")
    model = tmp_path / "model"
    Registry.open(str(demo_registry)).fetch("demo-embed", "stable", model)
    port = free_port()
    # The empty tmpfs on /tmp would hide a checkout (and its .venv) that lives under /tmp,
    # as a CI clone may: keep it on /srv first and bind it back, read-only, afterwards.
    keep = ""
    restore = ""
    if ROOT.is_relative_to("/tmp"):
        keep = f" && mount --bind {ROOT} /srv"
        restore = (f" && mkdir -p {ROOT} && mount --bind /srv {ROOT}"
                   f" && mount -o remount,bind,ro {ROOT}")
    script = (
        f"mount --bind {model} /mnt && mount -o remount,bind,ro /mnt{keep}"
        " && mount -o remount,bind,ro / && mount -t tmpfs -o size=256m,mode=1777 tmpfs /tmp"
        f"{restore}"
        " && exec setpriv --reuid 65534 --regid 65534 --clear-groups --no-new-privs"
        f" {sys.executable} -m predictor --model_name demo-embed --model_dir /mnt"
        f" --http_host 127.0.0.1 --http_port {port} --enable_grpc false"
    )
    proc = ManagedProcess("read-only", ["unshare", "--mount", "--propagation", "private", "sh",
                                        "-c", script], log_dir=tmp_path, cwd=ROOT)
    try:
        wait_http_ok(f"http://127.0.0.1:{port}/v2/health/ready", timeout_s=120, proc=proc)
        r = httpx.post(f"http://127.0.0.1:{port}/v1/models/demo-embed:predict",
                       json={"instances": ["read-only root"]}, timeout=30)
        assert r.status_code == 200 and len(r.json()["predictions"][0]) == 384
        process = psutil.Process(proc.pid)
        assert process.uids().effective == 65534 and process.gids().effective == 65534
        assert "Read-only file system" not in proc.output_tail(20000)
    finally:
        proc.stop()


# -- RBAC ---------------------------------------------------------------------------------
def rollout_role() -> dict[str, Any]:
    docs = load_all(MANIFESTS / "30-rollout-rbac.yaml")
    return next(d for d in docs if d["kind"] == "Role")


_API_PATH = re.compile(r"^/(?:api/v1|apis/(?P<group>[^/]+)/[^/]+)/namespaces/[^/]+/"
                       r"(?P<resource>[^/]+)(?P<name>/[^/]+)?(?P<sub>/[^/]+)?$")
_VERBS = {"GET": "get", "POST": "create", "PATCH": "patch", "PUT": "update",
          "DELETE": "delete"}


def permission(method: str, path: str) -> tuple[str, str, str]:
    """The RBAC (group, resource, verb) an API request needs."""
    match = _API_PATH.match(path)
    assert match, f"not a namespaced resource request: {method} {path}"
    resource = match["resource"] + (match["sub"] or "")
    verb = "list" if method == "GET" and not match["name"] else _VERBS[method]
    return match["group"] or "", resource, verb


def test_the_rollout_role_is_least_privilege(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    role = rollout_role()
    assert role["kind"] == "Role"  # namespaced, never cluster-wide
    # Statically: the checker derives every verb from the calls in rollout/.
    assert [f.message for f in check_role(role, ROOT / "rollout")] == []
    granted = {(g, r, v) for rule in role["rules"] for g in rule["apiGroups"]
               for r in rule["resources"] for v in rule["verbs"]}
    assert not any(r in ("secrets", "pods/exec", "*") for _, r, _ in granted)
    # The state ConfigMap is read, created and replaced by name: never listed, watched or
    # deleted (it goes with its InferenceService, which owns it).
    assert {v for _, r, v in granted if r == "configmaps"} == {"get", "create", "update"}
    # Dynamically: what the real CLI sends through a whole rollout, start to rollback.
    world = make_world(tmp_path, time.time, mode="Knative", versions=3)
    kubeconfig = world.api.write_kubeconfig(tmp_path / "kubeconfig", namespace=NAMESPACE)
    from cli._app import main

    def modelctl(*args: str) -> None:
        registry = ["--registry", str(world.registry.url)] if args[0] in (
            "start", "promote", "rollback", "run") else []
        monkeypatch.setattr(sys, "argv", ["modelctl", "rollout", *args, "--kubeconfig",
                                          str(kubeconfig), *registry])
        with pytest.raises(SystemExit) as exited:
            main()
        assert exited.value.code in (0, None), capsys.readouterr().err

    used: set[tuple[str, str, str]] = set()
    try:
        steps: list[tuple[str, ...]] = [
            ("start", ISVC, "--to", f"{MODEL}@2", "--steps", "10,50"), ("status", ISVC),
            ("pause", ISVC), ("resume", ISVC), ("promote", ISVC),
            ("promote", ISVC, "--full", "--timeout", "20s"),
            ("history", ISVC), ("history", ISVC, "--events"),
            ("start", ISVC, "--to", f"{MODEL}@3"), ("rollback", ISVC, "--timeout", "20s")]
        for args in steps:
            world.sim.reconcile()
            if "--timeout" in args:
                world.sim.start(interval_s=0.02)  # promotion and rollback wait for KServe
            before = len(world.api.log)
            modelctl(*args)
            # The KServe stand-in's own requests (and the cluster's under it) are not the
            # rollout's.
            used |= {permission(r.method, r.path) for r in world.api.log[before:]
                     if not r.by_controller}
    finally:
        world.sim.stop()
        world.api.stop()
    assert used <= granted, used - granted
    record("security.rbac_granted", sorted("/".join(p) for p in granted))
    record("security.rbac_used_at_run_time", sorted("/".join(p) for p in used))


# -- only safetensors ---------------------------------------------------------------------
class _Payload:
    """Unpickling this runs a command: the reason pickle weights are never loaded."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (os.system, (f"touch {self.marker}",))


def weights_dir(base: Path, marker: Path, files: dict[str, str]) -> Path:
    from scripts.demo_models import _minilm_dir

    base.mkdir(parents=True)
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json", "vocab.txt"):
        shutil.copy2(_minilm_dir() / name, base / name)
    for rel, kind in files.items():
        path = base / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if kind == "pickle":
            path.write_bytes(pickle.dumps(_Payload(marker)))
        else:
            shutil.copy2(_minilm_dir() / "model.safetensors", path)
    return base


PICKLE_CASES = {
    "only-pickle": {"pytorch_model.bin": "pickle"},
    "pickle-beside-safetensors": {"model.safetensors": "safetensors",
                                  "pytorch_model.bin": "pickle"},
    "pickle-in-a-subfolder": {"model.safetensors": "safetensors", "extra/optimizer.pt": "pickle"},
    "pickle-named-safetensors": {"model.safetensors": "pickle"},
}


def test_only_safetensors_load_and_pickles_are_never_run(tmp_path: Path) -> None:
    """Every case through the handler; the first through the real predictor process too."""
    from predictor import BadInput
    from predictor.handlers._factory import create_handler

    for number, (case, files) in enumerate(PICKLE_CASES.items()):
        marker = tmp_path / f"pickle-ran-{case}"
        src = weights_dir(tmp_path / case, marker, files)
        reg = Registry.open(str(tmp_path / "registry"))
        reg.push(src, "pickled", "feature-extraction", alias="stable")
        model_dir = tmp_path / f"model-{case}"
        reg.fetch("pickled", "stable", model_dir)
        pickles = [rel for rel, kind in files.items() if kind == "pickle"
                   and rel.endswith((".bin", ".pt"))]
        if number == 0:
            done = subprocess.run(
                [sys.executable, "-m", "predictor", "--model_name", "pickled", "--model_dir",
                 str(model_dir), "--http_host", "127.0.0.1", "--http_port", str(free_port()),
                 "--enable_grpc", "false"], capture_output=True, text=True, timeout=120,
                cwd=ROOT)
            assert done.returncode == 2, done.stderr[-3000:]
            lines = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
            assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr[-3000:]
            message = lines[0]
        else:
            handler = create_handler("feature-extraction", model_dir, device="cpu")
            with pytest.raises(BadInput) as refused:
                handler.load()
            message = str(refused.value)
            assert "\n" not in message
        if pickles:
            assert "refusing to load pickle-based weight files (only safetensors are " \
                "allowed)" in message and all(p in message for p in pickles), message
        else:  # pickle bytes in a .safetensors file: safetensors reads a header, never code
            assert message.startswith("cannot load the model in"), message
        assert not marker.exists(), f"{case}: a pickle was unpickled"
        add("security.pickle_artifacts_refused")


# -- documented size limits ---------------------------------------------------------------
def test_size_limits_are_documented_and_enforced_at_their_defaults(
    launch: Callable[..., Predictor]
) -> None:
    readme = (ROOT / "README.md").read_text()
    defaults = {f.name: f.default for f in fields(ServerConfig)}
    documented = {"max_body_bytes": "8 MiB", "max_input_chars": "20000", "max_instances": "256"}
    for flag, shown in documented.items():
        row = next(line for line in readme.splitlines() if line.startswith(f"| `--{flag}`"))
        assert shown in row, row
    assert defaults["max_body_bytes"] == 8 * 2**20 and defaults["max_input_chars"] == 20000
    assert defaults["max_instances"] == 256
    reliability = (ROOT / "docs" / "RELIABILITY.md").read_text()
    assert f"| request head (request line + headers) | {MAX_HEAD_BYTES // 1024} KiB |" in (
        reliability)

    server = launch("limits", options={"latency_ms": 1, "max_batch_size": 100})
    url = server.url + server.v1_path
    over_body = b'{"instances": ["' + b"a" * (8 * 2**20) + b'"]}'
    cases = [(over_body, 413), (f'{{"instances": ["{"b" * 20001}"]}}'.encode(), 400),
             (('{"instances": [' + ",".join(["1"] * 257) + "]}").encode(), 400)]
    with httpx.Client(timeout=30) as client:
        for body, status in cases:
            r = client.post(url, content=body, headers={"content-type": "application/json"})
            assert r.status_code == status, r.text[:200]
        at_limit = client.post(url, json={"instances": ["c" * 20000] + [1] * 255})
        assert at_limit.status_code == 200
    head = http_request("POST", server.v1_path, b"{}", headers=(
        f"X-Padding: {'p' * MAX_HEAD_BYTES}",))
    assert raw_exchange(server.port, [head]).status == 431
    record("security.limits", {"max_body_bytes": defaults["max_body_bytes"],
                               "max_input_chars": defaults["max_input_chars"],
                               "max_instances": defaults["max_instances"],
                               "max_head_bytes": MAX_HEAD_BYTES})
