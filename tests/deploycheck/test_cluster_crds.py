"""`modelctl deploy validate` against the CRDs a cluster serves: the emulated API server
holds the upstream CRDs (created through the official client), the CLI reads them with
a kubeconfig and no --crds, says so, and catches what the folder would catch; a cluster
without KEDA knows no ScaledObject."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from deploycheck import DeployError, _check, _locate, find_crds
from deploycheck._crds import load_file
from tests.manifests.test_cli import modelctl
from tests.support.kube_api import KubeAPI
from tests.support.manifests import BROKEN

CRDS_RESOURCE = "apiextensions.k8s.io/v1/customresourcedefinitions"
SCALED_OBJECT = """\
apiVersion: keda.sh/v1alpha1
kind: ScaledObject
metadata:
  name: demo
  namespace: modelctl
spec:
  scaleTargetRef:
    name: demo-predictor
  triggers:
    - type: prometheus
      metadata:
        serverAddress: http://prometheus:9090
        query: sum(modelctl_inflight_requests)
        threshold: "64"
"""


def upstream_crds(crds_dir: Path) -> list[dict[str, Any]]:
    return [
        doc
        for path in sorted(crds_dir.rglob("*.yaml"))
        for doc in load_file(path, _locate.cache_dir())
        if isinstance(doc, dict) and doc.get("kind") == "CustomResourceDefinition"
    ]


def cluster_with(crds: list[dict[str, Any]]) -> KubeAPI:
    """An emulated API server serving ``crds``, created the way kubectl apply would."""
    import kmock
    from kubernetes import client

    api = KubeAPI().start()
    emulator = api._emulator
    assert emulator is not None
    if not any(
        str(r) == CRDS_RESOURCE or getattr(r, "plural", "") == "customresourcedefinitions"
        for r in emulator.resources
    ):
        # Not (yet) registered by tests/support/kube_api.py: register it here.
        emulator.resources[CRDS_RESOURCE] = kmock.ResourceInfo(
            namespaced=False, kind="CustomResourceDefinition"
        )
    extensions = client.ApiextensionsV1Api(api.api_client())
    for crd in crds:
        extensions.create_custom_resource_definition(crd, _preload_content=False)
    return api


@pytest.fixture(scope="module")
def full_cluster(crds_dir: Path) -> Iterator[KubeAPI]:
    api = cluster_with(upstream_crds(crds_dir))
    yield api
    api.stop()


@pytest.fixture(scope="module")
def cluster_without_keda(crds_dir: Path) -> Iterator[KubeAPI]:
    crds = [c for c in upstream_crds(crds_dir) if c["spec"]["group"] != "keda.sh"]
    api = cluster_with(crds)
    yield api
    api.stop()


def validate(*args: str, kubeconfig: Path | None = None) -> Any:
    env = {"MODELCTL_CRDS_DIR": ""}
    if kubeconfig is not None:
        env["KUBECONFIG"] = str(kubeconfig)
    return modelctl("deploy", "validate", *args, env=env)


def test_a_typo_is_caught_against_the_clusters_crds(
    full_cluster: KubeAPI, crds_dir: Path, tmp_path: Path
) -> None:
    kubeconfig = full_cluster.write_kubeconfig(tmp_path / "kubeconfig")
    count = len(upstream_crds(crds_dir))
    since = len(full_cluster.log)
    for args, env_kubeconfig in (
        (["--kubeconfig", str(kubeconfig)], None),  # the flag
        ([], kubeconfig),  # $KUBECONFIG alone
    ):
        done = validate(str(BROKEN / "typo-field.yaml"), *args, kubeconfig=env_kubeconfig)
        assert done.returncode == 2, done.stderr
        assert done.stdout == (
            f"{BROKEN / 'typo-field.yaml'}:0:$.spec.predictor.canaryTraficPercent: "
            'unknown field "canaryTraficPercent"\n'
        )
        assert done.stderr.splitlines()[0] == (
            f"CRDs: cluster {full_cluster.host} ({count} definitions)"
        )
    # Read only: one list of CRDs per run, nothing else.
    asked = [(r.method, r.path) for r in full_cluster.log[since:]]
    assert asked == [("GET", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions")] * 2


def test_the_repository_validates_against_the_cluster(
    full_cluster: KubeAPI, tmp_path: Path
) -> None:
    kubeconfig = full_cluster.write_kubeconfig(tmp_path / "kubeconfig")
    done = validate("kustomize", "--kubeconfig", str(kubeconfig), "--json")
    report = json.loads(done.stdout)
    assert report["crds"] == {
        "source": "cluster",
        "location": full_cluster.host,
        "definitions": report["crds"]["definitions"],
    }
    assert report["ok"], report["problems"]


def test_a_cluster_without_keda_knows_no_scaled_object(
    cluster_without_keda: KubeAPI, tmp_path: Path
) -> None:
    kubeconfig = cluster_without_keda.write_kubeconfig(tmp_path / "kubeconfig")
    (tmp_path / "scaledobject.yaml").write_text(SCALED_OBJECT)
    done = validate(str(tmp_path / "scaledobject.yaml"), "--kubeconfig", str(kubeconfig))
    assert done.returncode == 2
    assert done.stdout == (
        f"{tmp_path / 'scaledobject.yaml'}:0:$.kind: no schema for keda.sh/v1alpha1 "
        "ScaledObject: not a built-in kind of Kubernetes 1.33 and no CRD for it in the "
        f"cluster at {cluster_without_keda.host}\n"
    )
    # The folder has KEDA's CRD: the same file is valid offline.
    done = modelctl("deploy", "validate", str(tmp_path / "scaledobject.yaml"))
    assert done.returncode == 0, done.stdout + done.stderr


def test_crds_folder_wins_over_the_cluster(
    full_cluster: KubeAPI, crds_dir: Path, tmp_path: Path
) -> None:
    kubeconfig = full_cluster.write_kubeconfig(tmp_path / "kubeconfig")
    before = len(full_cluster.log)
    done = validate(
        str(BROKEN / "typo-field.yaml"), "--crds", str(crds_dir), "--kubeconfig", str(kubeconfig)
    )
    assert done.returncode == 2
    assert done.stderr.startswith(f"CRDs: folder {crds_dir.resolve()} (")
    assert len(full_cluster.log) == before  # the cluster was not asked


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_cluster_errors_are_one_line(tmp_path: Path) -> None:
    done = validate("kustomize", "--kubeconfig", str(tmp_path / "missing"))
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == (
        f"error: no kubeconfig at {tmp_path / 'missing'}: pass --kubeconfig FILE, or --crds DIR\n"
    )
    dead = tmp_path / "dead"
    dead.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [
                    {"name": "c", "cluster": {"server": f"http://127.0.0.1:{_closed_port()}"}}
                ],
                "users": [{"name": "u", "user": {}}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        )
    )
    done = validate("kustomize", "--kubeconfig", str(dead))
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr.startswith("error: cannot reach cluster http://127.0.0.1:")
    assert len(done.stderr.splitlines()) == 1
    done = validate("kustomize", "--kubeconfig", str(dead), "--context", "nope")
    assert done.returncode == 2 and len(done.stderr.splitlines()) == 1
    assert done.stderr.startswith(f"error: kubeconfig {dead}: ")


def test_no_source_at_all_names_every_option(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv(_locate.CRDS_ENV, raising=False)
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "none"))
    monkeypatch.setattr(_locate, "checkout_crds_dir", lambda: tmp_path / "shared" / "crds")
    with pytest.raises(DeployError) as caught:
        find_crds()
    message = str(caught.value)
    assert "\n" not in message
    for option in ("--crds DIR", "$MODELCTL_CRDS_DIR", "--kubeconfig", "--context", "shared"):
        assert option in message


def test_the_checkout_folder_is_the_last_resort(
    monkeypatch: pytest.MonkeyPatch, crds_dir: Path, tmp_path: Path
) -> None:
    monkeypatch.delenv(_locate.CRDS_ENV, raising=False)
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "none"))
    monkeypatch.setattr(_locate, "checkout_crds_dir", lambda: crds_dir)
    index = find_crds()
    assert index.source.kind == "folder" and index is _check.load_crds(crds_dir.resolve())
