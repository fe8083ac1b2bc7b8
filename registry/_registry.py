"""``Registry``: the public face of the store — push, resolve, alias, verify, fetch."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from registry._aliases import CURRENT, Expected, change_alias, read_aliases
from registry._errors import InvalidName, NotFound, RegistryError, StoreError
from registry._manifest import Manifest, utc_now
from registry._names import (
    LATEST,
    check_alias,
    check_framework,
    check_metadata,
    check_model_name,
    check_ref,
    check_task,
    version_of,
)
from registry._open import default_url, open_store
from registry._progress import NO_PROGRESS, Progress
from registry._push import (
    abandon,
    claim_version,
    manifest_key,
    scan_source,
    upload_files,
    version_key,
)
from registry._reports import read_report, report_key, write_report
from registry._store import ArtifactStore
from registry._transfer import fetch_version, verify_stored

_PVC_RE = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(/[^/\s]+)*\Z")


def _check_metrics(metrics: Mapping[str, float]) -> dict[str, float]:
    out: dict[str, float] = {}
    for key, value in metrics.items():
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(
            value
        ):
            raise InvalidName(f"metric {key!r} must be a finite number, got {value!r}")
        out[str(key)] = float(value)
    return out


class Registry:
    """Immutable, checksummed model versions in an ``ArtifactStore``.

    Layout: ``<root>/<model>/<version>/`` holds the files and MANIFEST.json
    (written last: a version without it does not exist);
    ``<root>/<model>/aliases.json`` maps aliases to versions.

    Example::

        reg = Registry.open("s3://models/prod")
        m = reg.push("./out", "demo-embed", "feature-extraction", alias="canary")
        reg.fetch("demo-embed", "stable", "/mnt/models")
    """

    def __init__(self, store: ArtifactStore) -> None:
        self._store = store

    @classmethod
    def open(cls, url: str | None = None) -> Registry:
        """Open the registry at ``url`` (a directory, ``file://`` or ``s3://bucket/prefix``);
        None means ``$MODELCTL_REGISTRY``, else ``~/.modelctl/registry``."""
        return cls(open_store(url if url else default_url()))

    @property
    def url(self) -> str:
        """Where this registry lives (never includes credentials)."""
        return self._store.url

    @property
    def store(self) -> ArtifactStore:
        return self._store

    # -- reading -------------------------------------------------------------

    def models(self) -> list[str]:
        """Names of the models that have at least one version."""
        names = []
        for name in self._store.list_dir(""):
            if re.fullmatch(r"[a-z][a-z0-9-]*", name) and self.versions(name):
                names.append(name)
        return names

    def versions(self, model: str) -> list[int]:
        """The visible versions of ``model`` (those with a manifest), ascending."""
        check_model_name(model)
        numbers = sorted(int(n) for n in self._store.list_dir(model) if n.isdigit())
        return [v for v in numbers if self._store.exists(manifest_key(model, v))]

    def resolve(self, model: str, ref: str | int) -> int:
        """The version a ref names: a number, ``latest`` or an alias."""
        check_model_name(model)
        direct = version_of(ref)
        if direct is not None:
            if not self._store.exists(manifest_key(model, direct)):
                raise self._missing(model, f"has no version {direct}")
            return direct
        ref = check_ref(str(ref))
        if ref == LATEST:
            versions = self.versions(model)
            if not versions:
                raise self._missing(model, "has no versions")
            return versions[-1]
        aliases = read_aliases(self._store, model)
        if ref not in aliases:
            known = ", ".join(sorted(aliases)) or "none"
            raise self._missing(model, f"has no alias {ref!r} (its aliases: {known})")
        return aliases[ref]

    def _missing(self, model: str, what: str) -> NotFound:
        if not self._store.list_dir(model):
            return NotFound(f"no model {model!r} in the registry at {self.url}")
        return NotFound(f"model {model} {what}")

    def manifest_bytes(self, model: str, ref: str | int) -> tuple[Manifest, bytes]:
        """The manifest of a version and its exact stored bytes."""
        version = self.resolve(model, ref)
        key = manifest_key(model, version)
        raw = self._store.read_bytes(key)
        if raw is None:
            raise self._missing(model, f"has no version {version}")
        manifest = Manifest.from_json(raw, f"{self.url}/{key}")
        if (manifest.name, manifest.version) != (model, version):
            raise RegistryError(
                f"corrupted manifest {self.url}/{key}: it describes "
                f"{manifest.name} version {manifest.version}"
            )
        return manifest, raw

    def manifest(self, model: str, ref: str | int) -> Manifest:
        """The manifest of the version ``ref`` names."""
        return self.manifest_bytes(model, ref)[0]

    def aliases(self, model: str) -> dict[str, int]:
        """Alias name to version for ``model`` (empty if none)."""
        check_model_name(model)
        return read_aliases(self._store, model)

    # -- writing -------------------------------------------------------------

    def push(
        self,
        src_dir: str | Path,
        model: str,
        task: str,
        *,
        alias: str | None = None,
        metadata: Mapping[str, str] | None = None,
        parent: int | None = None,
        framework: str = "transformers",
        metrics: Mapping[str, float] | None = None,
        progress: Progress = NO_PROGRESS,
    ) -> Manifest:
        """Copy ``src_dir`` into a new version of ``model`` and return its manifest.

        Files stream up while their sha256 is computed; the manifest is written
        last. Concurrent pushes get distinct versions. With ``alias`` the alias is
        moved to the new version afterwards (compare-and-swap). ``progress`` is told
        the files and bytes as they stream (from the transfer threads).
        """
        check_model_name(model)
        check_task(task)
        check_framework(framework)
        if alias is not None:
            check_alias(alias)
        meta = check_metadata(dict(metadata or {}))
        scores = _check_metrics(metrics or {})
        if parent is not None:
            self.resolve(model, parent)
        files = scan_source(Path(src_dir).expanduser())
        version = claim_version(self._store, model)
        try:
            entries = upload_files(self._store, model, version, files, progress)
            manifest = Manifest(
                name=model, version=version, created=utc_now(), task=task,
                framework=framework, files=entries, parent=parent,
                metadata=meta, metrics=scores,
            )
        except BaseException:
            abandon(self._store, model, version)
            raise
        # No clean-up past this point: if the write landed but its reply was lost,
        # the version exists and readers may already have it.
        if not self._store.create_exclusive(manifest_key(model, version), manifest.to_json()):
            raise StoreError(f"{model} version {version} already has a manifest: the store's "
                             "exclusive create is not exclusive")
        if alias is not None:
            try:
                self.set_alias(model, alias, version)
            except RegistryError as exc:
                raise type(exc)(f"pushed {model} version {version}, but alias {alias!r} "
                                f"was not moved: {exc}") from exc
        return manifest

    def set_alias(
        self, model: str, alias: str, version: int, *, expected: Expected = CURRENT
    ) -> int | None:
        """Point ``alias`` at ``version`` if the alias is still ``expected`` (an
        int, None for 'must be unset', or CURRENT for 'whatever it is when we
        start'); returns the previous version. Raises AliasConflict on a lost race."""
        check_model_name(model)
        check_alias(alias)
        self.resolve(model, version)
        return change_alias(self._store, model, alias, version, expected)

    def remove_alias(self, model: str, alias: str, *, expected: Expected = CURRENT) -> int:
        """Remove ``alias`` if it is still ``expected``; returns the version it named."""
        check_model_name(model)
        check_alias(alias)
        try:
            previous = change_alias(self._store, model, alias, None, expected)
        except NotFound:
            raise self._missing(model, f"has no alias {alias!r}") from None
        assert previous is not None  # change_alias raises NotFound for an unset alias
        return previous

    # -- checking and fetching ------------------------------------------------

    def verify(self, model: str, ref: str | int, *,
               progress: Progress = NO_PROGRESS) -> list[str]:
        """Recompute the checksums of a stored version: problems by file name
        (a changed, missing or extra file); empty means intact."""
        return verify_stored(self._store, self.manifest(model, ref), progress)

    def fetch(self, model: str, ref: str | int, dest_dir: str | Path, *,
              progress: Progress = NO_PROGRESS) -> Manifest:
        """Download a version into ``dest_dir`` (artifact files plus MANIFEST.json),
        verifying every checksum; raises VerificationFailed and leaves nothing at
        ``dest_dir`` if any file is wrong. ``dest_dir`` must be new, empty, or an
        earlier fetch (which is replaced)."""
        manifest, raw = self.manifest_bytes(model, ref)
        fetch_version(self._store, manifest, raw, Path(dest_dir).expanduser().absolute(),
                      progress)
        return manifest

    def storage_uri(self, model: str, ref: str | int, *, pvc: str | None = None) -> str:
        """What an InferenceService ``storageUri`` takes for this version:
        ``s3://…/NAME/VERSION/``, ``file:///…/NAME/VERSION``, or with ``pvc``
        (``CLAIM`` or ``CLAIM/sub/path`` where the registry root is mounted)
        ``pvc://CLAIM/NAME/VERSION``."""
        version = self.resolve(model, ref)
        key = version_key(model, version)
        if pvc is None:
            return self._store.uri(key)
        if not _PVC_RE.match(pvc):
            raise InvalidName(f"invalid PVC {pvc!r}: want CLAIM-NAME or CLAIM-NAME/sub/path")
        if self._store.local_root is None:
            raise InvalidName(f"--pvc needs a registry on a filesystem; {self.url} is not")
        return f"pvc://{pvc.rstrip('/')}/{key}"

    # -- reports ----------------------------------------------------------------

    def put_report(self, model: str, ref: str | int, name: str,
                   data: Mapping[str, Any]) -> str:
        """Store the JSON report ``name`` (e.g. ``shadow``) next to a version, replacing
        any earlier one; returns where it is (``<root>/<model>/reports/<v>/<name>.json``)."""
        version = self.resolve(model, ref)
        key = report_key(model, version, name)
        write_report(self._store, key, data)
        return f"{self.url}/{key}"

    def get_report(self, model: str, ref: str | int, name: str) -> dict[str, Any] | None:
        """The report ``name`` stored next to a version, or None if there is none."""
        version = self.resolve(model, ref)
        return read_report(self._store, report_key(model, version, name))
