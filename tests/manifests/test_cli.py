"""`modelctl deploy validate` and `modelctl deploy render` as users run them: the real
CLI in a subprocess, a real local registry, real kustomize."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from registry import Registry
from tests.support.manifests import BROKEN, ROLLOUT_OK, ROOT, load_all

LINE = re.compile(r"^(?P<file>[^:]+):(?P<doc>\d+):(?P<path>\$\S*): (?P<message>.+)$")


FOLDER_LINE = re.compile(r"^CRDs: folder \S+ \(\d+ definitions\)\n")
# No kubeconfig unless a test brings one: a developer's ~/.kube/config must not decide
# which CRDs these tests validate against.
NO_KUBECONFIG = {"KUBECONFIG": str(ROOT / ".no-kubeconfig")}


def modelctl(
    *args: str, env: dict[str, str] | None = None, cwd: Path = ROOT
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cli", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **NO_KUBECONFIG, **(env or {})},
        check=False,
    )


def after_source_line(stderr: str) -> str:
    """stderr without its first line, which must say the CRDs came from a folder."""
    assert FOLDER_LINE.match(stderr), stderr
    return stderr.split("\n", 1)[1]


def test_validate_passes_on_the_repository() -> None:
    done = modelctl(
        "deploy", "validate", "manifests", "kustomize", "--rollout-src", str(ROLLOUT_OK)
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout == ""
    assert re.fullmatch(
        r"ok: \d+ document\(s\) from \d+ source\(s\) valid\n", after_source_line(done.stderr)
    )


def test_validate_prints_one_line_per_problem_and_exits_2() -> None:
    files = [BROKEN / "typo-field.yaml", BROKEN / "wrong-type.yaml", BROKEN / "image-latest.yaml"]
    done = modelctl("deploy", "validate", *map(str, files))
    assert done.returncode == 2
    lines = done.stdout.splitlines()
    parsed = [LINE.match(line) for line in lines]
    assert all(parsed), lines
    assert [(m["file"], m["doc"], m["path"]) for m in parsed if m] == [
        (str(files[0]), "0", "$.spec.predictor.canaryTraficPercent"),
        (str(files[1]), "0", "$.spec.predictor.maxReplicas"),
        (str(files[2]), "0", "$.spec.containers[0].image"),
        (str(files[2]), "1", "$.spec.template.spec.containers[0].image"),
    ]
    assert after_source_line(done.stderr) == "4 problem(s) in 4 document(s) from 3 source(s)\n"


def test_validate_json() -> None:
    done = modelctl("deploy", "validate", str(BROKEN / "typo-field.yaml"), "--json")
    assert done.returncode == 2
    report = json.loads(done.stdout)
    assert report["ok"] is False and report["documents"] == 1
    assert report["crds"]["source"] == "folder" and report["crds"]["definitions"] > 0
    assert report["problems"] == [
        {
            "source": str(BROKEN / "typo-field.yaml"),
            "document": 0,
            "path": "$.spec.predictor.canaryTraficPercent",
            "message": 'unknown field "canaryTraficPercent"',
        }
    ]


def test_validate_usage_errors_are_one_line(tmp_path: Path) -> None:
    done = modelctl("deploy", "validate", str(tmp_path / "nowhere.yaml"))
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == f"error: {tmp_path / 'nowhere.yaml'} does not exist\n"
    done = modelctl("deploy", "validate", "manifests", env={"MODELCTL_CRDS_DIR": str(tmp_path)})
    assert done.returncode == 2
    assert done.stderr.startswith(f"error: no upstream CRDs at {tmp_path} ($MODELCTL_CRDS_DIR)")
    assert "Traceback" not in done.stderr


def test_validate_reports_a_broken_kustomization(tmp_path: Path) -> None:
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    (overlay / "kustomization.yaml").write_text("resources:\n  - missing.yaml\n")
    done = modelctl("deploy", "validate", str(overlay))
    assert done.returncode == 2
    assert done.stdout.startswith(f"{overlay}:0:$: kustomize failed: ")


@pytest.fixture()
def registry_with_two_versions(tmp_path: Path) -> tuple[str, Registry]:
    artifact = tmp_path / "artifact"
    artifact.mkdir()
    (artifact / "weights.bin").write_bytes(b"\0" * 16)
    url = str(tmp_path / "registry")
    registry = Registry.open(url)
    registry.push(artifact, "demo-embed", "feature-extraction", alias="stable")
    registry.push(artifact, "demo-embed", "feature-extraction")
    return url, registry


def isvc(text: str) -> dict[str, Any]:
    [doc] = [d for d in load_all(text) if d["kind"] == "InferenceService"]
    return doc


def test_render_resolves_the_registry_ref(registry_with_two_versions: tuple[str, Registry]) -> None:
    url, registry = registry_with_two_versions
    done = modelctl("deploy", "render", "demo-embed@stable", "--overlay", "gpu", "--registry", url)
    assert done.returncode == 0, done.stderr
    doc = isvc(done.stdout)
    assert doc["metadata"]["name"] == "demo-embed"
    assert doc["metadata"]["namespace"] == "modelctl"
    assert doc["spec"]["predictor"]["model"]["storageUri"] == registry.storage_uri("demo-embed", 1)
    assert "file:// path, which pods cannot read" in done.stderr


def test_render_standard_canary(registry_with_two_versions: tuple[str, Registry]) -> None:
    url, registry = registry_with_two_versions
    done = modelctl(
        "deploy",
        "render",
        "demo-embed@2",
        "-o",
        "standard-canary",
        "--registry",
        url,
        "--namespace",
        "prod",
        "--name",
        "embed",
    )
    assert done.returncode == 0, done.stderr
    doc = isvc(done.stdout)
    assert (doc["metadata"]["name"], doc["metadata"]["namespace"]) == ("embed", "prod")
    spec = doc["spec"]
    assert spec["predictor"]["model"]["storageUri"] == registry.storage_uri("demo-embed", "stable")
    assert spec["canary"][0]["predictor"]["model"]["storageUri"] == registry.storage_uri(
        "demo-embed", 2
    )
    # A fixed pool (a KEDA-scaled canary cannot be built), and the canary fixed replicas:
    # KServe's webhook refuses autoscaling on it.
    assert "autoScaling" not in spec["predictor"]
    assert "autoScaling" not in spec["canary"][0]["predictor"]
    # What render prints is what `deploy validate` accepts.
    assert yaml.safe_load_all(done.stdout)


def test_render_errors(registry_with_two_versions: tuple[str, Registry]) -> None:
    url, _ = registry_with_two_versions
    done = modelctl("deploy", "render", "demo-embed@9", "--registry", url)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr.startswith("error: ") and len(done.stderr.splitlines()) == 1
    done = modelctl("deploy", "render", "demo-embed@stable", "--overlay", "nope", "--registry", url)
    assert done.returncode == 2
    assert (
        done.stderr.startswith("error: no overlay 'nope' in ") and "standard-canary" in done.stderr
    )
    done = modelctl(
        "deploy", "render", "demo-embed@stable", "--name", "Bad_Name", "--registry", url
    )
    assert done.returncode == 2
    assert "is not a valid InferenceService name" in done.stderr


def test_render_refuses_to_print_what_would_not_validate(
    registry_with_two_versions: tuple[str, Registry], tmp_path: Path
) -> None:
    url, _ = registry_with_two_versions
    overlay = tmp_path / "typo-overlay"
    overlay.mkdir()
    cpu = os.path.relpath(ROOT / "kustomize" / "overlays" / "cpu", overlay)
    (overlay / "kustomization.yaml").write_text(
        f"resources: [{cpu}]\n"
        "patches:\n"
        "  - target: {kind: InferenceService}\n"
        "    patch: |-\n"
        '      [{"op": "add", "path": "/spec/predictor/canaryTraficPercent", "value": 10}]\n'
    )
    done = modelctl("deploy", "render", "demo-embed@stable", "-o", str(overlay), "--registry", url)
    assert (done.returncode, done.stdout) == (2, "")
    assert (
        f"render:{overlay}:0:$.spec.predictor.canaryTraficPercent: "
        'unknown field "canaryTraficPercent"\n' in done.stderr
    )
    assert done.stderr.endswith(
        "error: the rendered manifests have 1 problem(s); nothing printed\n"
    )


def test_render_queue_writes_the_version_into_the_stream(
    registry_with_two_versions: tuple[str, Registry],
) -> None:
    url, registry = registry_with_two_versions
    done = modelctl("deploy", "render", "demo-embed@stable", "-o", "queue", "--registry", url)
    assert done.returncode == 0, done.stderr
    docs = {d["kind"]: d for d in load_all(done.stdout)}
    for trigger in docs["ScaledObject"]["spec"]["triggers"]:
        assert trigger["metadata"]["stream"] == "modelctl:{demo-embed:1}:requests"
    init = docs["Deployment"]["spec"]["template"]["spec"]["initContainers"][0]
    assert init["args"] == [registry.storage_uri("demo-embed", "stable"), "/mnt/models"]
