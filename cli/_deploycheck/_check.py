"""The checker: collect documents from files, folders and kustomizations, validate each
against its schema (CRD or built-in), then apply the semantic rules."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from cli._deploycheck import _kustomize, _locate
from cli._deploycheck._core import CoreSchemas
from cli._deploycheck._crds import CrdIndex
from cli._deploycheck._errors import DeployError
from cli._deploycheck._openapi import StructuralValidator, type_name
from cli._deploycheck._problems import Finding, Problem
from cli._deploycheck._rbac import check_role, is_rollout_role
from cli._deploycheck._rules import RULES
from cli._deploycheck._yaml import YamlDocumentError, load_documents

DEFAULT_KUBE_VERSION = "1.33"
YAML_SUFFIXES = (".yaml", ".yml")


@dataclass(frozen=True)
class CheckConfig:
    """What to check against: the CRD folder, the Kubernetes release for built-in kinds,
    and the rollout source the rollout Role is compared with (None: not available)."""

    crds_dir: Path
    kube_version: str = DEFAULT_KUBE_VERSION
    rollout_src: Path | None = None

    def __post_init__(self) -> None:
        if not self.kube_version.removeprefix("v").replace(".", "").isdigit():
            raise DeployError(f"Kubernetes version {self.kube_version!r} is not like 1.33")


@dataclass(frozen=True)
class Report:
    """Every problem found, and how much was looked at."""

    problems: tuple[Problem, ...]
    documents: int
    sources: tuple[str, ...] = field(default_factory=tuple)

    @property
    def ok(self) -> bool:
        return not self.problems


@lru_cache(maxsize=4)
def load_crds(root: Path) -> CrdIndex:
    """Parse a CRD folder once per process (through the on-disk cache)."""
    return CrdIndex.load(root, _locate.cache_dir())


class Checker:
    """Validates documents; build one per configuration and reuse it."""

    def __init__(self, config: CheckConfig, *, kubectl: str | None = None) -> None:
        self.config = config
        self.crds = load_crds(config.crds_dir.resolve())
        self.core = CoreSchemas(config.kube_version)
        self._structural = StructuralValidator(self.core.validate_meta)
        self._kubectl = kubectl

    @property
    def kubectl(self) -> str:
        if self._kubectl is None:
            self._kubectl = _locate.find_kubectl()
        return self._kubectl

    # -- sources ----------------------------------------------------------------------

    def check_paths(self, paths: Sequence[Path]) -> Report:
        problems: list[Problem] = []
        documents = 0
        sources: list[str] = []
        for source, text in self._sources(paths, problems):
            sources.append(source)
            found, count = self.check_text(source, text)
            problems.extend(found)
            documents += count
        return Report(tuple(problems), documents, tuple(sources))

    def _sources(self, paths: Sequence[Path], problems: list[Problem]) -> Iterable[tuple[str, str]]:
        for path in paths:
            if not path.exists():
                raise DeployError(f"{path} does not exist")
            if path.is_file():
                yield str(path), path.read_text()
            elif _kustomize.is_kustomization(path):
                try:
                    yield str(path), _kustomize.build(path, self.kubectl)
                except _kustomize.KustomizeError as exc:
                    problems.append(Problem(str(path), 0, (), f"kustomize failed: {exc.detail}"))
            else:
                children = sorted(p for p in path.iterdir() if not p.name.startswith((".", "__")))
                yield from self._sources(
                    [p for p in children if p.is_dir() or p.suffix in YAML_SUFFIXES], problems
                )

    def check_text(self, source: str, text: str) -> tuple[list[Problem], int]:
        """Problems in one YAML stream, and how many documents it held."""
        problems: list[Problem] = []
        count = 0
        try:
            for index, doc in load_documents(text):
                if doc is None:
                    continue
                count += 1
                problems.extend(
                    Problem(source, index, f.path, f.message) for f in self.check_document(doc)
                )
        except YamlDocumentError as exc:
            problems.append(Problem(source, exc.document, (), f"not valid YAML: {exc}"))
        return problems, count

    # -- one document -----------------------------------------------------------------

    def check_document(self, doc: Any) -> list[Finding]:
        if not isinstance(doc, dict):
            return [Finding((), f"a manifest must be a mapping, not {type_name(doc)}")]
        missing = [key for key in ("apiVersion", "kind") if not isinstance(doc.get(key), str)]
        if missing:
            return [Finding((), f'missing required field "{key}"') for key in missing]
        findings = self._schema_findings(doc)
        for rule in RULES:
            try:
                findings.extend(rule(doc))
            except (AttributeError, TypeError, KeyError):
                continue  # a shape the schema check has already reported
        if is_rollout_role(doc):
            findings.extend(check_role(doc, self.config.rollout_src))
        return findings

    def _schema_findings(self, doc: Mapping[str, Any]) -> list[Finding]:
        api_version, kind = str(doc["apiVersion"]), str(doc["kind"])
        crd = self.crds.lookup(api_version, kind)
        if crd is not None:
            if not crd.served:
                return [
                    Finding(
                        ("apiVersion",),
                        f"{api_version} {kind} is defined but not served by its CRD",
                    )
                ]
            return self._structural.validate_document(doc, crd.schema)
        if self.core.has_kind(api_version, kind):
            return self.core.validate(doc)
        group = api_version.rpartition("/")[0]
        others = self.crds.versions_of_kind(group, kind)
        hint = f" (its CRD defines {', '.join(others)})" if others else ""
        return [
            Finding(
                ("kind",),
                f"no schema for {api_version} {kind}{hint}: not a built-in kind of "
                f"Kubernetes {self.config.kube_version} and no CRD under {self.crds.root}",
            )
        ]
