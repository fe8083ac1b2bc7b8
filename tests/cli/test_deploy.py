"""``modelctl deploy render --trained-model NAME@REF``, as users run it: the real CLI in a
subprocess, a real local registry, real kustomize. The TrainedModels' storageUri and
memory come from the registry (its storage URIs, the versions' manifests); what KServe
would refuse is never printed; bad arguments are one line on stderr and exit code 2."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from registry import Registry
from tests.manifests.test_cli import modelctl
from tests.support.manifests import load_all

MIB = 1024 * 1024


@pytest.fixture()
def registry(tmp_path: Path) -> tuple[str, Registry]:
    """Two models on a local registry: demo-embed (1 and 2, stable = 1) and sentiment (1)."""
    url = str(tmp_path / "registry")
    reg = Registry.open(url)
    for name, size in (("demo-embed", 3 * MIB), ("demo-embed", 5 * MIB), ("sentiment", 40 * MIB)):
        artifact = tmp_path / f"{name}-{size}"
        artifact.mkdir()
        (artifact / "model.safetensors").write_bytes(b"\0" * size)
        reg.push(artifact, name, "feature-extraction",
                 alias="stable" if (name, size) != ("demo-embed", 5 * MIB) else None)
    return url, reg


def trained(stdout: str) -> dict[str, dict[str, Any]]:
    return {d["metadata"]["name"]: d for d in load_all(stdout) if d["kind"] == "TrainedModel"}


def memory_of(reg: Registry, model: str, ref: str) -> str:
    size = sum(entry.size for entry in reg.manifest(model, ref).files.values())
    return f"{max(16, math.ceil(size * 1.25 / MIB))}Mi"


def test_render_adds_one_trained_model_per_flag(registry: tuple[str, Registry]) -> None:
    url, reg = registry
    done = modelctl("deploy", "render", "pool", "-o", "multi-model", "--registry", url,
                    "-n", "prod", "--trained-model", "demo-embed@2",
                    "--trained-model", "sentiment@stable", "--no-validate")
    assert done.returncode == 0, done.stderr
    docs = load_all(done.stdout)
    [isvc] = [d for d in docs if d["kind"] == "InferenceService"]
    assert (isvc["metadata"]["name"], isvc["metadata"]["namespace"]) == ("pool", "prod")
    models = trained(done.stdout)
    assert set(models) == {"demo-embed", "sentiment"}
    for name, ref in (("demo-embed", "2"), ("sentiment", "stable")):
        spec = models[name]["spec"]
        assert models[name]["metadata"]["namespace"] == "prod"
        assert spec["inferenceService"] == "pool"
        assert spec["model"] == {"storageUri": reg.storage_uri(name, ref),
                                 "framework": "modelctl", "memory": memory_of(reg, name, ref)}
    assert spec["model"]["memory"] == "50Mi"  # its 40 MiB of files and a quarter more
    assert "file:// path, which pods cannot read" in done.stderr


def test_what_kserve_would_refuse_is_not_printed(registry: tuple[str, Registry]) -> None:
    url, _ = registry
    # A file:// registry: KServe's model agent fetches s3, gs, http(s) only, and its
    # TrainedModel webhook refuses anything else.
    done = modelctl("deploy", "render", "pool", "-o", "multi-model", "--registry", url,
                    "--trained-model", "sentiment@1")
    assert (done.returncode, done.stdout) == (2, "")
    assert ":$.spec.model.storageUri: the Trained Model \"sentiment\" storageUri field is " \
           "invalid." in done.stderr
    assert "[kserve-webhook]" in done.stderr
    assert done.stderr.endswith("error: the rendered manifests have 1 problem(s); "
                                "nothing printed\n")


@pytest.mark.parametrize(("args", "message"), [
    (["-o", "multi-model", "--trained-model", "Bad_Name@1"],
     "error: --trained-model 'Bad_Name@1': invalid model name 'Bad_Name'"),
    (["-o", "multi-model", "--trained-model", "sentiment@"],
     "error: --trained-model 'sentiment@': invalid ref in 'sentiment@'"),
    (["-o", "multi-model", "--trained-model", "sentiment@1", "--trained-model", "sentiment@2"],
     "error: --trained-model sentiment is given twice (sentiment@1, sentiment@2)"),
    (["-o", "cpu", "--trained-model", "sentiment@1"],
     "error: --trained-model needs a multi-model overlay (such as multi-model), and 'cpu' "
     "is not one"),
    (["-o", "multi-model", "--trained-model", "sentiment@7"], "error: "),
])
def test_bad_trained_models_are_one_line_and_exit_2(
    registry: tuple[str, Registry], args: list[str], message: str
) -> None:
    url, _ = registry
    done = modelctl("deploy", "render", "demo-embed@stable", "--registry", url, *args,
                    "--no-validate")
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr.startswith(message), done.stderr
    assert len(done.stderr.splitlines()) == 1 and "Traceback" not in done.stderr
