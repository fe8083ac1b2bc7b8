"""KServe's InferenceService validating webhook, ported: what
``inferenceservice.kserve-webhook-server.validator`` would refuse on create and update.

Follows KServe aaac4e294, ``pkg/apis/serving/v1beta1/inference_service_validation.go``
(``ValidateCreate``, ``ValidateUpdate``, ``validateInferenceService`` and what it calls),
with the per-component checks in ``_webhook_component`` and ``_webhook_scaling``, the
storage ones in ``_webhook_storage`` and the canary ones in ``_webhook_canary``. Every
message is KServe's own wording; each check names the Go function it follows.

Where KServe returns its first error, :func:`admit_inferenceservice` returns every
error, in the order KServe evaluates them: ``errors[0]`` is the one KServe answers, the
rest are what it would answer once that one is fixed. A check that cannot run without an
earlier one passing (an implementation's ``Validate`` needs exactly one implementation) is
skipped when that one fails, as it is upstream.

Left out, and why:

- ``validateMultiNodeVariables`` (``workerSpec`` on the stable predictor): multi-node
  serving is not something modelctl's runtime does; the canary's ``workerSpec`` ban is in.
- What needs cluster state or runs elsewhere: the mutating webhook's defaulting (it reads
  the ``inferenceservice-config`` ConfigMap; only the CRD's ``mountPath`` default of
  ``/mnt/models`` is applied here), ServingRuntime selection (the controller lists
  runtimes), storage-container matching (ClusterStorageContainers), and warnings
  (``validateConfidential``'s OCI/PVC ones: the signature returns refusals only).
- ``ValidateDelete``: it refuses nothing.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from deploycheck._problems import Finding, JsonPath
from deploycheck.webhook._canary import validate_canary_specs
from deploycheck.webhook._component import (
    AUTOSCALER_CLASS,
    DEPLOYMENT_MODE,
    MODEL_KEYS,
    SWITCH_ORDER,
    as_list,
    as_map,
    go_quote,
    implementations,
    storage_uri,
    validate_exactly_one,
    validate_implementation,
)
from deploycheck.webhook._scaling import validate_autoscaling, validate_extension
from deploycheck.webhook._storage import (
    validate_collocation_storage_uri,
    validate_confidential,
    validate_multiple_storage_uris,
)

RULE = "kserve-webhook"
ISVC_NAME_FMT = "[a-z]([-a-z0-9]*[a-z0-9])?"  # IsvcNameFmt
_ISVC_NAME = re.compile(f"^{ISVC_NAME_FMT}$")
_AUTOSCALER_CLASSES = ("hpa", "external", "keda", "none")  # AutoscalerAllowedClassList
_BLOCKED_ENV = ("PYTHONPATH",)  # validation.DefaultBlockedEnvVars
_LEGACY_MODES = {"RawDeployment": "Standard", "Serverless": "Knative"}


def is_inference_service(doc: Mapping[str, Any]) -> bool:
    """The objects the webhook is registered for: serving.kserve.io/v1beta1 InferenceService."""
    return doc.get("apiVersion") == "serving.kserve.io/v1beta1" and doc.get("kind") == (
        "InferenceService"
    )


def admit_inferenceservice(
    new: Mapping[str, Any], old: Mapping[str, Any] | None = None
) -> list[str]:
    """The errors KServe's validating webhook answers for creating ``new`` (``old`` None)
    or updating ``old`` to ``new``; empty when it admits the object."""
    return [finding.message for finding in webhook_findings(new, old)]


def webhook_findings(new: Mapping[str, Any], old: Mapping[str, Any] | None = None) -> list[Finding]:
    """:func:`admit_inferenceservice` with the path each error is about."""
    if old is None:
        return validate_inference_service(new)  # ValidateCreate
    if as_map(new.get("metadata")).get("deletionTimestamp") is not None:
        return []  # ValidateUpdate: an object being deleted is always let through
    return [
        *validate_deployment_mode(new, old),
        *validate_predictor_name_change(new, old),
        *validate_inference_service(new),
    ]


def _spec(isvc: Mapping[str, Any]) -> Mapping[str, Any]:
    return as_map(isvc.get("spec"))


def _annotations(isvc: Mapping[str, Any]) -> Mapping[str, Any]:
    return as_map(as_map(isvc.get("metadata")).get("annotations"))


def validate_inference_service(isvc: Mapping[str, Any]) -> list[Finding]:
    """validateInferenceService, check by check in upstream's order."""
    spec = _spec(isvc)
    predictor = as_map(spec.get("predictor"))
    out = [
        *validate_name(isvc),
        *validate_autoscaler_class(isvc),
        *validate_blocked_env_vars(isvc),
        *validate_collocation_storage_uri(predictor),
        *validate_predictor(predictor),
        *validate_multiple_storage_uris(spec),
        *validate_confidential(predictor),
    ]
    annotations = _annotations(isvc)
    for kind in ("predictor", "transformer", "explainer"):
        if kind != "predictor" and spec.get(kind) is None:
            continue  # a nil *TransformerSpec / *ExplainerSpec is skipped
        component, path = as_map(spec.get(kind)), ("spec", kind)
        found = validate_exactly_one(kind, component, path)
        if not found:
            found = validate_implementation(kind, component, path)
        out += found
        out += validate_extension(component, path)
        out += validate_autoscaling(annotations, component, path)
    out += validate_canary_specs(isvc)
    return out


def validate_name(isvc: Mapping[str, Any]) -> list[Finding]:
    """validateInferenceServiceName (InvalidISVCNameFormatError)."""
    name = str(as_map(isvc.get("metadata")).get("name") or "")
    if _ISVC_NAME.match(name):
        return []
    return [
        Finding(
            ("metadata", "name"),
            f'the InferenceService "{name}" is invalid: a InferenceService name must consist '
            "of lower case alphanumeric characters or '-', and must start with alphabetical "
            f'character. (e.g. "my-name" or "abc-123", regex used for validation is '
            f"'{ISVC_NAME_FMT}')",
        )
    ]


def validate_autoscaler_class(isvc: Mapping[str, Any]) -> list[Finding]:
    """validateInferenceServiceAutoscaler: the class annotation, when set, is a known one
    (``kpa`` is not: Knative mode picks its class with Knative's own annotation)."""
    annotations = _annotations(isvc)
    if AUTOSCALER_CLASS not in annotations or annotations[AUTOSCALER_CLASS] in _AUTOSCALER_CLASSES:
        return []
    value = annotations[AUTOSCALER_CLASS]
    return [
        Finding(
            ("metadata", "annotations", AUTOSCALER_CLASS),
            f"[{value}] is not a supported autoscaler class type",
        )
    ]


def _framework(predictor: Mapping[str, Any]) -> str | None:
    return next((key for key in MODEL_KEYS if predictor.get(key) is not None), None)


def _blocked_in(containers: list[tuple[JsonPath, Any]], isvc_name: str) -> list[Finding]:
    """validation.ValidateBlockedEnvVars, one finding per blocked variable."""
    out = []
    for path, container in containers:
        container = as_map(container)
        for index, env in enumerate(as_list(container.get("env"))):
            name = as_map(env).get("name")
            if name in _BLOCKED_ENV:
                out.append(
                    Finding(
                        (*path, "env", index),
                        f"the InferenceService {go_quote(isvc_name)} is invalid: setting {name} "
                        f"in container {go_quote(str(container.get('name') or ''))} is not "
                        "allowed for security reasons",
                    )
                )
    return out


def _pod_containers(pod: Mapping[str, Any], path: JsonPath) -> list[tuple[JsonPath, Any]]:
    return [
        ((*path, key, index), container)
        for key in ("containers", "initContainers")
        for index, container in enumerate(as_list(pod.get(key)))
    ]


def validate_blocked_env_vars(isvc: Mapping[str, Any]) -> list[Finding]:
    """validateBlockedEnvVars: PYTHONPATH in no container of the predictor (its framework
    container, its workerSpec), transformer or explainer (its ART container). Canary
    predictors are not checked upstream."""
    spec = _spec(isvc)
    predictor = as_map(spec.get("predictor"))
    containers = _pod_containers(predictor, ("spec", "predictor"))
    framework = _framework(predictor)
    if framework is not None:
        containers.append((("spec", "predictor", framework), predictor[framework]))
    if predictor.get("workerSpec") is not None:
        containers += _pod_containers(
            as_map(predictor["workerSpec"]), ("spec", "predictor", "workerSpec")
        )
    for kind in ("transformer", "explainer"):
        if spec.get(kind) is not None:
            containers += _pod_containers(as_map(spec[kind]), ("spec", kind))
    explainer = as_map(spec.get("explainer"))
    if explainer.get("art") is not None:
        containers.append((("spec", "explainer", "art"), explainer["art"]))
    name = str(as_map(isvc.get("metadata")).get("name") or "")
    return _blocked_in(containers, name)


def validate_predictor(predictor: Mapping[str, Any]) -> list[Finding]:
    """validatePredictor: the stable predictor's framework/model container has no name
    (the first named one, in upstream's switch order)."""
    for key in SWITCH_ORDER:
        if predictor.get(key) is not None and as_map(predictor[key]).get("name"):
            return [
                Finding(
                    ("spec", "predictor", key, "name"),
                    "the 'name' field is not allowed in standard predictor",
                )
            ]
    return []


# -- updates -------------------------------------------------------------------------------


def validate_deployment_mode(new: Mapping[str, Any], old: Mapping[str, Any]) -> list[Finding]:
    """validateDeploymentMode: the annotation, when set, equals the mode the old object's
    status records (legacy names normalised on the status side only); no status mode yet
    (before the first reconcile) allows anything."""
    recorded = str(as_map(old.get("status")).get("deploymentMode") or "")
    if not recorded:
        return []
    recorded = _LEGACY_MODES.get(recorded, recorded)
    annotations = _annotations(new)
    if DEPLOYMENT_MODE not in annotations or annotations[DEPLOYMENT_MODE] == recorded:
        return []
    return [
        Finding(
            ("metadata", "annotations", DEPLOYMENT_MODE),
            f"update rejected: deploymentMode cannot be changed from '{recorded}' to "
            f"'{annotations[DEPLOYMENT_MODE]}'",
        )
    ]


def _predictor_storage_uri(predictor: Mapping[str, Any]) -> str:
    """getPredictorStorageURI: the model's storageUri, else the implementation's, else ""."""
    model_uri = as_map(predictor.get("model")).get("storageUri")
    if model_uri is not None:
        return str(model_uri)
    found = implementations("predictor", predictor)
    return (storage_uri("predictor", predictor, found[0]) if found else None) or ""


def validate_predictor_name_change(new: Mapping[str, Any], old: Mapping[str, Any]) -> list[Finding]:
    """validatePredictorNameChange: renaming the stable predictor (promoting a canary)
    needs a model change with it."""
    new_predictor = as_map(_spec(new).get("predictor"))
    old_predictor = as_map(_spec(old).get("predictor"))
    if str(new_predictor.get("name") or "") == str(old_predictor.get("name") or ""):
        return []
    if _predictor_storage_uri(new_predictor) != _predictor_storage_uri(old_predictor):
        return []
    return [
        Finding(
            ("spec", "predictor", "name"),
            "predictor.name change requires a model change (e.g. storageUri)",
        )
    ]
