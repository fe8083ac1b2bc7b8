"""Rules for what KServe's mutating webhook does to an InferenceService before the API
server validates it: what neither the CRD schema (which ``deploy validate`` runs on the
document as written) nor the validator port (``webhook``) can see.

- ``metric_targets_have_type``: every autoscaling metric target names its ``type``.

KServe v0.20.0 answers its mutating webhook (``InferenceServiceDefaulter.Default``,
``pkg/apis/serving/v1beta1/inference_service_defaults.go``) with the object re-encoded
from Go: controller-runtime's defaulter ``json.Marshal``s the defaulted object and
patches the request to it (``pkg/webhook/admission/defaulter_custom.go``, ``Handle``).
So a field whose Go tag lacks ``omitempty`` comes back even where the user left it out.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from deploycheck._problems import Finding, JsonPath
from deploycheck.webhook._component import as_list, as_map

# The metric sources of MetricsSpec that carry a MetricTarget (component.go:
# ResourceMetricSource, ExternalMetricSource, PodMetricSource), by their JSON names.
METRIC_SOURCES = ("resource", "external", "podmetric")
# The MetricTargetType that reads each value field (component.go, MetricTarget), in the
# CRD's enum order.
TARGET_TYPES = {"averageUtilization": "Utilization", "value": "Value",
                "averageValue": "AverageValue"}


def _written_components(doc: Mapping[str, Any]) -> Iterator[tuple[JsonPath, Mapping[str, Any]]]:
    """Each component with its own ``autoScaling``, as written: a canary entry's predictor
    is not merged over the stable one here (the webhook re-encodes the entry as it is)."""
    spec = as_map(doc.get("spec"))
    for name in ("predictor", "transformer", "explainer"):
        yield ("spec", name), as_map(spec.get(name))
    for index, canary in enumerate(as_list(spec.get("canary"))):
        yield ("spec", "canary", index, "predictor"), as_map(as_map(canary).get("predictor"))


def _untyped(target: Mapping[str, Any]) -> str:
    fixes = [f"type: {kind} for {field}" for field, kind in TARGET_TYPES.items()
             if field in target]
    fixes = fixes or [f"type: {kind} with {field}" for field, kind in TARGET_TYPES.items()]
    return ('target has no type: KServe\'s mutating webhook writes it back with type: "", '
            "which the API server then refuses (Unsupported value) before KServe's "
            f"validator runs; write {' or '.join(fixes)}")


def metric_targets_have_type(doc: Mapping[str, Any]) -> list[Finding]:
    # MetricTarget.Type (component.go) is `json:"type"` without omitempty: a target written
    # without a type comes back from the defaulter as type "", which the CRD's enum
    # (Utilization, Value, AverageValue) refuses. KServe's validator, which a cluster never
    # reaches then, admits many such targets when called directly (its HPA rules read no
    # target type; validateScaleTarget skips an unknown one), and so does ``webhook``.
    # (A type of null is the schema check's: "must be string, not null".)
    if doc.get("kind") != "InferenceService":
        return []
    out = []
    for path, component in _written_components(doc):
        metrics = as_list(as_map(component.get("autoScaling")).get("metrics"))
        for index, metric in enumerate(metrics):
            for source in METRIC_SOURCES:
                target = as_map(as_map(metric).get(source)).get("target")
                if isinstance(target, Mapping) and "type" not in target:
                    out.append(Finding(
                        (*path, "autoScaling", "metrics", index, source, "target"),
                        _untyped(target)))
    return out
