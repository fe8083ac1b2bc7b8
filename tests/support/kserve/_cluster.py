"""The rest of the cluster KServe relies on: a Gateway API implementation, the garbage
collector and the HorizontalPodAutoscaler controller.

* A Gateway (``enableGatewayApi: true``) accepts every HTTPRoute attached to it and
  reports, per parent, the route conditions of gateway-api ``apis/v1/shared_types.go``
  (``RouteConditionAccepted``; ``RouteConditionResolvedRefs``, False with
  ``RouteReasonBackendNotFound`` while a backend Service does not exist), each with the
  route's ``observedGeneration``. KServe's ``isHTTPRouteReady`` reads only these.
* kubernetes ``pkg/controller/garbagecollector``: an object whose controller owner (an
  InferenceService, or a Knative Service for what Knative derives) is gone is deleted
  (background propagation). Only the kinds the stand-in itself writes are collected.
* kubernetes ``pkg/controller/podautoscaler/horizontal.go`` ``reconcileAutoscaler``:
  there is no metrics server, so an HPA only holds its target's ``spec.replicas`` (the
  scale subresource) within [minReplicas, maxReplicas]; HPA status is not written.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from tests.support.kserve import _api
from tests.support.kserve._conditions import timestamp
from tests.support.kserve._deployment_util import spec_replicas

CONTROLLER_NAME = "kserve-sim.test/gateway"  # the stand-in implementation's name
OWNED_BY_ISVC = (_api.KSVC, _api.DEPLOYMENT, _api.SERVICE, _api.HPA, _api.HTTPROUTE,
                 _api.INGRESS)
OWNED_BY_KSVC = (_api.CONFIGURATION, _api.ROUTE)


class GatewayController:
    def __init__(self, now: Callable[[], float]) -> None:
        self.now = now

    def reconcile(self, snapshot: _api.Snapshot) -> None:
        for route in snapshot.list(_api.HTTPROUTE):
            generation = route["metadata"].get("generation", 1)
            missing = [ref.get("name") for rule in (route.get("spec") or {}).get("rules") or []
                       for ref in rule.get("backendRefs") or []
                       if ref.get("kind", "Service") == "Service"
                       and snapshot.get(_api.SERVICE, ref.get("name")) is None]
            old = {p.get("parentRef", {}).get("name"): p
                   for p in (route.get("status") or {}).get("parents") or []}
            parents = []
            for ref in (route.get("spec") or {}).get("parentRefs") or []:
                wanted = [("Accepted", "True", "Accepted", ""),
                          ("ResolvedRefs", "False", "BackendNotFound",
                           f"backend {missing[0]} not found") if missing else
                          ("ResolvedRefs", "True", "ResolvedRefs", "")]
                before = {x["type"]: x for x in (old.get(ref.get("name")) or {}).get(
                    "conditions") or []}
                conditions = []
                for kind, status, reason, message in wanted:
                    cond = {"type": kind, "status": status, "reason": reason,
                            "message": message, "observedGeneration": generation}
                    previous = before.get(kind)
                    same = previous is not None and {k: v for k, v in previous.items()
                                                     if k != "lastTransitionTime"} == cond
                    cond["lastTransitionTime"] = (previous or {}).get(
                        "lastTransitionTime") if same else timestamp(self.now())
                    conditions.append(cond)
                parents.append({"parentRef": copy.deepcopy(ref), "controllerName": CONTROLLER_NAME,
                                "conditions": conditions})
            if {"parents": parents} != (route.get("status") or {}):
                snapshot.replace_status(_api.HTTPROUTE, {**route, "status": {"parents": parents}})


def collect_garbage(snapshot: _api.Snapshot) -> None:
    isvcs = {o["metadata"].get("uid") for o in snapshot.list(_api.ISVC)}
    for kind in OWNED_BY_ISVC:
        for obj in snapshot.list(kind):
            if _orphaned(obj, "InferenceService", isvcs):
                snapshot.delete(kind, obj["metadata"]["name"])
    ksvcs = {o["metadata"].get("uid") for o in snapshot.list(_api.KSVC)}
    for kind in OWNED_BY_KSVC:
        for obj in snapshot.list(kind):
            if _orphaned(obj, "Service", ksvcs):
                snapshot.delete(kind, obj["metadata"]["name"])


def _orphaned(obj: dict[str, Any], owner_kind: str, alive: set[Any]) -> bool:
    for ref in obj["metadata"].get("ownerReferences") or []:
        if ref.get("controller") and ref.get("kind") == owner_kind:
            return ref.get("uid") not in alive
    return False


class HPAController:
    """``reconcileAutoscaler`` without metrics: spec.replicas (the scale subresource) is
    raised to minReplicas or lowered to maxReplicas; 0 replicas means scaling is off."""

    def reconcile(self, snapshot: _api.Snapshot) -> None:
        for hpa in snapshot.list(_api.HPA):
            spec = hpa.get("spec") or {}
            target = snapshot.get(_api.DEPLOYMENT,
                                  str((spec.get("scaleTargetRef") or {}).get("name")))
            if target is None:
                continue  # the HPA cannot get its scale target
            current = spec_replicas(target)
            minimum = int(spec["minReplicas"]) if spec.get("minReplicas") is not None else 1
            maximum = int(spec.get("maxReplicas") or 0)
            if current == 0 and minimum != 0:
                continue
            desired = maximum if current > maximum else minimum if current < minimum else current
            if desired != current:
                target["spec"]["replicas"] = desired
                snapshot.replace(_api.DEPLOYMENT, target)
