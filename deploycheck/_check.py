"""The checker: collect documents from files, folders and kustomizations, validate each
against its schema (CRD or built-in), then apply the semantic rules and, to each
InferenceService and TrainedModel, KServe's validating webhook for it (``webhook``,
``webhook._trainedmodel``). The CRDs come from a folder or from the cluster
(:func:`find_crds`)."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from deploycheck import _kustomize, _locate
from deploycheck._cluster import kubeconfig_paths, read_cluster_crds
from deploycheck._core import CoreSchemas
from deploycheck._crds import CrdIndex
from deploycheck._errors import DeployError, KustomizeError
from deploycheck._openapi import StructuralValidator, type_name
from deploycheck._problems import Finding, Problem
from deploycheck._rbac import check_role, is_rollout_role
from deploycheck._rules import RULES
from deploycheck._yaml import YamlDocumentError, load_documents
from deploycheck.webhook import RULE as WEBHOOK_RULE
from deploycheck.webhook import (
    is_inference_service,
    is_trained_model,
    trainedmodel_findings,
    webhook_findings,
)

DEFAULT_KUBE_VERSION = "1.33"
YAML_SUFFIXES = (".yaml", ".yml")


@dataclass(frozen=True)
class CheckConfig:
    """What to check against: the CRD folder (None: the ``CrdIndex`` given to the
    ``Checker``, see :func:`find_crds`), the Kubernetes release for built-in kinds, and
    the rollout source the rollout Role is compared with (None: not available)."""

    crds_dir: Path | None = None
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


def find_crds(
    explicit: Path | None = None, kubeconfig: str | None = None, context: str | None = None
) -> CrdIndex:
    """The CRDs to validate against, first found: the folder ``explicit`` (--crds) or
    $MODELCTL_CRDS_DIR (offline); the cluster of ``kubeconfig``/``context`` (or of
    $KUBECONFIG, ~/.kube/config when one exists); ``.modelctl/crds`` in a checkout
    (``make setup`` gathers them). Otherwise a ``DeployError`` naming all three."""
    if explicit is not None or os.environ.get(_locate.CRDS_ENV):
        return load_crds(_locate.find_crds_dir(explicit).resolve())
    if kubeconfig is not None or context is not None or kubeconfig_paths(None):
        return read_cluster_crds(kubeconfig, context)
    beside = _locate.checkout_crds_dir()
    if _locate.has_crd_files(beside):
        return load_crds(beside.resolve())
    raise DeployError(
        "no CRD schemas to validate against: pass --crds DIR (or set "
        f"${_locate.CRDS_ENV}) for a folder of CustomResourceDefinition YAML, --kubeconfig "
        "FILE / --context NAME (or $KUBECONFIG, ~/.kube/config) to read a cluster's, or run "
        f"`make setup` in a checkout, which fills {beside}"
    )


class Checker:
    """Validates documents; build one per configuration and reuse it."""

    def __init__(
        self, config: CheckConfig, *, kubectl: str | None = None, crds: CrdIndex | None = None
    ) -> None:
        self.config = config
        if crds is None:
            if config.crds_dir is None:
                raise DeployError("no CRDs to check against: give a folder or an index")
            crds = load_crds(config.crds_dir.resolve())
        self.crds = crds
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
            elif _kustomize.is_component(path):
                continue
            elif _kustomize.is_kustomization(path):
                try:
                    yield str(path), _kustomize.build(path, self.kubectl)
                except KustomizeError as exc:
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
                    Problem(source, index, f.path, f.message, f.rule)
                    for f in self.check_document(doc)
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
        if is_inference_service(doc):
            findings.extend(Finding(f.path, f.message, WEBHOOK_RULE) for f in webhook_findings(doc))
        if is_trained_model(doc):
            findings.extend(
                Finding(f.path, f.message, WEBHOOK_RULE) for f in trainedmodel_findings(doc)
            )
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
                f"Kubernetes {self.config.kube_version} and {self.crds.source.lacks()}",
            )
        ]
