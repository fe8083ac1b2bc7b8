"""Rules a schema cannot express, each one a plain function of one document.

- ``gpu_request_equals_limit``: an extended GPU resource is requested exactly as limited
  (the scheduler counts requests, the device plugin hands out limits);
- ``canary_matches_mode``: ``canaryTrafficPercent`` only in Knative mode (KServe silently
  ignores it in Standard mode; ``spec.canary`` outside Standard mode is refused by the
  webhook, ``webhook``), and a deployment mode KServe knows;
- ``no_latest_images``: every image names a tag other than ``latest`` or a digest;
- ``containers_have_resources``: requests for cpu and memory and a memory limit;
- ``names_are_dns``: ``metadata.name`` is a DNS-1123 name (InferenceServices: at most 63
  characters, a DNS label; the webhook, ``webhook``, checks the rest of their format);
- ``keda_query_selects_itself``: a KEDA Prometheus query of an InferenceService selects
  that InferenceService (``isvc=``/``namespace=``), not a copy-pasted neighbour;
- ``knative_pod_fields``: in Knative mode (KServe's default) none of the pod fields
  Knative's webhook refuses unless the cluster's config-features enables them
  (``nodeSelector``, ``tolerations``, ``affinity``, a pod-level ``securityContext`` ...:
  ``KNATIVE_GATED_POD_FIELDS``). KServe accepts such an InferenceService, then its
  Knative Service is refused and it never becomes Ready.

The Role rule needs the rollout's source and lives in ``_rbac``; the rules for what
KServe's mutating webhook does to a document (``metric_targets_have_type``) live in
``_defaulter``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping
from decimal import Decimal, InvalidOperation
from typing import Any

from deploycheck._canary import canary_predictor
from deploycheck._defaulter import metric_targets_have_type
from deploycheck._problems import Finding, JsonPath
from deploycheck.webhook._component import MODEL_KEYS

Rule = Callable[[Mapping[str, Any]], list[Finding]]

GPU_RESOURCES = ("nvidia.com/gpu", "amd.com/gpu", "intel.com/gpu", "habana.ai/gaudi")
DEPLOYMENT_MODE = "serving.kserve.io/deploymentMode"
_MODES = {
    "Knative": "Knative",
    "Serverless": "Knative",
    "Standard": "Standard",
    "RawDeployment": "Standard",
    "ModelMesh": "ModelMesh",
}
_COMPONENTS = ("predictor", "transformer", "explainer")
_POD_SPEC_PATHS = {
    "Pod": ("spec",),
    "Job": ("spec", "template", "spec"),
    "Deployment": ("spec", "template", "spec"),
    "StatefulSet": ("spec", "template", "spec"),
    "DaemonSet": ("spec", "template", "spec"),
    "ReplicaSet": ("spec", "template", "spec"),
    "CronJob": ("spec", "jobTemplate", "spec", "template", "spec"),
}
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_SELECTOR = re.compile(r'\b(isvc|namespace)\s*=\s*"([^"]*)"')


def _get(doc: Any, path: JsonPath) -> Any:
    for part in path:
        if isinstance(part, int):
            if not isinstance(doc, list) or part >= len(doc):
                return None
            doc = doc[part]
        else:
            if not isinstance(doc, dict):
                return None
            doc = doc.get(part)
    return doc


def _component_specs(doc: Mapping[str, Any]) -> Iterator[tuple[JsonPath, dict[str, Any]]]:
    """Every predictor/transformer/explainer spec of an InferenceService, and each canary
    entry's predictor as KServe runs it (merged over the stable one, ``_canary``)."""
    raw = doc.get("spec")
    spec: dict[str, Any] = raw if isinstance(raw, dict) else {}
    for name in _COMPONENTS:
        if isinstance(spec.get(name), dict):
            yield ("spec", name), spec[name]
    raw_stable = spec.get("predictor")
    stable: dict[str, Any] = raw_stable if isinstance(raw_stable, dict) else {}
    for index, canary in enumerate(spec.get("canary") or []):
        if isinstance(canary, dict) and isinstance(canary.get("predictor"), dict):
            yield ("spec", "canary", index, "predictor"), canary_predictor(stable, canary)


def containers(doc: Mapping[str, Any]) -> Iterator[tuple[JsonPath, dict[str, Any]]]:
    """``(path, container)`` for every container spec a document defines."""
    kind = doc.get("kind")
    pod_specs: list[tuple[JsonPath, Any]] = []
    if kind == "InferenceService":
        for path, component in _component_specs(doc):
            for key in MODEL_KEYS:
                if isinstance(component.get(key), dict):
                    yield (*path, key), component[key]
            pod_specs.append((path, component))
            pod_specs.append(((*path, "workerSpec"), component.get("workerSpec")))
    elif kind in ("ServingRuntime", "ClusterServingRuntime"):
        pod_specs.append((("spec",), doc.get("spec")))
        pod_specs.append((("spec", "workerSpec"), _get(doc, ("spec", "workerSpec"))))
    elif kind in _POD_SPEC_PATHS:
        path = _POD_SPEC_PATHS[str(kind)]
        pod_specs.append((path, _get(doc, path)))
    for path, pod in pod_specs:
        if not isinstance(pod, dict):
            continue
        for key in ("initContainers", "containers"):
            for index, container in enumerate(pod.get(key) or []):
                if isinstance(container, dict):
                    yield (*path, key, index), container


def _label(container: Mapping[str, Any], path: JsonPath) -> str:
    return f'container "{container["name"]}"' if container.get("name") else "container"


def _quantity(value: Any) -> Decimal | None:
    try:
        return Decimal(str(value))
    except (InvalidOperation, ValueError):
        return None


def gpu_request_equals_limit(doc: Mapping[str, Any]) -> list[Finding]:
    out = []
    for path, container in containers(doc):
        resources = container.get("resources") or {}
        requests, limits = resources.get("requests") or {}, resources.get("limits") or {}
        for name in sorted(set(requests) | set(limits)):
            if name not in GPU_RESOURCES and not name.endswith("/gpu"):
                continue
            request, limit = requests.get(name), limits.get(name)
            where = (*path, "resources")
            who = _label(container, path)
            if limit is None:
                out.append(
                    Finding(
                        where,
                        f"{who} requests {name} {request} but sets no limit: "
                        "GPU request must equal limit",
                    )
                )
                continue
            if request is not None and _quantity(request) != _quantity(limit):
                out.append(
                    Finding(
                        where,
                        f"{who}: GPU request must equal limit "
                        f"({name} request {request} != limit {limit})",
                    )
                )
                continue
            amount = _quantity(limit)
            if amount is None or amount != amount.to_integral_value():
                out.append(Finding(where, f"{who}: {name} must be a whole number, not {limit}"))
    return out


def deployment_mode(doc: Mapping[str, Any]) -> str | None:
    """Knative, Standard or ModelMesh from the annotation (legacy names mapped); None if unset."""
    raw = ((doc.get("metadata") or {}).get("annotations") or {}).get(DEPLOYMENT_MODE)
    return None if raw is None else _MODES.get(str(raw), f"unknown:{raw}")


def canary_matches_mode(doc: Mapping[str, Any]) -> list[Finding]:
    if doc.get("kind") != "InferenceService":
        return []
    out = []
    mode = deployment_mode(doc)
    if mode is not None and mode.startswith("unknown:"):
        out.append(
            Finding(
                ("metadata", "annotations", DEPLOYMENT_MODE),
                f"unknown deployment mode {mode[8:]!r}: use Knative or Standard",
            )
        )
    shown = "no deployment mode (the cluster default decides)" if mode is None else f"{mode} mode"
    for path, component in _component_specs(doc):
        if "canaryTrafficPercent" in component and mode != "Knative":
            out.append(
                Finding(
                    (*path, "canaryTrafficPercent"),
                    "canaryTrafficPercent only works in Knative mode "
                    f"({DEPLOYMENT_MODE}: Knative); this InferenceService has {shown}: "
                    "use spec.canary[] in Standard mode",
                )
            )
    return out


def image_tag(image: str) -> str | None:
    """The tag of an image reference, or None when it has none (a digest counts as a pin)."""
    name = image.split("@", 1)[0]
    last = name.rsplit("/", 1)[-1]
    return last.split(":", 1)[1] if ":" in last else None


def no_latest_images(doc: Mapping[str, Any]) -> list[Finding]:
    out = []
    for path, container in containers(doc):
        image = container.get("image")
        if not isinstance(image, str):
            continue
        tag = image_tag(image)
        if tag == "latest":
            out.append(Finding((*path, "image"), f"image {image} uses tag latest: pin a version"))
        elif tag is None and "@" not in image:
            out.append(
                Finding(
                    (*path, "image"), f"image {image} has no tag, which means latest: pin a version"
                )
            )
    return out


def containers_have_resources(doc: Mapping[str, Any]) -> list[Finding]:
    out = []
    for path, container in containers(doc):
        resources = container.get("resources")
        if not isinstance(resources, dict) or not resources:
            out.append(
                Finding(
                    path,
                    f"{_label(container, path)} has no resources: set requests (cpu, "
                    "memory) and a memory limit",
                )
            )
            continue
        requests, limits = resources.get("requests") or {}, resources.get("limits") or {}
        missing = [f"requests.{r}" for r in ("cpu", "memory") if r not in requests]
        missing += ["limits.memory"] if "memory" not in limits else []
        if missing:
            out.append(
                Finding(
                    (*path, "resources"),
                    f"{_label(container, path)} has no resources.{', resources.'.join(missing)}",
                )
            )
    return out


def names_are_dns(doc: Mapping[str, Any]) -> list[Finding]:
    meta = doc.get("metadata")
    if not isinstance(meta, dict):
        return [Finding((), 'missing required field "metadata"')]
    name = meta.get("name")
    if name is None:
        return (
            []
            if meta.get("generateName")
            else [Finding(("metadata",), 'missing required field "name"')]
        )
    name = str(name)
    if doc.get("kind") == "InferenceService":
        if len(name) > 63:  # KServe's own format check is the webhook's (``webhook``)
            return [
                Finding(
                    ("metadata", "name"),
                    f"{name!r} is not a valid InferenceService name: at most 63 characters "
                    "(it names Services and DNS labels)",
                )
            ]
    elif not _DNS_SUBDOMAIN.match(name) or len(name) > 253:
        return [Finding(("metadata", "name"), f"{name!r} is not a DNS-1123 name")]
    return []


def keda_query_selects_itself(doc: Mapping[str, Any]) -> list[Finding]:
    if doc.get("kind") != "InferenceService":
        return []
    meta = doc.get("metadata") or {}
    own = {"isvc": meta.get("name"), "namespace": meta.get("namespace")}
    out = []
    for path, component in _component_specs(doc):
        for index, metric in enumerate(_get(component, ("autoScaling", "metrics")) or []):
            query = _get(metric, ("external", "metric", "query"))
            if not isinstance(query, str):
                continue
            where = (*path, "autoScaling", "metrics", index, "external", "metric", "query")
            for label, value in _SELECTOR.findall(query):
                if own[label] is not None and value != own[label]:
                    out.append(
                        Finding(
                            where,
                            f'query selects {label}="{value}" but this InferenceService '
                            f'is {label} "{own[label]}"',
                        )
                    )
    return out


# PodSpec fields Knative's webhook drops (so refuses) unless the cluster's config-features
# enables the flag: knative.dev/serving v0.48.1 pkg/apis/serving/fieldmask.go (PodSpecMask)
# and pkg/apis/config/features.go (defaultFeaturesConfig: each Disabled as shipped).
KNATIVE_GATED_POD_FIELDS = {
    "affinity": "kubernetes.podspec-affinity",
    "topologySpreadConstraints": "kubernetes.podspec-topologyspreadconstraints",
    "hostAliases": "kubernetes.podspec-hostaliases",
    "nodeSelector": "kubernetes.podspec-nodeselector",
    "runtimeClassName": "kubernetes.podspec-runtimeclassname",
    "tolerations": "kubernetes.podspec-tolerations",
    "securityContext": "kubernetes.podspec-securitycontext",
    "shareProcessNamespace": "kubernetes.podspec-shareprocessnamespace",
    "priorityClassName": "kubernetes.podspec-priorityclassname",
    "schedulerName": "kubernetes.podspec-schedulername",
    "initContainers": "kubernetes.podspec-init-containers",
    "dnsPolicy": "kubernetes.podspec-dnspolicy",
    "dnsConfig": "kubernetes.podspec-dnsconfig",
    "hostIPC": "kubernetes.podspec-hostipc",
    "hostPID": "kubernetes.podspec-hostpid",
    "hostNetwork": "kubernetes.podspec-hostnetwork",
}
_HINTS = {
    "securityContext": "set runAsNonRoot, runAsUser and the like on the container "
                       "(model.securityContext) instead",
    "nodeSelector": "a GPU request alone places a pod on a node that has one",
    "tolerations": "the ExtendedResourceToleration admission plugin adds the toleration "
                   "of a GPU node's taint to a pod that requests a GPU",
}


def knative_pod_fields(doc: Mapping[str, Any]) -> list[Finding]:
    if doc.get("kind") != "InferenceService" or deployment_mode(doc) not in (None, "Knative"):
        return []
    shown = ("Knative mode" if deployment_mode(doc)
             else "no deployment mode (KServe's default: Knative)")
    out = []
    for path, component in _component_specs(doc):
        for field, flag in KNATIVE_GATED_POD_FIELDS.items():
            value = component.get(field)
            if value is None or value == {} or value == []:
                continue
            if field == "securityContext" and isinstance(value, dict) and set(value) <= {
                    "seccompProfile"}:
                continue  # allowed under secure-pod-defaults too (PodSecurityContextMask)
            hint = f"; {_HINTS[field]}" if field in _HINTS else ""
            out.append(Finding(
                (*path, field),
                f"{shown}: Knative refuses {field} on the pod unless config-features "
                f"enables {flag} (knative.dev/serving pkg/apis/serving/fieldmask.go, "
                "PodSpecMask): KServe's Knative Service would be refused and the "
                f"InferenceService never Ready{hint}"))
    return out


RULES: tuple[Rule, ...] = (
    names_are_dns,
    gpu_request_equals_limit,
    canary_matches_mode,
    no_latest_images,
    containers_have_resources,
    keda_query_selects_itself,
    knative_pod_fields,
    metric_targets_have_type,
)

