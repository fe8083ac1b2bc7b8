"""Render a kustomization with real kustomize (``kubectl kustomize``)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from deploycheck._errors import DeployError, KustomizeError

KUSTOMIZATION_FILES = ("kustomization.yaml", "kustomization.yml", "Kustomization")
RENDER_TIMEOUT_S = 60.0


def is_kustomization(path: Path) -> bool:
    return path.is_dir() and any((path / name).is_file() for name in KUSTOMIZATION_FILES)


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

