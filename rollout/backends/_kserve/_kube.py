"""Every call to the Kubernetes API that ``rollout`` makes, in one place.

Only namespaced calls, and only these (the RBAC Role in manifests/ grants
exactly their verbs): InferenceServices get/patch, and create/delete for the
shadow InferenceService of ``modelctl shadow``; Events create/list; ConfigMaps
get/create/update (the rollout state, kept where KServe does not copy it onto
revisions); Knative Revisions get (which model each runs); Deployments get and
HTTPRoutes get (what Standard mode really runs and routes).
Library errors become ``rollout`` errors here: 404 -> ``NotFound``, 409 ->
``Conflict``, anything else -> ``KubeError`` with one readable line.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from rollout._errors import Conflict, KubeConfigError, KubeError, NotFound

GROUP = "serving.kserve.io"
GATEWAY_GROUP = "gateway.networking.k8s.io"
GATEWAY_VERSION = "v1"
HTTPROUTES = "httproutes"
KNATIVE_GROUP = "serving.knative.dev"
KNATIVE_VERSION = "v1"
REVISIONS = "revisions"
KEDA_GROUP = "keda.sh"
KEDA_VERSION = "v1alpha1"
SCALEDOBJECTS = "scaledobjects"
VERSION = "v1beta1"
PLURAL = "inferenceservices"
KIND = "InferenceService"
_SA_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")

T = TypeVar("T")


class KubeClient:
    """A thin, typed wrapper over the official client for the calls a rollout needs."""

    def __init__(self, api_client: Any, *, namespace: str = "default", timeout_s: float = 15.0):
        from kubernetes import client

        self._api_client = api_client
        self._custom = client.CustomObjectsApi(api_client)
        self._core = client.CoreV1Api(api_client)
        self._apps = client.AppsV1Api(api_client)
        self._autoscaling = client.AutoscalingV2Api(api_client)
        self.namespace = namespace
        self.timeout_s = timeout_s

    @property
    def host(self) -> str:
        return str(self._api_client.configuration.host)

    # -- construction ------------------------------------------------------------
    @classmethod
    def from_host(
        cls, host: str, *, namespace: str = "default", timeout_s: float = 15.0
    ) -> KubeClient:
        """A client for an API server at ``host`` with no credentials (tests, proxies)."""
        from kubernetes import client

        configuration = client.Configuration(host=host)
        return cls(client.ApiClient(configuration), namespace=namespace, timeout_s=timeout_s)

    @classmethod
    def from_kubeconfig(
        cls,
        kubeconfig: str | None = None,
        context: str | None = None,
        *,
        timeout_s: float = 15.0,
    ) -> KubeClient:
        """A client from ``kubeconfig`` (or $KUBECONFIG, ~/.kube/config, or in-cluster)."""
        config = _config_loader()
        path = kubeconfig or os.environ.get("KUBECONFIG") or str(Path.home() / ".kube" / "config")
        paths = [p for p in path.split(os.pathsep) if p]
        if not any(Path(p).expanduser().is_file() for p in paths):
            if kubeconfig is None and os.environ.get("KUBERNETES_SERVICE_HOST"):
                return cls._in_cluster(timeout_s)
            raise KubeConfigError(
                f"no kubeconfig at {path}: pass --kubeconfig, set KUBECONFIG, or run in a cluster"
            )
        try:
            api_client = config.new_client_from_config(
                config_file=path, context=context, persist_config=False
            )
            namespace = _context_namespace(path, context)
        except config.ConfigException as exc:
            raise KubeConfigError(f"kubeconfig {path}: {_first_line(exc)}") from exc
        return cls(api_client, namespace=namespace, timeout_s=timeout_s)

    @classmethod
    def _in_cluster(cls, timeout_s: float) -> KubeClient:
        from kubernetes import client

        config = _config_loader()
        configuration = client.Configuration()
        try:
            config.load_incluster_config(client_configuration=configuration)
        except config.ConfigException as exc:
            raise KubeConfigError(f"in-cluster config: {_first_line(exc)}") from exc
        namespace = "default"
        if _SA_NAMESPACE.is_file():
            namespace = _SA_NAMESPACE.read_text().strip() or namespace
        return cls(client.ApiClient(configuration), namespace=namespace, timeout_s=timeout_s)

    # -- InferenceServices ---------------------------------------------------------
    def get_isvc(self, namespace: str, name: str) -> dict[str, Any]:
        what = f"InferenceService {namespace}/{name}"
        return _as_object(what, self._call(what, lambda: self._custom.get_namespaced_custom_object(
            GROUP, VERSION, namespace, PLURAL, name, _request_timeout=self.timeout_s)))

    def patch_isvc(self, namespace: str, name: str, patch: Mapping[str, Any]) -> dict[str, Any]:
        """JSON merge patch; include metadata.resourceVersion to make it conditional."""
        what = f"InferenceService {namespace}/{name}"
        return _as_object(what, self._call(what, lambda: (
            self._custom.patch_namespaced_custom_object(
                GROUP, VERSION, namespace, PLURAL, name, dict(patch),
                _request_timeout=self.timeout_s))))

    def create_isvc(self, namespace: str, body: Mapping[str, Any]) -> None:
        """Create an InferenceService; Conflict if one of that name exists."""
        name = str((body.get("metadata") or {}).get("name", ""))
        what = f"InferenceService {namespace}/{name}"
        try:
            self._call(what, lambda: self._custom.create_namespaced_custom_object(
                GROUP, VERSION, namespace, PLURAL, dict(body), _request_timeout=self.timeout_s))
        except Conflict as exc:
            raise Conflict(f"{what} already exists") from exc

    def delete_isvc(self, namespace: str, name: str) -> None:
        """Delete an InferenceService (its pods go with it); NotFound if there is none."""
        what = f"InferenceService {namespace}/{name}"
        self._call(what, lambda: self._custom.delete_namespaced_custom_object(
            GROUP, VERSION, namespace, PLURAL, name, _request_timeout=self.timeout_s))

    # -- ConfigMaps (the rollout state) ----------------------------------------------
    def get_configmap(self, namespace: str, name: str) -> dict[str, Any]:
        what = f"ConfigMap {namespace}/{name}"
        result = self._call(what, lambda: self._core.read_namespaced_config_map(
            name, namespace, _request_timeout=self.timeout_s))
        return self._plain(what, result)

    def create_configmap(self, namespace: str, body: Mapping[str, Any]) -> dict[str, Any]:
        """Create a ConfigMap; Conflict if one of that name exists already."""
        name = str((body.get("metadata") or {}).get("name", ""))
        what = f"ConfigMap {namespace}/{name}"
        obj: Any = dict(body)
        result = self._call(what, lambda: self._core.create_namespaced_config_map(
            namespace, obj, _request_timeout=self.timeout_s))
        return self._plain(what, result)

    def replace_configmap(self, namespace: str, body: Mapping[str, Any]) -> dict[str, Any]:
        """Replace (PUT) a ConfigMap; with metadata.resourceVersion set, 409 when it moved."""
        name = str((body.get("metadata") or {}).get("name", ""))
        what = f"ConfigMap {namespace}/{name}"
        obj: Any = dict(body)
        result = self._call(what, lambda: self._core.replace_namespaced_config_map(
            name, namespace, obj, _request_timeout=self.timeout_s))
        return self._plain(what, result)

    # -- what Standard mode runs and routes ----------------------------------------------
    def get_deployment(self, namespace: str, name: str) -> dict[str, Any]:
        what = f"Deployment {namespace}/{name}"
        result = self._call(what, lambda: self._apps.read_namespaced_deployment(
            name, namespace, _request_timeout=self.timeout_s))
        return self._plain(what, result)

    def create_deployment(self, namespace: str, body: Mapping[str, Any]) -> dict[str, Any]:
        what = f"Deployment {namespace}/{(body.get('metadata') or {}).get('name', '')}"
        plain: Any = dict(body)  # the client serialises plain dicts as they are
        return self._plain(what, self._call(what, lambda: self._apps.create_namespaced_deployment(
            namespace, plain, _request_timeout=self.timeout_s)))

    def patch_deployment(self, namespace: str, name: str,
                         patch: Mapping[str, Any]) -> dict[str, Any]:
        """A merge patch (the client sends a dict as a strategic merge patch)."""
        what = f"Deployment {namespace}/{name}"
        return self._plain(what, self._call(what, lambda: self._apps.patch_namespaced_deployment(
            name, namespace, dict(patch), _request_timeout=self.timeout_s)))

    def delete_deployment(self, namespace: str, name: str) -> None:
        what = f"Deployment {namespace}/{name}"
        self._call(what, lambda: self._apps.delete_namespaced_deployment(
            name, namespace, _request_timeout=self.timeout_s))

    # -- HorizontalPodAutoscalers KServe leaves behind (Standard mode) ------------------
    def get_hpa(self, namespace: str, name: str) -> dict[str, Any]:
        what = f"HorizontalPodAutoscaler {namespace}/{name}"
        result = self._call(what, lambda: (
            self._autoscaling.read_namespaced_horizontal_pod_autoscaler(
                name, namespace, _request_timeout=self.timeout_s)))
        return self._plain(what, result)

    def delete_hpa(self, namespace: str, name: str) -> None:
        what = f"HorizontalPodAutoscaler {namespace}/{name}"
        self._call(what, lambda: self._autoscaling.delete_namespaced_horizontal_pod_autoscaler(
            name, namespace, _request_timeout=self.timeout_s))

    # -- KEDA ScaledObjects (queue mode's workers) -----------------------------------
    def get_scaledobject(self, namespace: str, name: str) -> dict[str, Any]:
        what = f"ScaledObject {namespace}/{name}"
        return _as_object(what, self._call(what, lambda: self._custom.get_namespaced_custom_object(
            KEDA_GROUP, KEDA_VERSION, namespace, SCALEDOBJECTS, name,
            _request_timeout=self.timeout_s)))

    def create_scaledobject(self, namespace: str, body: Mapping[str, Any]) -> dict[str, Any]:
        what = f"ScaledObject {namespace}/{(body.get('metadata') or {}).get('name', '')}"
        return _as_object(what, self._call(what, lambda: (
            self._custom.create_namespaced_custom_object(
                KEDA_GROUP, KEDA_VERSION, namespace, SCALEDOBJECTS, dict(body),
                _request_timeout=self.timeout_s))))

    def patch_scaledobject(self, namespace: str, name: str,
                           patch: Mapping[str, Any]) -> dict[str, Any]:
        what = f"ScaledObject {namespace}/{name}"
        return _as_object(what, self._call(what, lambda: (
            self._custom.patch_namespaced_custom_object(
                KEDA_GROUP, KEDA_VERSION, namespace, SCALEDOBJECTS, name, dict(patch),
                _request_timeout=self.timeout_s))))

    def delete_scaledobject(self, namespace: str, name: str) -> None:
        what = f"ScaledObject {namespace}/{name}"
        self._call(what, lambda: self._custom.delete_namespaced_custom_object(
            KEDA_GROUP, KEDA_VERSION, namespace, SCALEDOBJECTS, name,
            _request_timeout=self.timeout_s))

    def get_httproute(self, namespace: str, name: str) -> dict[str, Any]:
        what = f"HTTPRoute {namespace}/{name}"
        return _as_object(what, self._call(what, lambda: self._custom.get_namespaced_custom_object(
            GATEWAY_GROUP, GATEWAY_VERSION, namespace, HTTPROUTES, name,
            _request_timeout=self.timeout_s)))

    def get_revision(self, namespace: str, name: str) -> dict[str, Any]:
        """A Knative Revision (its annotations say which storageUri it runs)."""
        what = f"Knative Revision {namespace}/{name}"
        return _as_object(what, self._call(what, lambda: self._custom.get_namespaced_custom_object(
            KNATIVE_GROUP, KNATIVE_VERSION, namespace, REVISIONS, name,
            _request_timeout=self.timeout_s)))

    def _plain(self, what: str, result: Any) -> dict[str, Any]:
        """A typed client model as the plain camelCase dict the API sent."""
        return _as_object(what, self._api_client.sanitize_for_serialization(result))

    # -- Events --------------------------------------------------------------------
    def create_event(self, namespace: str, body: Mapping[str, Any]) -> None:
        event: Any = dict(body)  # the client serialises plain dicts as they are
        self._call(f"Event in {namespace}", lambda: self._core.create_namespaced_event(
            namespace, event, _request_timeout=self.timeout_s))

    def list_events(self, namespace: str, involved_name: str) -> list[dict[str, Any]]:
        """Events about the InferenceService ``involved_name``, oldest first."""
        selector = f"involvedObject.name={involved_name},involvedObject.kind={KIND}"
        result = self._call(f"Events in {namespace}", lambda: self._core.list_namespaced_event(
            namespace, field_selector=selector, _request_timeout=self.timeout_s))
        events = [self._api_client.sanitize_for_serialization(item) for item in result.items]
        # Filter again: field selectors are advisory for some API servers and proxies.
        mine = [e for e in events if (e.get("involvedObject") or {}).get("name") == involved_name]
        return sorted(mine, key=lambda e: str(e.get("eventTime") or e.get("lastTimestamp") or ""))

    # -- errors --------------------------------------------------------------------
    def _call(self, what: str, fn: Callable[[], T]) -> T:
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError

        try:
            return fn()
        except ApiException as exc:
            raise _api_error(what, exc) from exc
        except HTTPError as exc:
            raise KubeError(f"cannot reach the Kubernetes API at {self.host}: "
                            f"{_first_line(exc)}") from exc


def _as_object(what: str, value: object) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise KubeError(f"{what}: the Kubernetes API answered {type(value).__name__}, "
                        "not an object")
    return value


def _api_error(what: str, exc: Any) -> KubeError:
    status = int(exc.status or 0)
    message = _status_message(exc.body) or str(exc.reason or "")
    if status == 404:
        return NotFound(f"{what} not found")
    if status == 409:
        return Conflict(f"{what} changed while we wrote it: {message}")
    if status in (401, 403):
        return KubeError(f"{what}: not allowed ({status}): {message}")
    return KubeError(f"{what}: Kubernetes API answered {status}: {message}")


def _status_message(body: Any) -> str:
    import json

    if not body:
        return ""
    try:
        data = json.loads(body)
    except (TypeError, ValueError):
        return _first_line(body)[:200]
    return _first_line(str(data.get("message", "")))[:200] if isinstance(data, dict) else ""


def _config_loader() -> Any:
    """The official client's kubeconfig loader (``kubernetes.config``), which is untyped."""
    from kubernetes import config

    return config


def _context_namespace(path: str, context: str | None) -> str:
    contexts, active = _config_loader().list_kube_config_contexts(config_file=path)
    chosen = active
    if context is not None:
        chosen = next((c for c in contexts if c.get("name") == context), active)
    namespace = ((chosen or {}).get("context") or {}).get("namespace")
    return str(namespace) if namespace else "default"


def _first_line(value: object) -> str:
    text = str(value).strip()
    return text.splitlines()[0] if text else value.__class__.__name__
