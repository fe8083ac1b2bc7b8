"""Standard mode's ``spec.canary[]`` as KServe's validating webhook judges it.

Ported from KServe aaac4e294, ``pkg/apis/serving/v1beta1/inference_service_validation.go``
``validateCanarySpecs``. What a canary entry then runs (the entry merged over the stable
predictor) is ``_canary``'s.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from deploycheck._problems import Finding, JsonPath
from deploycheck.webhook._component import (
    DEPLOYMENT_MODE,
    as_int,
    as_list,
    as_map,
    go_quote,
    implementations,
    storage_uri,
    validate_exactly_one,
    validate_implementation,
)
from deploycheck.webhook._scaling import validate_extension


def validate_canary_specs(isvc: Mapping[str, Any]) -> list[Finding]:
    """validateCanarySpecs: Standard mode only (the exact annotation value), a stable
    predictor with a model, each canary named (uniquely, not as the stable), 0..100 percent
    each and at most 100 in all, one valid implementation, and fixed replicas: no
    workerSpec, maxReplicas, scaleTarget, scaleMetric or autoScaling, and minReplicas no
    more than the stable's (default 1)."""
    spec = as_map(isvc.get("spec"))
    canaries = as_list(spec.get("canary"))
    if not canaries:
        return []
    out: list[Finding] = []
    annotations = as_map(as_map(isvc.get("metadata")).get("annotations"))
    if annotations.get(DEPLOYMENT_MODE) != "Standard":
        out.append(
            Finding(("spec", "canary"), "canary is only supported in Standard deployment mode")
        )
    stable = as_map(spec.get("predictor"))
    found = implementations("predictor", stable)
    if (not found or storage_uri("predictor", stable, found[0]) is None) and stable.get(
        "model"
    ) is None:
        out.append(
            Finding(
                ("spec", "predictor"),
                "canary requires a stable predictor with a model (multi-model serving is not "
                "supported with canary)",
            )
        )
    names: set[str] = set()
    total = 0
    for index, canary in enumerate(canaries):
        canary = as_map(canary)
        out += _canary(index, canary, stable, names)
        total += as_int(canary.get("trafficPercent")) or 0
    if total > 100:
        out.append(
            Finding(
                ("spec", "canary"),
                f"sum of canary trafficPercent values ({total}) must be <= 100",
            )
        )
    return out


_FIXED = ("maxReplicas", "scaleTarget", "scaleMetric", "autoScaling")


def _canary(
    index: int, canary: Mapping[str, Any], stable: Mapping[str, Any], names: set[str]
) -> list[Finding]:
    predictor = as_map(canary.get("predictor"))
    path: JsonPath = ("spec", "canary", index, "predictor")
    name = str(predictor.get("name") or "")
    quoted = go_quote(name)
    if not name:
        return [Finding((*path, "name"), f"canary[{index}] predictor.name is required")]
    if name in names:
        return [Finding((*path, "name"), f"canary predictor.name {quoted} is duplicated")]
    names.add(name)
    out: list[Finding] = []
    if name == str(stable.get("name") or ""):
        out.append(
            Finding(
                (*path, "name"),
                f"canary predictor.name {quoted} conflicts with stable predictor name",
            )
        )
    percent = as_int(canary.get("trafficPercent")) or 0
    if not 0 <= percent <= 100:
        out.append(
            Finding(
                ("spec", "canary", index, "trafficPercent"),
                f"canary {quoted} trafficPercent must be between 0 and 100, got {percent}",
            )
        )
    inner = validate_exactly_one("predictor", predictor, path)
    if not inner:
        inner = validate_implementation("predictor", predictor, path)
    inner += validate_extension(predictor, path)
    out += [Finding(f.path, f"canary {quoted} predictor: {f.message}") for f in inner]
    if predictor.get("workerSpec") is not None:
        out.append(
            Finding(
                (*path, "workerSpec"),
                f"canary {quoted} must not set workerSpec (multi-node is not yet supported "
                "for canary)",
            )
        )
    for key in _FIXED:
        value = predictor.get(key)
        if value is not None and not (key == "maxReplicas" and (as_int(value) or 0) <= 0):
            out.append(
                Finding(
                    (*path, key), f"canary {quoted} must not set {key} (canary uses fixed replicas)"
                )
            )
    out += _canary_min_replicas(quoted, predictor, stable, path)
    return out


def _canary_min_replicas(
    quoted: str, predictor: Mapping[str, Any], stable: Mapping[str, Any], path: JsonPath
) -> list[Finding]:
    own = as_int(predictor.get("minReplicas"))
    if own is None:
        return []
    raw = as_int(stable.get("minReplicas"))
    stable_min = 1 if raw is None else raw
    if own <= stable_min:
        return []
    return [
        Finding(
            (*path, "minReplicas"),
            f"canary {quoted} minReplicas ({own}) must not exceed stable predictor "
            f"minReplicas ({stable_min})",
        )
    ]
