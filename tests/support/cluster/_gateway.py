"""The one networking stand-in of the test cluster: a Gateway API controller's status.

No Envoy runs here, so no real gateway implementation does. What KServe reads of one
is the status it writes on each HTTPRoute: KServe's ``isHTTPRouteReady``
(``pkg/controller/v1beta1/inferenceservice/reconcilers/ingress/httproute_reconciler.go``)
wants at least one ``status.parents[]`` entry and no condition ``False`` in any. This
writes what the spec says an implementation writes for a route it accepted and whose
backends resolved (sigs.k8s.io/gateway-api ``apis/v1/shared_types.go``,
``RouteParentStatus``; conditions ``Accepted`` with reason ``Accepted`` and
``ResolvedRefs`` with reason ``ResolvedRefs``, each with the route's
``observedGeneration``), for each ``spec.parentRefs[]`` entry, as the controller
``modelctl.io/test-gateway``. Nothing else of a gateway (listeners, addresses, data
plane) is played.
"""

from __future__ import annotations

import contextlib
import datetime
import threading
from typing import Any

from kubernetes import client

CONTROLLER = "modelctl.io/test-gateway"
GROUP, VERSION, PLURAL = "gateway.networking.k8s.io", "v1", "httproutes"


def route_status(route: dict[str, Any]) -> dict[str, Any]:
    """The status an implementation writes on ``route`` once it accepted it."""
    generation = int((route.get("metadata") or {}).get("generation") or 1)
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")

    def condition(kind: str) -> dict[str, Any]:
        return {"type": kind, "status": "True", "reason": kind, "message": "",
                "observedGeneration": generation, "lastTransitionTime": now}

    parents = [{"parentRef": ref, "controllerName": CONTROLLER,
                "conditions": [condition("Accepted"), condition("ResolvedRefs")]}
               for ref in (route.get("spec") or {}).get("parentRefs") or []]
    return {"parents": parents}


def _settled(route: dict[str, Any]) -> bool:
    generation = int((route.get("metadata") or {}).get("generation") or 1)
    parents = ((route.get("status") or {}).get("parents")) or []
    refs = (route.get("spec") or {}).get("parentRefs") or []
    return len(parents) == len(refs) and all(
        c.get("observedGeneration") == generation
        for p in parents for c in p.get("conditions") or [])


class GatewayStandIn:
    """Polls HTTPRoutes in every namespace and writes their accepted status."""

    def __init__(self, api_client: Any, interval_s: float = 0.2) -> None:
        self._api = client.CustomObjectsApi(api_client)
        self._interval_s = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="gateway-stand-in",
                                        daemon=True)

    def start(self) -> GatewayStandIn:
        self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stop.is_set():
            with contextlib.suppress(Exception):
                self.sync()
            self._stop.wait(self._interval_s)

    def sync(self) -> None:
        listed: Any = self._api.list_cluster_custom_object(GROUP, VERSION, PLURAL)
        routes = listed["items"]
        for route in routes:
            if _settled(route):
                continue
            meta = route["metadata"]
            with contextlib.suppress(client.ApiException):
                self._api.patch_namespaced_custom_object_status(
                    GROUP, VERSION, meta["namespace"], PLURAL, meta["name"],
                    {"status": route_status(route)})

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
