"""Where an InferenceService's model comes from, as KServe's validating webhook judges
it: storageUris lists, a collocated transformer's STORAGE_URI, confidential serving.

Ported from KServe aaac4e294, ``pkg/apis/serving/v1beta1/inference_service_validation.go``,
with ``pkg/utils/storage.go`` FindCommonParentPath and ``pkg/validation/confidential.go``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from deploycheck._problems import Finding, JsonPath
from deploycheck.webhook._component import (
    STORAGE_URI_ENV,
    SWITCH_ORDER,
    as_list,
    as_map,
    go_quote,
    implementations,
    storage_uri,
)

_TRANSFORMER_CONTAINER = "transformer-container"  # constants.TransformerContainerName
_DEFAULT_MOUNT_PATH = "/mnt/models"  # the CRD's default for storageUris[].mountPath
_KBS_RESOURCE_ID = re.compile(r"^kbs:///[a-zA-Z0-9_.-]+/[a-zA-Z0-9_.-]+/[a-zA-Z0-9_.-]+$")


def validate_collocation_storage_uri(predictor: Mapping[str, Any]) -> list[Finding]:
    """validateCollocationStorageURI: no STORAGE_URI on the first transformer-container."""
    for index, container in enumerate(as_list(predictor.get("containers"))):
        container = as_map(container)
        if container.get("name") != _TRANSFORMER_CONTAINER:
            continue
        for env_index, env in enumerate(as_list(container.get("env"))):
            if as_map(env).get("name") == STORAGE_URI_ENV:
                return [
                    Finding(
                        ("spec", "predictor", "containers", index, "env", env_index),
                        "storage uri should not be specified in transformer container",
                    )
                ]
        break
    return []


def validate_storage_uri_spec(entry: Mapping[str, Any], path: JsonPath) -> list[Finding]:
    """validateStorageURISpec: a URI, and an absolute mount path that is not / nor has ..
    (a missing mountPath is the CRD's default, /mnt/models)."""
    mount = str(entry.get("mountPath", _DEFAULT_MOUNT_PATH) or "")
    if not entry.get("uri"):
        return [Finding((*path, "uri"), "storage URI cannot be empty")]
    if mount == "/":
        return [Finding((*path, "mountPath"), "storage path cannot be empty")]
    if not mount.startswith("/"):
        return [Finding((*path, "mountPath"), f"storage path must be absolute: {mount}")]
    if ".." in mount:
        return [
            Finding(
                (*path, "mountPath"),
                f"storage path cannot contain '..' for security reasons: {mount}",
            )
        ]
    return []


def common_parent_path(paths: list[str]) -> str:
    """utils.FindCommonParentPath, as far as the webhook needs it: "/" when the paths
    share no directory (a path of only slashes shares none: upstream indexes past it)."""
    parts = [p.strip("/").split("/") if p.strip("/") else [] for p in paths]
    if len(paths) == 1:
        return paths[0]
    if not parts or any(not p for p in parts):
        return "/"
    common: list[str] = []
    for level in zip(*parts, strict=False):
        if len(set(level)) != 1:
            break
        common.append(level[0])
    return "/" + "/".join(common) if common else "/"


def validate_multiple_storage_uris_spec(entries: list[Any], path: JsonPath) -> list[Finding]:
    """validateMultipleStorageURIsSpec. Upstream returns before the PVC uniqueness check
    when at most one non-PVC path is listed, so that check only runs beside two others."""
    out: list[Finding] = []
    paths: list[str] = []
    pvc_paths: list[str] = []
    for index, entry in enumerate(entries):
        entry = as_map(entry)
        found = validate_storage_uri_spec(entry, (*path, index))
        out += found
        mount = str(entry.get("mountPath", _DEFAULT_MOUNT_PATH) or "")
        (pvc_paths if str(entry.get("uri", "")).startswith("pvc://") else paths).append(mount)
    if out or len(paths) <= 1:
        return out
    if len(pvc_paths) != len(set(pvc_paths)):
        return [Finding(path, "PVC storage paths must be unique")]
    if common_parent_path(paths) == "/":
        return [
            Finding(
                path,
                f"storage paths must have a common parent directory. Current paths: "
                f"[{' '.join(paths)}] have no common parent beyond root",
            )
        ]
    return []


def validate_multiple_storage_uris(spec: Mapping[str, Any]) -> list[Finding]:
    """validateMultipleStorageURIs: transformer, explainer, then predictor; storageUris
    and an implementation's storageUri not both."""
    out: list[Finding] = []
    for kind in ("transformer", "explainer", "predictor"):
        if kind != "predictor" and spec.get(kind) is None:
            continue
        component, path = as_map(spec.get(kind)), ("spec", kind)
        found = implementations(kind, component)
        uri = storage_uri(kind, component, found[0]) if found else None
        entries = component.get("storageUris")
        if uri is not None and entries is not None:
            out.append(
                Finding(
                    (*path, "storageUris"),
                    "Setting both StorageURI and StorageURIs is not supported.",
                )
            )
            continue
        out += validate_multiple_storage_uris_spec(as_list(entries), (*path, "storageUris"))
    return out


def validate_confidential(predictor: Mapping[str, Any]) -> list[Finding]:
    """validateConfidential with validation.ValidateConfidentialSpec (errors only)."""
    framework = _framework_for_confidential(predictor)
    if framework is None:
        return []
    confidential = as_map(as_map(predictor[framework]).get("confidential"))
    if confidential.get("enabled") is not True:
        return []
    path: JsonPath = ("spec", "predictor", framework)
    found = implementations("predictor", predictor)
    uri = storage_uri("predictor", predictor, found[0]) if found else None
    if not uri:
        return [
            Finding(
                (*path, "storageUri"), "confidential model serving requires storageUri to be set"
            )
        ]
    resource_id = confidential.get("resourceId")
    if resource_id and not _KBS_RESOURCE_ID.match(str(resource_id)):
        return [
            Finding(
                (*path, "confidential", "resourceId"),
                f"spec.predictor.confidential.resourceId: Invalid value: "
                f"{go_quote(str(resource_id))}: must be in the format kbs:///<repo>/<type>/<tag>",
            )
        ]
    return []


def _framework_for_confidential(predictor: Mapping[str, Any]) -> str | None:
    return next((k for k in SWITCH_ORDER if predictor.get(k) is not None), None)
