"""What KServe derives from an InferenceService's predictor before it writes anything.

Ported from kserve aaac4e294 ``pkg/controller/v1beta1/inferenceservice/components/predictor.go``
(``buildPredictorResources``, ``buildObjectMeta``, ``canaryReplicaCount``,
``adjustStableMinReplicasForCanaries``, ``buildCanaryPredictor``) and
``pkg/apis/serving/v1beta1/predictor.go`` (``GetImplementations``).

The pod spec is a stand-in. KServe builds it by merging the ServingRuntime's containers
with the predictor (``MergeServingRuntimeAndInferenceServiceSpecs``); the stand-in has no
ServingRuntimes, so :func:`pod_spec` is a deterministic rendering of exactly the predictor
fields that feed that merge: the PodSpec fields inlined in the predictor and the
implementation block (``model``, ``sklearn``...) minus ``storageUri``/``storage``, which
KServe moves into the ``storage-initializer-sourceuri`` annotation instead. The
ComponentExtensionSpec fields (replicas, autoscaling, timeout, canaryTrafficPercent,
labels, annotations...) never reach the pod spec, as upstream.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tests.support.kserve import config as c

# pkg/apis/serving/v1beta1/component.go ComponentExtensionSpec (json names).
EXTENSION_FIELDS = frozenset({
    "minReplicas", "maxReplicas", "scaleTarget", "scaleMetric", "scaleMetricType", "autoScaling",
    "containerConcurrency", "timeout", "canaryTrafficPercent", "logger", "batcher", "labels",
    "annotations", "deploymentStrategy"})
# PredictorSpec.GetImplementations order (predictor.go).
FRAMEWORKS = ("xgboost", "pytorch", "triton", "sklearn", "tensorflow", "onnx", "pmml",
              "lightgbm", "paddle", "huggingface", "model")
_NOT_POD_SPEC = EXTENSION_FIELDS | {"name", "storageUris", "storageContainerName",
                                    "workerSpec", *FRAMEWORKS}
# The key under which the stand-in pod spec carries the implementation block.
RUNTIME_STANDIN_KEY = "x-kserve-sim-predictor"


@dataclass
class PredictorResources:
    """``predictorResources``: the ObjectMeta and pod spec for one predictor."""

    name: str
    namespace: str
    labels: dict[str, str]
    annotations: dict[str, str]
    pod_spec: dict[str, Any]


def metadata(obj: Mapping[str, Any]) -> dict[str, Any]:
    return dict(obj.get("metadata") or {})


def predictor_of(isvc: Mapping[str, Any]) -> dict[str, Any]:
    return dict((isvc.get("spec") or {}).get("predictor") or {})


def implementation(predictor: Mapping[str, Any]) -> tuple[str, dict[str, Any]] | None:
    """``GetImplementation``: the first framework block, else the custom predictor."""
    for framework in FRAMEWORKS:
        if predictor.get(framework) is not None:
            return framework, dict(predictor[framework])
    if predictor.get("containers"):
        return "custom", {}
    return None


def storage_uri(predictor: Mapping[str, Any]) -> str | None:
    """``GetStorageUri`` of the implementation (``CustomPredictor``: the STORAGE_URI env)."""
    found = implementation(predictor)
    if found is None:
        return None
    framework, block = found
    if framework != "custom":
        uri = block.get("storageUri")
        return str(uri) if uri is not None else None
    containers = predictor.get("containers") or []
    for container in containers:
        if container.get("name") == c.CONTAINER_NAME:
            for env in container.get("env") or []:
                if env.get("name") == c.CUSTOM_STORAGE_URI_ENV:
                    return str(env.get("value"))
            break
    return None


def _filtered(values: Mapping[str, Any] | None, disallowed: tuple[str, ...]) -> dict[str, str]:
    """pkg/utils ``Filter`` with ``!Includes(disallowed, key)``."""
    return {k: v for k, v in (values or {}).items() if k not in disallowed}


def pod_spec(isvc_name: str, predictor: Mapping[str, Any]) -> dict[str, Any]:
    """The stand-in for the merged pod spec (see the module docstring), with the
    ``INFERENCE_SERVICE_NAME`` env that ``buildPredictorResources`` adds to every container."""
    spec = {k: copy.deepcopy(v) for k, v in predictor.items() if k not in _NOT_POD_SPEC}
    found = implementation(predictor)
    containers = [dict(x) for x in spec.get("containers") or []]
    if found is not None and found[0] != "custom":
        framework, block = found
        # The block's inline Container is merged into the runtime's kserve-container
        # (MergeContainerWithPatch): its name names the container, kserve-container if unset.
        name = block.get("name") or c.CONTAINER_NAME
        runtime = {k: v for k, v in block.items() if k not in ("storageUri", "storage", "name")}
        spec[RUNTIME_STANDIN_KEY] = {framework: runtime}
        if not containers:
            containers = [{"name": name}]
        else:
            containers[0] = {**containers[0], "name": name}
    for container in containers:
        env = [e for e in container.get("env") or [] if e.get("name") != c.ISVC_NAME_ENV]
        container["env"] = [*env, {"name": c.ISVC_NAME_ENV, "value": isvc_name}]
    spec["containers"] = containers
    return spec


def build_predictor_resources(isvc: Mapping[str, Any], predictor: Mapping[str, Any],
                              config: c.KServeConfig) -> PredictorResources:
    """``buildPredictorResources`` + ``buildObjectMeta`` for ``predictor`` (the stable one,
    or a canary's merged spec, as ``reconcileCanaryDeployments`` passes it)."""
    meta = metadata(isvc)
    annotations = _filtered(meta.get("annotations"), config.disallowed_annotations)
    uri = storage_uri(predictor)
    if uri is not None:  # addStorageInitializerAnnotations
        annotations[c.STORAGE_URI_ANNOTATION] = uri
    predictor_annotations = _filtered(predictor.get("annotations"), config.disallowed_annotations)
    labels = {**(meta.get("labels") or {}), **(predictor.get("labels") or {}),
              c.ISVC_LABEL: meta["name"], c.COMPONENT_LABEL: c.PREDICTOR}
    return PredictorResources(
        name=c.predictor_service_name(meta["name"], predictor.get("name")),
        namespace=meta.get("namespace", ""),
        labels=labels,
        annotations={**annotations, **predictor_annotations},
        pod_spec=pod_spec(meta["name"], predictor),
    )


def canary_replica_count(isvc: Mapping[str, Any], canary: Mapping[str, Any]) -> int:
    """``canaryReplicaCount``: the canary's own minReplicas, else
    ceil(stable minReplicas (default 1) * trafficPercent / 100)."""
    own = (canary.get("predictor") or {}).get("minReplicas")
    if own is not None:
        return int(own)
    stable = predictor_of(isvc).get("minReplicas")
    stable_replicas = int(stable) if stable is not None else 1
    return math.ceil(stable_replicas * int(canary.get("trafficPercent") or 0) / 100)


def adjust_stable_min_replicas(isvc: Mapping[str, Any], min_replicas: int | None) -> int | None:
    """``adjustStableMinReplicasForCanaries``: minus the replicas of the canaries that
    ``status.canaryStatuses`` reports Ready, never below 1."""
    canaries = (isvc.get("spec") or {}).get("canary") or []
    if not canaries or min_replicas is None:
        return min_replicas
    ready = {s.get("name"): bool(s.get("ready"))
             for s in (isvc.get("status") or {}).get("canaryStatuses") or []}
    ready_replicas = sum(canary_replica_count(isvc, canary) for canary in canaries
                         if ready.get((canary.get("predictor") or {}).get("name")))
    if ready_replicas > 0:
        return max(min_replicas - ready_replicas, 1)
    return min_replicas


def _empty(value: Any) -> bool:
    """mergo's ``isEmptyValue`` in JSON terms."""
    return value is None or value == "" or value is False or value == 0 or value in ({}, [])


def mergo_override(dst: Any, src: Any) -> Any:
    """``mergo.Merge(&dst, src, mergo.WithOverride)`` on JSON: objects merge key by key,
    a non-empty source value overrides, an empty one keeps the destination, a non-empty
    list replaces the destination list (no WithAppendSlice), an absent key is taken."""
    if isinstance(dst, Mapping) and isinstance(src, Mapping):
        out = dict(dst)
        for key, value in src.items():
            out[key] = mergo_override(dst[key], value) if key in dst else copy.deepcopy(value)
        return out
    if isinstance(src, list):
        return copy.deepcopy(src) if src else dst
    return dst if _empty(src) else src


def build_canary_predictor(stable: Mapping[str, Any], canary: Mapping[str, Any],
                           replicas: int) -> dict[str, Any]:
    """``buildCanaryPredictor``: the canary's predictor merged over the stable one, its
    autoscaling fields cleared and minReplicas fixed to ``replicas``."""
    merged = mergo_override(copy.deepcopy(dict(stable)), canary.get("predictor") or {})
    for key in ("maxReplicas", "scaleTarget", "scaleMetric", "autoScaling"):
        merged.pop(key, None)
    merged["minReplicas"] = replicas
    return dict(merged)
