"""Raw JSON access to the (emulated) Kubernetes API for the stand-in controllers.

Controllers read through a :class:`Snapshot`: one list per kind and namespace, kept for a
round and updated with the stand-in's own writes (what controller-runtime's and
client-go's informer caches give a controller: possibly stale, read-your-writes). Writes
go straight to the API; an HTTP error raises the official client's ``ApiException``.
Objects travel as plain dicts, so nothing is dropped by the typed models.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Kind:
    group: str
    version: str
    plural: str
    kind: str

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(self, namespace: str, name: str | None = None, subresource: str = "") -> str:
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        path = f"{base}/namespaces/{namespace}/{self.plural}"
        if name is not None:
            path += f"/{name}"
        if subresource:
            path += f"/{subresource}"
        return path


ISVC = Kind("serving.kserve.io", "v1beta1", "inferenceservices", "InferenceService")
KSVC = Kind("serving.knative.dev", "v1", "services", "Service")
CONFIGURATION = Kind("serving.knative.dev", "v1", "configurations", "Configuration")
ROUTE = Kind("serving.knative.dev", "v1", "routes", "Route")
REVISION = Kind("serving.knative.dev", "v1", "revisions", "Revision")
DEPLOYMENT = Kind("apps", "v1", "deployments", "Deployment")
SERVICE = Kind("", "v1", "services", "Service")
HPA = Kind("autoscaling", "v2", "horizontalpodautoscalers", "HorizontalPodAutoscaler")
HTTPROUTE = Kind("gateway.networking.k8s.io", "v1", "httproutes", "HTTPRoute")
INGRESS = Kind("networking.k8s.io", "v1", "ingresses", "Ingress")


USER_AGENT = "kserve-sim/aaac4e294"  # how the emulated API tells the controllers' writes


class Conflict(Exception):
    """A 409 on a write: the controller retries on its next round, as RetryOnConflict would."""


class RawClient:
    """JSON requests over the official client's connection pool."""

    def __init__(self, api_client: Any) -> None:
        self._api_client = api_client
        self.writes = 0

    def request(self, method: str, path: str, body: Any = None) -> Any:
        from kubernetes.client.exceptions import ApiException

        config = self._api_client.configuration
        headers = {**dict(getattr(self._api_client, "default_headers", {}) or {}),
                   "Accept": "application/json", "Content-Type": "application/json",
                   "User-Agent": USER_AGENT}
        if config.api_key.get("authorization"):
            headers["authorization"] = config.api_key["authorization"]
        response = self._api_client.rest_client.request(
            method, config.host + path, headers=headers, body=body)
        data = response.read()
        if method != "GET":
            self.writes += 1
        if response.status >= 400:
            exc = ApiException(status=response.status, reason=response.reason)
            exc.body = data.decode("utf-8", "replace") if isinstance(data, bytes) else data
            if response.status == 409:
                raise Conflict(exc.body) from exc
            raise exc
        return json.loads(data) if data else None


class Snapshot:
    """One round's view of the namespace, kind by kind."""

    def __init__(self, client: RawClient, namespace: str) -> None:
        self.client = client
        self.namespace = namespace
        self._cache: dict[Kind, dict[str, dict[str, Any]]] = {}

    def _objects(self, kind: Kind) -> dict[str, dict[str, Any]]:
        if kind not in self._cache:
            listed = self.client.request("GET", kind.path(self.namespace)) or {}
            self._cache[kind] = {o["metadata"]["name"]: o for o in listed.get("items") or []}
        return self._cache[kind]

    def list(self, kind: Kind, labels: dict[str, str] | None = None) -> list[dict[str, Any]]:
        found = []
        for obj in self._objects(kind).values():
            have = (obj.get("metadata") or {}).get("labels") or {}
            if all(have.get(k) == v for k, v in (labels or {}).items()):
                found.append(copy.deepcopy(obj))
        return sorted(found, key=lambda o: o["metadata"]["name"])

    def get(self, kind: Kind, name: str) -> dict[str, Any] | None:
        obj = self._objects(kind).get(name)
        return copy.deepcopy(obj) if obj is not None else None

    def _keep(self, kind: Kind, obj: dict[str, Any] | None) -> dict[str, Any]:
        assert obj is not None
        self._objects(kind)[obj["metadata"]["name"]] = obj
        return copy.deepcopy(obj)

    def create(self, kind: Kind, obj: dict[str, Any]) -> dict[str, Any]:
        body = {"apiVersion": kind.api_version, "kind": kind.kind, **obj}
        body["metadata"] = {**body.get("metadata", {}), "namespace": self.namespace}
        return self._keep(kind, self.client.request("POST", kind.path(self.namespace), body))

    def replace(self, kind: Kind, obj: dict[str, Any]) -> dict[str, Any]:
        """An Update (PUT) carrying the resourceVersion it read: 409 if that is stale."""
        path = kind.path(self.namespace, obj["metadata"]["name"])
        return self._keep(kind, self.client.request("PUT", path, obj))

    def replace_status(self, kind: Kind, obj: dict[str, Any]) -> dict[str, Any]:
        path = kind.path(self.namespace, obj["metadata"]["name"], "status")
        return self._keep(kind, self.client.request("PUT", path, obj))

    def delete(self, kind: Kind, name: str) -> None:
        from kubernetes.client.exceptions import ApiException

        try:
            self.client.request("DELETE", kind.path(self.namespace, name))
        except ApiException as exc:
            if exc.status != 404:
                raise
        self._objects(kind).pop(name, None)


def owner_reference(owner: Mapping[str, Any], kind: Kind) -> dict[str, Any]:
    """controller-runtime ``SetControllerReference``: controller and blockOwnerDeletion."""
    meta = owner["metadata"]
    return {"apiVersion": kind.api_version, "kind": kind.kind, "name": meta["name"],
            "uid": meta.get("uid", ""), "controller": True, "blockOwnerDeletion": True}


def controller_uid(obj: dict[str, Any]) -> str | None:
    """``metav1.GetControllerOf``: the uid of the owner reference marked controller."""
    for ref in (obj.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("controller"):
            return str(ref.get("uid"))
    return None
