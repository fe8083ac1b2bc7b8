"""CustomResourceDefinitions, indexed by (apiVersion, kind): from a folder of upstream
YAML, or as a cluster serves them (``_cluster``)."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from deploycheck._errors import DeployError
from deploycheck._yaml import fast_load_all


@dataclass(frozen=True)
class CrdVersion:
    """One served version of one CRD: the schema a document of that apiVersion meets."""

    group: str
    version: str
    kind: str
    plural: str
    namespaced: bool
    served: bool
    schema: Mapping[str, Any]
    source: Path | str

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}"


@dataclass(frozen=True)
class CrdSource:
    """Where an index's definitions came from: a ``folder`` or a ``cluster`` (its API
    server's URL), and how many CustomResourceDefinitions it held."""

    kind: str
    location: str
    definitions: int

    def describe(self) -> str:
        """``CRDs: cluster https://… (37 definitions)``, ``CRDs: folder … (25 definitions)``."""
        return f"CRDs: {self.kind} {self.location} ({self.definitions} definitions)"

    def lacks(self) -> str:
        """How to say a kind has no CRD here."""
        if self.kind == "cluster":
            return f"no CRD for it in the cluster at {self.location}"
        return f"no CRD under {self.location}"

    def to_dict(self) -> dict[str, object]:
        return {"source": self.kind, "location": self.location, "definitions": self.definitions}


class CrdIndex:
    """Every CRD of one source; build once and share (parsing a folder takes a second)."""

    def __init__(
        self, versions: Mapping[tuple[str, str], CrdVersion], root: Path, source: CrdSource
    ) -> None:
        self._versions = dict(versions)
        self.root = root
        self.source = source

    @classmethod
    def from_documents(
        cls, docs: list[Any], source: CrdSource, origin: Path | str | None = None
    ) -> CrdIndex:
        """The CustomResourceDefinition documents among ``docs`` (others are ignored)."""
        versions: dict[tuple[str, str], CrdVersion] = {}
        for doc in docs:
            if isinstance(doc, dict) and doc.get("kind") == "CustomResourceDefinition":
                for crd_version in _versions_of(doc, origin or source.location):
                    versions[(crd_version.api_version, crd_version.kind)] = crd_version
        return cls(versions, Path(source.location), source)

    @classmethod
    def load(cls, root: Path, cache_dir: Path | None = None) -> CrdIndex:
        """Every CRD under ``root``; with ``cache_dir``, parsed YAML is kept there as JSON
        keyed by the file's sha256 (the InferenceService CRD alone takes over a second
        to parse as YAML, a hundredth of that as JSON)."""
        versions: dict[tuple[str, str], CrdVersion] = {}
        definitions = 0
        for path in sorted(root.rglob("*.yaml")):
            for doc in _load_file(path, cache_dir):
                if isinstance(doc, dict) and doc.get("kind") == "CustomResourceDefinition":
                    definitions += 1
                    for crd_version in _versions_of(doc, path):
                        versions[(crd_version.api_version, crd_version.kind)] = crd_version
        if not versions:
            raise DeployError(f"no CustomResourceDefinition documents under {root}")
        return cls(versions, root, CrdSource("folder", str(root), definitions))

    def lookup(self, api_version: str, kind: str) -> CrdVersion | None:
        return self._versions.get((api_version, kind))

    def versions_of_kind(self, group: str, kind: str) -> list[str]:
        """The versions a CRD defines for ``kind`` in ``group`` (to explain a miss)."""
        return sorted(
            v.version for v in self._versions.values() if v.group == group and v.kind == kind
        )

    def __len__(self) -> int:
        return len(self._versions)


def load_file(path: Path, cache_dir: Path | None) -> list[Any]:
    """The YAML documents of one file, through the JSON cache in ``cache_dir``."""
    return _load_file(path, cache_dir)


def _load_file(path: Path, cache_dir: Path | None) -> list[Any]:
    data = path.read_bytes()
    cached = cache_dir / f"{hashlib.sha256(data).hexdigest()}.json" if cache_dir else None
    if cached is not None:
        try:
            loaded = json.loads(cached.read_text())
            if isinstance(loaded, list):
                return loaded
        except (OSError, ValueError):
            pass  # absent or torn: parse again
    try:
        docs = fast_load_all(data.decode())
    except Exception as exc:  # any parse failure reads the same to the user
        raise DeployError(f"cannot parse CRD file {path}: {exc}") from exc
    if cached is not None:
        try:
            cached.parent.mkdir(parents=True, exist_ok=True)
            partial = cached.with_suffix(f".{os.getpid()}.tmp")
            partial.write_text(json.dumps(docs, default=str))
            os.replace(partial, cached)
        except OSError:
            pass  # a cache we cannot write only costs time
    return docs


def _versions_of(crd: Mapping[str, Any], path: Path | str) -> list[CrdVersion]:
    spec = crd.get("spec") or {}
    names = spec.get("names") or {}
    out = []
    for entry in spec.get("versions") or []:
        schema = ((entry.get("schema") or {}).get("openAPIV3Schema")) or {}
        out.append(
            CrdVersion(
                group=str(spec.get("group", "")),
                version=str(entry.get("name", "")),
                kind=str(names.get("kind", "")),
                plural=str(names.get("plural", "")),
                namespaced=spec.get("scope", "Namespaced") == "Namespaced",
                served=bool(entry.get("served", True)),
                schema=schema,
                source=path,
            )
        )
    return out
