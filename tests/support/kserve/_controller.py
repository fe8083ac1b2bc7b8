"""KServe's InferenceService controller, one InferenceService at a time.

Ported from kserve aaac4e294 ``pkg/controller/v1beta1/inferenceservice/controller.go``
(``InferenceServiceReconciler.Reconcile``, ``updateStatus``,
``inferenceServiceStatusEqual``) and ``components/predictor.go`` (``Predictor.Reconcile``,
``reconcileKnativeDeployment``): the predictor (Knative Service, or Standard-mode
Deployments with their canaries), the Stopped condition, Knative mode's cross-component
RoutesReady / LatestDeploymentReady, the ingress, then one status update when the status
differs from what was read.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from typing import Any

from tests.support.kserve import _api, _ingress, _knative_kserve, _raw, _resources, _status
from tests.support.kserve import config as c
from tests.support.kserve._conditions import FALSE, TRUE, get_condition

STOPPED = "Stopped"
PodLister = Callable[[str, str], Sequence[_status.Pod]]


class InferenceServiceController:
    """``InferenceServiceReconciler`` for the predictor component.

    ``pods(kind, name)`` stands for ``ListPodsByLabel``: the pods of Knative revision
    ``name`` (kind ``revision``) or of Deployment ``name`` (kind ``deployment``), which the
    stand-in's Knative and Deployment controllers keep (there are no Pod objects)."""

    def __init__(self, config: c.KServeConfig, now: Callable[[], float], pods: PodLister) -> None:
        self.config = config
        self.now = now
        self.pods = pods

    def reconcile(self, snapshot: _api.Snapshot, isvc: dict[str, Any]) -> None:
        meta = isvc["metadata"]
        if meta.get("deletionTimestamp"):
            return  # the finalizer is not emulated: nothing to clean up (see the package doc)
        read = copy.deepcopy(isvc.get("status") or {})
        status = copy.deepcopy(read)
        annotations = {k: v for k, v in (meta.get("annotations") or {}).items()
                       if k not in self.config.disallowed_annotations}
        mode = c.deployment_mode(str(status.get("deploymentMode") or ""), annotations,
                                 self.config.default_deployment_mode)
        if mode == "ModelMesh":
            return  # ModelMesh's own controllers are not emulated
        if annotations.get(c.DISABLE_AUTO_UPDATE) == "true" and _ready(read):
            return
        manager = _status.conditions(status, self.now)
        if manager.get("Ready") is None:
            manager.initialize()
        try:
            self._predictor(snapshot, isvc, status, mode)
            stopped = get_condition(status, STOPPED)
            if stopped is None or stopped.get("status") == TRUE:  # force stop is not emulated
                _status.set_condition(status, STOPPED, {"status": FALSE}, self.now)
            if mode == "Knative":
                for kind in ("RoutesReady", "LatestDeploymentReady"):
                    _status.propagate_cross_component_status(status, [c.PREDICTOR], kind,
                                                             self.now)
            self._ingress(snapshot, isvc, status, mode)
        except LookupError:
            pass  # a failed reconcile: KServe still updates the status, then retries
        self._update_status(snapshot, isvc, read, status, mode)

    def _predictor(self, snapshot: _api.Snapshot, isvc: dict[str, Any], status: dict[str, Any],
                   mode: str) -> None:
        """``Predictor.Reconcile``."""
        predictor = _resources.predictor_of(isvc)
        res = _resources.build_predictor_resources(isvc, predictor, self.config)
        service_status: dict[str, Any] = {}
        if mode == "Standard":
            # canaries first, so CanaryStatuses is fresh for the stable minReplicas decision
            _raw.reconcile_canary_deployments(snapshot, isvc, status, self.config, self.now)
            _raw.reconcile_raw_deployment(snapshot, isvc, status, res, self.config, self.now)
        else:
            component = dict((status.get("components") or {}).get(c.PREDICTOR) or {})
            desired = _knative_kserve.create_knative_service(res, predictor, component,
                                                             self.config, isvc)
            service_status = _knative_kserve.reconcile_ksvc(snapshot, desired)
            _status.propagate_status(status, c.PREDICTOR, service_status, self.now)
        spec = dict((status.get("components") or {}).get(c.PREDICTOR) or {})
        if mode == "Standard":
            pods = self.pods("deployment", res.name)
        else:
            pods = self.pods("revision", str(spec.get("latestCreatedRevision") or ""))
        _status.propagate_model_status(status, spec, list(pods), mode == "Standard",
                                       service_status, self.now)

    def _ingress(self, snapshot: _api.Snapshot, isvc: dict[str, Any], status: dict[str, Any],
                 mode: str) -> None:
        """reconcilers/factory.go ``CreateIngressReconciler``: by mode and enableGatewayApi."""
        if mode == "Knative":
            _ingress.reconcile_knative_ingress(snapshot, isvc, status, self.config, self.now)
        elif self.config.enable_gateway_api:
            _ingress.reconcile_http_routes(snapshot, isvc, status, self.config, self.now)
        else:
            _ingress.reconcile_raw_ingress(snapshot, isvc, status, self.config, self.now)

    def _update_status(self, snapshot: _api.Snapshot, isvc: dict[str, Any],
                       read: dict[str, Any], status: dict[str, Any], mode: str) -> None:
        """``updateStatus``: records the deployment mode; writes (Status().Update, with the
        resourceVersion read) only when the status differs from the one read."""
        status["deploymentMode"] = mode
        if status == read:
            return
        snapshot.replace_status(_api.ISVC, {**isvc, "status": status})


def _ready(status: dict[str, Any]) -> bool:
    condition = get_condition(status, "Ready")
    return condition is not None and condition.get("status") == TRUE
