"""The artifact a predictor serves: its manifest, verified, and the directory to load from.

KServe's storage initializer skips zero-byte objects when it downloads an ``s3://``
URI (``Storage._download_s3``: ``if obj.key.endswith("/") or obj.size == 0``), so
a version holding an empty file arrives without it. Verification accepts such a
file when the manifest records size 0 and the empty-content sha256; a size-0 file
that is present is still hashed, and any other missing file is still an error.

The model directory is never written to (KServe mounts ``/mnt/models`` read-only by
default, and a local directory may be a user's or shared): when empty files are
missing, the model loads from an overlay in a temporary directory instead, the same
tree of real directories with a symlink to every file, plus the empty files.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from predictor._config import ServerConfig
from predictor._errors import ArtifactError

logger = logging.getLogger("predictor")
_AGENT_MARKER = re.compile(r"SUCCESS\.[0-9a-f]{64}")


@dataclass(frozen=True)
class Artifact:
    """A verified version: what it is, and where its handler loads it from."""

    task: str
    version: str
    load_dir: Path
    overlay: Path | None = None

    def close(self) -> None:
        """Remove the overlay, if there is one (its symlinks only, never their targets)."""
        if self.overlay is not None:
            shutil.rmtree(self.overlay, ignore_errors=True)


def open_artifact(config: ServerConfig) -> Artifact:
    """Read and verify the artifact's MANIFEST.json; the caller closes the result."""
    from registry import read_manifest_file, verify_dir

    model_dir = Path(config.model_dir)
    manifest_path = model_dir / "MANIFEST.json"
    if not manifest_path.is_file():
        raise ArtifactError(
            f"no MANIFEST.json in {model_dir}: serve a version from the registry "
            "(modelctl registry push / modelctl serve)"
        )
    manifest = read_manifest_file(manifest_path)
    if config.verify_checksums:
        problems = verify_dir(model_dir, manifest, missing_empty_ok=True,
                              extra_ok=is_agent_marker)
        if problems:
            raise ArtifactError(
                f"{manifest.name} version {manifest.version} failed verification, "
                "refusing to load it: " + "; ".join(problems)
            )
    missing = missing_empty_files(model_dir, {p: e.size for p, e in manifest.files.items()})
    if not missing:
        return Artifact(manifest.task, str(manifest.version), model_dir)
    overlay = build_overlay(model_dir, missing)
    logger.info("%d empty file(s) absent from %s (%s): loading from %s", len(missing),
                model_dir, ", ".join(missing), overlay)
    return Artifact(manifest.task, str(manifest.version), overlay, overlay)


def is_agent_marker(rel: str) -> bool:
    """KServe's model agent, once it has downloaded a TrainedModel, writes
    ``<model dir>/SUCCESS.<hex sha256 of the model spec>`` beside its files
    (pkg/agent/downloader.go ``DownloadModel``, storage/utils.go ``AsSha256``): not the
    version's, and no reason to refuse it."""
    return _AGENT_MARKER.fullmatch(rel) is not None


def missing_empty_files(model_dir: Path, sizes: dict[str, int]) -> list[str]:
    """The manifest's zero-byte files that are not in ``model_dir``, sorted."""
    return sorted(rel for rel, size in sizes.items()
                  if size == 0 and not (model_dir / rel).exists())


def build_overlay(source: Path, empty_files: Iterable[str]) -> Path:
    """A new temporary directory that reads like ``source`` plus ``empty_files``.

    Directories are real (``Path.rglob`` does not descend into symlinked ones, and
    the handlers' weight checks rely on it), files are absolute symlinks.
    """
    root = Path(tempfile.mkdtemp(prefix="modelctl-model-"))
    try:
        for dirpath, _dirs, names in os.walk(source, followlinks=True):
            here = root / Path(dirpath).relative_to(source)
            here.mkdir(parents=True, exist_ok=True)
            for name in names:
                (here / name).symlink_to(Path(dirpath, name).absolute())
        for rel in empty_files:
            target = root.joinpath(*PurePosixPath(rel).parts)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.unlink(missing_ok=True)  # a dangling link of that name: never write through it
            target.write_bytes(b"")
    except OSError as exc:
        shutil.rmtree(root, ignore_errors=True)
        raise ArtifactError(f"cannot build a load directory for {source} in {root.parent}: "
                            f"{exc.strerror or exc}") from exc
    return root
