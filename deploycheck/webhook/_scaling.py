"""Replicas, concurrency, logger and autoscaler settings of one component, as KServe's
validating webhook judges them.

Ported from KServe aaac4e294: ``pkg/apis/serving/v1beta1/component.go``
(``ComponentExtensionSpec.Validate``) and ``inference_service_validation.go``
(``validateAutoScalingCompExtension`` and the HPA, KEDA and KPA checks it picks).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from deploycheck._problems import Finding, JsonPath
from deploycheck.webhook._component import (
    AUTOSCALER_CLASS,
    DEPLOYMENT_MODE,
    KNATIVE_CLASS,
    KNATIVE_HPA,
    as_int,
    as_list,
    as_map,
    quantity,
)

_UTILIZATION = "the target utilization percentage should be a [1-100] integer"
_QUERY_EMPTY = "the query should not be empty"
_THRESHOLD_EMPTY = "the target threshold value should not be empty"


def validate_extension(spec: Mapping[str, Any], path: JsonPath) -> list[Finding]:
    """component.go ComponentExtensionSpec.Validate: validateContainerConcurrency,
    validateReplicas (minReplicas defaults to 1), validateLogger."""
    out: list[Finding] = []
    concurrency = as_int(spec.get("containerConcurrency"))
    if concurrency is not None and concurrency < 0:
        out.append(Finding((*path, "containerConcurrency"), "parallelism cannot be less than 0"))
    raw_min = as_int(spec.get("minReplicas"))
    min_replicas = 1 if raw_min is None else raw_min
    max_replicas = as_int(spec.get("maxReplicas")) or 0
    if min_replicas < 0:
        out.append(Finding((*path, "minReplicas"), "'MinReplicas' cannot be less than 0"))
    elif max_replicas < 0:
        out.append(Finding((*path, "maxReplicas"), "'MaxReplicas' cannot be less than 0"))
    elif min_replicas > max_replicas and max_replicas != 0:
        out.append(
            Finding((*path, "minReplicas"), "'MinReplicas' cannot be greater than MaxReplicas")
        )
    logger = spec.get("logger")
    if logger is not None:
        logger = as_map(logger)
        storage = logger.get("storage")
        if logger.get("mode") not in ("all", "request", "response"):
            out.append(Finding((*path, "logger", "mode"), "invalid logger type"))
        elif storage is not None and any(
            as_map(storage).get(key) is None for key in ("path", "parameters", "key")
        ):
            out.append(
                Finding((*path, "logger", "storage"), "invalid logger storage configuration")
            )
    return out


def validate_autoscaling(
    annotations: Mapping[str, Any], spec: Mapping[str, Any], path: JsonPath
) -> list[Finding]:
    """validateAutoScalingCompExtension: in mode exactly "Standard", HPA or KEDA rules by
    the autoscalerClass annotation (none for other classes); in every other mode (unset,
    RawDeployment included) KPA rules, or HPA ones under Knative's HPA class."""
    if annotations.get(DEPLOYMENT_MODE) == "Standard":
        autoscaler = annotations.get(AUTOSCALER_CLASS)
        if autoscaler == "hpa":
            return validate_hpa(spec, path)
        if autoscaler == "keda":
            return validate_keda(spec, path)
        return []
    if annotations.get(KNATIVE_CLASS) == KNATIVE_HPA:
        return validate_hpa(spec, path)
    return validate_kpa(spec, path)


def validate_hpa(spec: Mapping[str, Any], path: JsonPath) -> list[Finding]:
    """validateScalingHPACompExtension (with validateHPAMetrics)."""
    metric = spec.get("scaleMetric") or "cpu"
    if metric not in ("cpu", "memory"):
        return [Finding((*path, "scaleMetric"), f"[{metric}] is not a supported metric")]
    out: list[Finding] = []
    target = as_int(spec.get("scaleTarget"))
    if target is not None:
        # Upstream's `metric == cpu && target < 1 || target > 100`: over 100 is refused
        # for memory too, with the utilization message.
        if (metric == "cpu" and target < 1) or target > 100:
            out.append(Finding((*path, "scaleTarget"), _UTILIZATION))
        elif metric == "memory" and target < 1:
            out.append(
                Finding((*path, "scaleTarget"), "the target memory should be greater than 1 MiB")
            )
    for index, item in enumerate(as_list(as_map(spec.get("autoScaling")).get("metrics"))):
        item = as_map(item)
        where: JsonPath = (*path, "autoScaling", "metrics", index)
        kind = item.get("type")
        if kind != "Resource":
            out.append(
                Finding(
                    (*where, "type"),
                    f"invalid HPA metric source type with value [{kind or ''}],"
                    "valid metric source types are Resource",
                )
            )
        elif item.get("resource") is None:
            out.append(
                Finding(where, "metricSpec.Resource is not set for resource metric source type")
            )
    return out


def validate_keda(spec: Mapping[str, Any], path: JsonPath) -> list[Finding]:
    """validateScalingKedaCompExtension."""
    out: list[Finding] = []
    if spec.get("scaleMetric") is not None:
        out.append(Finding((*path, "scaleMetric"), "ScaleMetric is not supported for KEDA"))
    for index, item in enumerate(as_list(as_map(spec.get("autoScaling")).get("metrics"))):
        out += _keda_metric(as_map(item), (*path, "autoScaling", "metrics", index))
    return out


def _keda_metric(item: Mapping[str, Any], where: JsonPath) -> list[Finding]:
    kind = item.get("type")
    if kind == "Resource":
        return _keda_resource(item.get("resource"), where)
    if kind in ("External", "PodMetric"):
        key, noun = ("external", "external") if kind == "External" else ("podmetric", "pod")
        source = item.get(key)
        if source is None:
            message = f"metricSpec.{kind} is not set for {noun} metric source type"
            return [Finding(where, message)]
        source = as_map(source)
        target = as_map(source.get("target"))
        if not as_map(source.get("metric")).get("query"):
            return [Finding((*where, key, "metric", "query"), _QUERY_EMPTY)]
        if target.get("value") is None:
            return [Finding((*where, key, "target", "value"), _THRESHOLD_EMPTY)]
        return _scale_target(target, (*where, key, "target"))
    return [
        Finding(
            (*where, "type"),
            f"unknown KEDA metric type with value [{kind or ''}]."
            "Valid types are Resource,External,PodMetric",
        )
    ]


def _keda_resource(resource: Any, where: JsonPath) -> list[Finding]:
    if resource is None:
        return [Finding(where, "metricSpec.Resource is not set for resource metric source type")]
    resource = as_map(resource)
    target = as_map(resource.get("target"))
    at: JsonPath = (*where, "resource")
    name, kind = resource.get("name"), target.get("type")
    if name == "cpu":
        if kind != "Utilization":
            return [
                Finding((*at, "target", "type"), "the cpu target value type should be Utilization")
            ]
    elif name == "memory":
        if kind not in ("AverageValue", "Utilization"):
            return [
                Finding(
                    (*at, "target", "type"),
                    "the memory target value type should be AverageValue or Utilization",
                )
            ]
        if kind == "AverageValue" and quantity(target.get("averageValue")) < 1024**2:
            return [
                Finding(
                    (*at, "target", "averageValue"),
                    "the memory target value should be greater than 1 MiB",
                )
            ]
    else:
        return [Finding((*at, "name"), f"resource type {name or ''} is not supported")]
    return _scale_target(target, (*at, "target"))


def _scale_target(target: Mapping[str, Any], where: JsonPath) -> list[Finding]:
    """validateScaleTarget (with validateTargetUtilization)."""
    kind = target.get("type")
    if kind == "Utilization":
        utilization = as_int(target.get("averageUtilization"))
        if target.get("averageUtilization") is None:
            return [Finding(where, "the AverageUtilization type should be set")]
        if utilization is not None and not 1 <= utilization <= 100:
            return [Finding((*where, "averageUtilization"), _UTILIZATION)]
    elif kind == "AverageValue" and target.get("averageValue") is None:
        return [Finding(where, "the AverageValue type should be set")]
    elif kind == "Value" and target.get("value") is None:
        return [Finding(where, "the Value type should be set")]
    return []


def validate_kpa(spec: Mapping[str, Any], path: JsonPath) -> list[Finding]:
    """validateScalingKPACompExtension (with validateKPAMetrics)."""
    if spec.get("deploymentStrategy") is not None:
        return [
            Finding(
                (*path, "deploymentStrategy"),
                "customizing deploymentStrategy is only supported for raw deployment mode",
            )
        ]
    metric = spec.get("scaleMetric") or "concurrency"
    if metric not in ("concurrency", "rps"):
        return [Finding((*path, "scaleMetric"), f"[{metric}] is not a supported metric")]
    target = as_int(spec.get("scaleTarget"))
    if metric == "rps" and target is not None and target < 1:
        return [Finding((*path, "scaleTarget"), "the target for rps should be greater than 1")]
    return []
