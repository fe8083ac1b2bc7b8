"""What a Standard-mode canary needs of the InferenceService and of KServe, checked
before the rollout writes one: ``start_blockers`` (why a rollout cannot start here) and
``check_entry`` (an entry KServe's webhook would refuse). The sources are those of
``_standard``'s docstring: ``inference_service_validation.go`` ``validateCanarySpecs``,
``components/predictor.go`` ``reconcileCanaryDeployments``, ``reconcilers/factory.go``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rollout._errors import RolloutError
from rollout.backends._kserve._knative import predictor
from rollout.backends._kserve._standard import AUTOSCALER_ANNOTATION, MODE_ANNOTATION, route_name


def start_blockers(obj: Mapping[str, Any], route: Mapping[str, Any] | None) -> list[str]:
    isvc = str((obj.get("metadata") or {}).get("name"))
    problems = []
    annotated = ((obj.get("metadata") or {}).get("annotations") or {}).get(MODE_ANNOTATION)
    if annotated != "Standard":
        problems.append(f"annotation {MODE_ANNOTATION} is {annotated!r}: KServe's webhook "
                        "accepts spec.canary only with exactly 'Standard'")
    scaler = ((obj.get("metadata") or {}).get("annotations") or {}).get(AUTOSCALER_ANNOTATION)
    if scaler == "keda":
        problems.append(
            f"annotation {AUTOSCALER_ANNOTATION} is 'keda': KServe builds a Standard-mode "
            "canary's scaler from its minReplicas alone (components/predictor.go "
            "reconcileCanaryDeployments), a ScaledObject with no triggers that KEDA's CRD "
            "refuses, so the canary never becomes Ready; use autoscalerClass 'none' (a "
            "fixed pool, kustomize/overlays/standard-canary) or 'hpa', or Knative mode")
    if route is None:
        problems.append(
            f"there is no HTTPRoute {route_name(isvc)}: this KServe routes Standard-mode "
            "traffic through a Kubernetes Ingress to the stable Service only, so a canary "
            "would get no traffic (set enableGatewayApi: true in the ingress section of "
            "KServe's inferenceservice-config, or use Knative mode)")
    if predictor(obj).get("workerSpec"):
        problems.append("the predictor has a workerSpec: KServe does not run multi-node "
                        "canaries")
    return problems


def check_entry(entry: Mapping[str, Any], target: str) -> None:
    """Refuse an entry KServe's webhook would refuse, before sending it."""
    pred = entry.get("predictor") or {}
    for key in ("maxReplicas", "scaleTarget", "scaleMetric", "autoScaling", "workerSpec"):
        if pred.get(key) is not None:
            raise RolloutError(f"{target}: the canary entry {pred.get('name')!r} sets {key}; "
                               "KServe's webhook refuses that (canaries use fixed replicas)")
