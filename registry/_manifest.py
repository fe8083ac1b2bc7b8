"""MANIFEST.json: what one immutable version holds, and how to check a copy of it."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath
from typing import Any

from registry._errors import InvalidName, ManifestError, RegistryError
from registry._names import check_framework, check_metadata, check_model_name

MANIFEST_NAME = "MANIFEST.json"
SCHEMA = 1
_SHA256_RE = re.compile(r"[0-9a-f]{64}\Z")


def utc_now() -> str:
    """The current time as ISO-8601 UTC with a ``Z`` suffix, to the second."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def check_relpath(path: str) -> str:
    """A file's path inside a version: relative, POSIX, no ``..``, not the manifest."""
    pure = PurePosixPath(path)
    if (
        not path
        or pure.is_absolute()
        or "\\" in path
        or any(part in ("", ".", "..") for part in path.split("/"))
        or any(ord(ch) < 32 for ch in path)
    ):
        raise ManifestError(f"unsafe file path {path!r} in manifest")
    if path == MANIFEST_NAME:
        raise ManifestError(f"{MANIFEST_NAME} cannot list itself")
    return path


@dataclass(frozen=True)
class FileEntry:
    """One artifact file: its sha256 (hex) and size in bytes."""

    sha256: str
    size: int

    def __post_init__(self) -> None:
        if not isinstance(self.sha256, str) or not _SHA256_RE.match(self.sha256):
            raise ManifestError(f"bad sha256 {self.sha256!r}: want 64 lower-case hex digits")
        if isinstance(self.size, bool) or not isinstance(self.size, int) or self.size < 0:
            raise ManifestError(f"bad size {self.size!r}: want a non-negative integer")

    def to_dict(self) -> dict[str, Any]:
        return {"sha256": self.sha256, "size": self.size}


@dataclass(frozen=True)
class Manifest:
    """Everything the registry records about one version; written last at push.

    ``files`` maps each relative POSIX path to its checksum and size;
    ``metadata`` is free-form strings, ``metrics`` free-form numbers.
    """

    name: str
    version: int
    created: str
    task: str
    framework: str
    files: Mapping[str, FileEntry]
    parent: int | None = None
    metadata: Mapping[str, str] = field(default_factory=dict)
    metrics: Mapping[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        try:
            check_model_name(self.name)
            check_framework(self.framework)
            check_metadata(dict(self.metadata))
        except InvalidName as exc:
            raise ManifestError(str(exc)) from exc
        _check_int("version", self.version)
        if self.parent is not None:
            _check_int("parent", self.parent)
        if not isinstance(self.task, str) or not self.task:
            raise ManifestError(f"bad task {self.task!r}")
        _check_created(self.created)
        if not self.files:
            raise ManifestError("a version must hold at least one file")
        for path, entry in self.files.items():
            check_relpath(path)
            if not isinstance(entry, FileEntry):
                raise ManifestError(f"bad entry for {path!r}")
        for key, value in self.metrics.items():
            ok = isinstance(value, int | float) and not isinstance(value, bool)
            if not isinstance(key, str) or not key or not ok or not math.isfinite(value):
                raise ManifestError(f"bad metric {key!r}: {value!r} (want a finite number)")

    @property
    def total_size(self) -> int:
        """Bytes in all artifact files together."""
        return sum(entry.size for entry in self.files.values())

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict; ``from_dict(to_dict())`` gives an equal manifest."""
        return {
            "schema": SCHEMA,
            "name": self.name,
            "version": self.version,
            "created": self.created,
            "task": self.task,
            "framework": self.framework,
            "parent": self.parent,
            "files": {path: self.files[path].to_dict() for path in sorted(self.files)},
            "metadata": dict(sorted(self.metadata.items())),
            "metrics": dict(sorted(self.metrics.items())),
        }

    def to_json(self) -> bytes:
        return (json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n").encode()

    @classmethod
    def from_dict(cls, data: Any) -> Manifest:
        """Build a manifest from parsed JSON; a ManifestError says what is wrong."""
        if not isinstance(data, dict):
            raise ManifestError("manifest is not a JSON object")
        schema = data.get("schema", SCHEMA)
        if schema != SCHEMA:
            raise ManifestError(f"unsupported manifest schema {schema!r} (this reads {SCHEMA})")
        missing = [k for k in ("name", "version", "created", "task", "files") if k not in data]
        if missing:
            raise ManifestError(f"manifest lacks {', '.join(missing)}")
        files = data["files"]
        if not isinstance(files, dict):
            raise ManifestError("'files' is not an object")
        entries: dict[str, FileEntry] = {}
        for path, entry in files.items():
            if not isinstance(entry, dict) or set(entry) != {"sha256", "size"}:
                raise ManifestError(f"bad entry for {path!r}: want sha256 and size")
            entries[check_relpath(path)] = FileEntry(entry["sha256"], entry["size"])
        metadata = data.get("metadata") or {}
        metrics = data.get("metrics") or {}
        if not isinstance(metadata, dict) or not isinstance(metrics, dict):
            raise ManifestError("'metadata' and 'metrics' must be objects")
        return cls(
            name=data["name"],
            version=data["version"],
            created=data["created"],
            task=data["task"],
            framework=data.get("framework", "transformers"),
            files=entries,
            parent=data.get("parent"),
            metadata=metadata,
            metrics=metrics,
        )

    @classmethod
    def from_json(cls, raw: bytes, where: str) -> Manifest:
        """Parse manifest bytes read from ``where`` (named in any error)."""
        try:
            data = json.loads(raw)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ManifestError(f"corrupted manifest {where}: not valid JSON ({exc})") from exc
        try:
            return cls.from_dict(data)
        except ManifestError as exc:
            raise ManifestError(f"corrupted manifest {where}: {exc}") from exc


def _check_int(what: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ManifestError(f"bad {what} {value!r}: want an integer >= 1")


def _check_created(created: Any) -> None:
    try:
        ok = isinstance(created, str) and datetime.fromisoformat(created).tzinfo is not None
    except ValueError:
        ok = False
    if not ok:
        raise ManifestError(f"bad created time {created!r}: want ISO-8601 with a UTC offset")


def read_manifest_file(path: str | Path) -> Manifest:
    """Read and validate a MANIFEST.json on local disk."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except FileNotFoundError as exc:
        raise RegistryError(f"no manifest at {path}") from exc
    except OSError as exc:
        raise RegistryError(f"cannot read {path}: {exc.strerror or exc}") from exc
    return Manifest.from_json(raw, str(path))
