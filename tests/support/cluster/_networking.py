"""The networking stand-ins of the test cluster: the status a Gateway API implementation
writes on HTTPRoutes, and the status a Knative networking layer writes on KIngresses.

No Envoy runs here, so no real gateway or Knative ingress implementation does, and
nothing carries a request. What the controllers read of one is status alone:

- **HTTPRoute** (read by KServe in Standard mode). KServe's ``isHTTPRouteReady``
  (github.com/kserve/kserve ``pkg/controller/v1beta1/inferenceservice/reconcilers/
  ingress/httproute_reconciler.go``) wants at least one ``status.parents[]`` entry and no
  condition ``False`` in any. This writes what the spec says an implementation writes for
  a route it accepted and whose backends resolved (sigs.k8s.io/gateway-api
  ``apis/v1/shared_types.go``, ``RouteParentStatus``; conditions ``Accepted`` with reason
  ``Accepted`` and ``ResolvedRefs`` with reason ``ResolvedRefs``, each with the route's
  ``observedGeneration``), for each ``spec.parentRefs[]`` entry, as the controller
  ``modelctl.io/test-gateway``.
- **KIngress** (``networking.internal.knative.dev/v1alpha1`` Ingress, read by Knative's
  route reconciler in Knative mode). Knative's ``Ingress.IsReady`` (knative.dev/networking
  ``pkg/apis/networking/v1alpha1/ingress_lifecycle.go``) wants ``observedGeneration`` equal
  to the generation and ``Ready`` true, which the living condition set derives from
  ``NetworkConfigured`` and ``LoadBalancerReady``; ``MarkLoadBalancerReady`` also sets
  ``publicLoadBalancer`` and ``privateLoadBalancer``, from which the route makes its
  placeholder Services. This writes what net-istio writes for its shipped gateways
  (knative.dev/net-istio ``config/400-config-istio.yaml``: ``istio-ingressgateway`` and
  ``knative-local-gateway`` in ``istio-system``, as ``domainInternal``), the ingress
  class Knative's shipped config-network names.
"""

from __future__ import annotations

import contextlib
import datetime
import threading
from typing import Any

from kubernetes import client

CONTROLLER = "modelctl.io/test-gateway"
HTTPROUTE = ("gateway.networking.k8s.io", "v1", "httproutes")
KINGRESS = ("networking.internal.knative.dev", "v1alpha1", "ingresses")
PUBLIC_GATEWAY = "istio-ingressgateway.istio-system.svc.cluster.local"
LOCAL_GATEWAY = "knative-local-gateway.istio-system.svc.cluster.local"


def _generation(obj: dict[str, Any]) -> int:
    return int((obj.get("metadata") or {}).get("generation") or 1)


def _condition(kind: str, generation: int | None = None) -> dict[str, Any]:
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    found: dict[str, Any] = {"type": kind, "status": "True", "lastTransitionTime": now}
    if generation is not None:  # the Gateway API's metav1.Condition
        found.update(reason=kind, message="", observedGeneration=generation)
    return found


def route_status(route: dict[str, Any]) -> dict[str, Any]:
    """The status a Gateway API implementation writes on ``route`` once it accepted it."""
    generation = _generation(route)
    parents = [{"parentRef": ref, "controllerName": CONTROLLER,
                "conditions": [_condition("Accepted", generation),
                               _condition("ResolvedRefs", generation)]}
               for ref in (route.get("spec") or {}).get("parentRefs") or []]
    return {"parents": parents}


def _route_settled(route: dict[str, Any]) -> bool:
    generation = _generation(route)
    parents = ((route.get("status") or {}).get("parents")) or []
    refs = (route.get("spec") or {}).get("parentRefs") or []
    return len(parents) == len(refs) and all(
        c.get("observedGeneration") == generation
        for p in parents for c in p.get("conditions") or [])


def kingress_status(ingress: dict[str, Any]) -> dict[str, Any]:
    """The status net-istio writes on a KIngress it programmed."""
    return {"observedGeneration": _generation(ingress),
            "conditions": [_condition(kind) for kind in
                           ("LoadBalancerReady", "NetworkConfigured", "Ready")],
            "publicLoadBalancer": {"ingress": [{"domainInternal": PUBLIC_GATEWAY}]},
            "privateLoadBalancer": {"ingress": [{"domainInternal": LOCAL_GATEWAY}]}}


def _kingress_settled(ingress: dict[str, Any]) -> bool:
    return (ingress.get("status") or {}).get("observedGeneration") == _generation(ingress)


class NetworkingStandIn:
    """Polls HTTPRoutes and KIngresses in every namespace and writes their status."""

    KINDS = ((HTTPROUTE, _route_settled, route_status),
             (KINGRESS, _kingress_settled, kingress_status))

    def __init__(self, api_client: Any, interval_s: float = 0.2) -> None:
        self._api = client.CustomObjectsApi(api_client)
        self._interval_s = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="networking-stand-in",
                                        daemon=True)

    def start(self) -> NetworkingStandIn:
        self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stop.is_set():
            for kind in self.KINDS:
                with contextlib.suppress(Exception):
                    self.sync(*kind)
            self._stop.wait(self._interval_s)

    def sync(self, kind: tuple[str, str, str], settled: Any, status: Any) -> None:
        group, version, plural = kind
        listed: Any = self._api.list_cluster_custom_object(group, version, plural)
        for obj in listed["items"]:
            if settled(obj):
                continue
            meta = obj["metadata"]
            with contextlib.suppress(client.ApiException):
                self._api.patch_namespaced_custom_object_status(
                    group, version, meta["namespace"], plural, meta["name"],
                    {"status": status(obj)})

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
