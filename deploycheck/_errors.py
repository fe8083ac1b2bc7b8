"""The deploy checker's branch of the error tree.

    PlatformError            (registry)
    └── DeployError          a tool, schema folder, overlay or name the user named is wrong
        └── KustomizeError   kustomize refused a directory (``directory``, ``detail``)

A manifest that is merely wrong is not an error: it is a ``Problem`` in the
``Report``. Inside the package ``YamlDocumentError`` (a ``ValueError``, in ``_yaml``)
marks a stream that does not parse; it becomes a ``Problem`` or a ``DeployError``
before it leaves. The CLI maps every one of them to exit code 2 (``cli/_errors.py``).
"""

from __future__ import annotations

from pathlib import Path

from common import PlatformError


class DeployError(PlatformError):
    """Rendering or checking manifests cannot proceed (missing kubectl, CRDs, overlay...)."""


class KustomizeError(DeployError):
    """kustomize refused a directory (bad kustomization, missing file, bad patch)."""

    def __init__(self, directory: Path, detail: str) -> None:
        super().__init__(f"kustomize failed for {directory}: {detail}")
        self.directory = directory
        self.detail = detail
