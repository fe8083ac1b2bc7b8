"""Built-in Kubernetes kinds (and every object's metadata) against the strict JSON schemas
that the ``kubernetes-validate`` package ships for each Kubernetes release.

"Strict" schemas forbid fields the API does not declare, as the API server's strict
field validation does. We iterate over every error instead of stopping at the first.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

import jsonschema
from kubernetes_validate import utils as kv_utils
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

from deploycheck._errors import DeployError
from deploycheck._problems import Finding, JsonPath

OBJECT_META = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
_MAX_MESSAGE = 200


def _schema_dir(kube_version: str) -> str:
    """The strict schema folder for the newest release not newer than ``kube_version``."""
    wanted = kube_version.removeprefix("v")
    if not re.fullmatch(r"\d+\.\d+(\.\d+)?", wanted):
        raise DeployError(f"Kubernetes version {kube_version!r} is not like 1.33")

    def minor(text: str) -> tuple[int, int]:
        major, minor_, *_ = text.split(".")
        return int(major), int(minor_)

    available = sorted({v for v in kv_utils.all_versions()}, key=minor)
    usable = [v for v in available if minor(v) <= minor(wanted)]
    if not usable or minor(wanted) > minor(available[-1]):
        raise DeployError(
            f"kubernetes-validate has no schemas for Kubernetes {wanted} "
            f"(it has {available[0]} to {available[-1]})"
        )
    return f"v{usable[-1]}-local-strict"


class CoreSchemas:
    """Validators for one Kubernetes version, built lazily per kind and cached."""

    def __init__(self, kube_version: str) -> None:
        self.kube_version = kube_version
        self._dir = _schema_dir(kube_version)

    def has_kind(self, api_version: str, kind: str) -> bool:
        return _kind_schema(self._dir, api_version, kind) is not None

    def validate(self, doc: Mapping[str, Any]) -> list[Finding]:
        validator = _kind_validator(self._dir, str(doc.get("apiVersion")), str(doc.get("kind")))
        return _run(validator, doc, ())

    def validate_meta(self, meta: Any, path: JsonPath) -> list[Finding]:
        """ObjectMeta rules for a custom resource's metadata (the CRD schema leaves it open)."""
        return _run(_meta_validator(self._dir), meta, path)


_META_ID = "https://kubernetes.io/api/modelctl-objectmeta"


def _schema_file(api_version: str, kind: str) -> str:
    # kubernetes-validate's naming: rbac.authorization.k8s.io/v1 Role -> role-rbac-v1.json
    group_version = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", api_version)
    return f"{kind.lower()}-{group_version}.json"


@lru_cache(maxsize=256)
def _kind_schema(schema_dir: str, api_version: str, kind: str) -> dict[str, Any] | None:
    if not re.fullmatch(r"[A-Za-z0-9]+", kind) or not re.fullmatch(
        r"[a-z0-9.]*/?[a-z0-9]+", api_version
    ):
        return None
    try:
        schema = kv_utils.schema_contents(
            f"kubernetes-json-schema/{schema_dir}/{_schema_file(api_version, kind)}", ""
        )
    except FileNotFoundError:
        return None
    # The file name drops the group's domain (apps/v1 and apps.example.com/v1 collide):
    # only accept a schema whose declared group/version/kind is the document's.
    group, _, version = api_version.rpartition("/")
    for gvk in schema.get("x-kubernetes-group-version-kind") or []:
        if (
            gvk.get("group", "") == group
            and gvk.get("version") == version
            and gvk.get("kind") == kind
        ):
            return dict(schema)
    return None


@lru_cache(maxsize=4)
def _registry(schema_dir: str) -> Registry[Any]:
    definitions = kv_utils.schema_contents(
        f"kubernetes-json-schema/{schema_dir}/_definitions.json", ""
    )
    meta = {"$id": _META_ID, "$ref": f"/api/_definitions.json#/$defs/{OBJECT_META}"}
    registry: Registry[Any] = Registry()
    return registry.with_resources(
        [
            (definitions["$id"], Resource.from_contents(definitions)),
            (_META_ID, Resource.from_contents(meta, default_specification=DRAFT202012)),
        ]
    )


@lru_cache(maxsize=4)
def _meta_validator(schema_dir: str) -> Any:
    registry = _registry(schema_dir)
    return jsonschema.validators.Draft202012Validator(
        registry.contents(_META_ID), registry=registry
    )


@lru_cache(maxsize=256)
def _kind_validator(schema_dir: str, api_version: str, kind: str) -> Any:
    schema = _kind_schema(schema_dir, api_version, kind)
    if schema is None:
        raise DeployError(f"no schema for {api_version} {kind}")
    registry = _registry(schema_dir).with_resource(schema["$id"], Resource.from_contents(schema))
    return jsonschema.validators.Draft202012Validator(schema, registry=registry)


def _run(validator: Any, instance: Any, base: JsonPath) -> list[Finding]:
    out: list[Finding] = []
    for error in validator.iter_errors(instance):
        path: JsonPath = (*base, *error.absolute_path)
        if error.validator == "additionalProperties" and isinstance(error.instance, dict):
            known = set((error.schema or {}).get("properties") or {})
            for key in error.instance:
                if key not in known:
                    out.append(Finding((*path, str(key)), f'unknown field "{key}"'))
            continue
        message = error.message
        if len(message) > _MAX_MESSAGE:
            message = message[: _MAX_MESSAGE - 3] + "..."
        out.append(Finding(path, message))
    return out
