"""Shared fixtures: one checker per session (the upstream CRDs parse once) and every
kustomize overlay rendered once with real kustomize.

Nothing here stands in for an external system: the renders come from the real
kustomize (`kubectl kustomize`), the schemas from the upstream CRDs in .modelctl/crds (make setup),
and the checks from `deploycheck` (whose webhook port cites KServe's source:
github.com/kserve/kserve `pkg/apis/serving/v1beta1/inference_service_validation.go`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from deploycheck import CheckConfig, Checker, find_crds_dir, find_kubectl

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "deploycheck" / "fixtures"
BROKEN = FIXTURES / "broken"
ROLLOUT_OK = FIXTURES / "rollout_src" / "ok"
OVERLAYS = ROOT / "kustomize" / "overlays"
# The overlays this issue promises; later issues (shadow) may add more.
REQUIRED_OVERLAYS = {"cpu", "gpu", "canary", "scale-to-zero", "standard-keda", "standard-canary"}


def overlay_names() -> list[str]:
    return sorted(p.name for p in OVERLAYS.iterdir() if (p / "kustomization.yaml").is_file())


@pytest.fixture(scope="session")
def crds_dir() -> Path:
    # Fails loudly (DeployError) when .modelctl/crds is missing: never a silent skip.
    return find_crds_dir()


@pytest.fixture(scope="session")
def checker(crds_dir: Path) -> Checker:
    """Compares the rollout Role with a fixed fixture source, so these tests do not
    move when rollout/ changes (test_rbac checks the real rollout code)."""
    return Checker(CheckConfig(crds_dir=crds_dir, rollout_src=ROLLOUT_OK))


@pytest.fixture(scope="session")
def rendered() -> dict[str, str]:
    """``kubectl kustomize`` output of every overlay, by overlay name."""
    from deploycheck import _kustomize

    kubectl = find_kubectl()
    return {name: _kustomize.build(OVERLAYS / name, kubectl) for name in overlay_names()}


def load_all(text: str) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(text) if doc]


def runtime_doc() -> dict[str, Any]:
    return load_all((ROOT / "manifests" / "10-serving-runtime.yaml").read_text())[0]
