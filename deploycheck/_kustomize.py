"""Render a kustomization with real kustomize (``kubectl kustomize``)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import yaml

from deploycheck._errors import DeployError, KustomizeError

KUSTOMIZATION_FILES = ("kustomization.yaml", "kustomization.yml", "Kustomization")
RENDER_TIMEOUT_S = 60.0


def _kind(path: Path) -> str | None:
    """``Kustomization``, ``Component`` or None (not a kustomize folder)."""
    if not path.is_dir():
        return None
    for name in KUSTOMIZATION_FILES:
        if (path / name).is_file():
            try:
                doc = yaml.safe_load((path / name).read_text())
            except (OSError, yaml.YAMLError):
                return "Kustomization"  # kustomize says what is wrong with it
            kind = doc.get("kind") if isinstance(doc, dict) else None
            return "Component" if kind == "Component" else "Kustomization"
    return None


def is_kustomization(path: Path) -> bool:
    """A folder kustomize can build."""
    return _kind(path) == "Kustomization"


def is_component(path: Path) -> bool:
    """A kustomize Component: built only by the Kustomizations that list it in
    ``components:``, so it is checked through them."""
    return _kind(path) == "Component"


def build(directory: Path, kubectl: str) -> str:
    """The rendered YAML stream of ``directory``; a kustomize failure is a DeployError."""
    try:
        done = subprocess.run(
            [kubectl, "kustomize", str(directory)],
            capture_output=True,
            text=True,
            timeout=RENDER_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise DeployError(
            f"kubectl kustomize {directory} did not finish in {RENDER_TIMEOUT_S:.0f}s"
        ) from exc
    except OSError as exc:
        raise DeployError(f"cannot run {kubectl}: {exc.strerror}") from exc
    if done.returncode != 0:
        detail = " ".join(done.stderr.split()) or f"exit code {done.returncode}"
        raise KustomizeError(directory, detail)
    return done.stdout

