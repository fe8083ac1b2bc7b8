"""How KServe routes to a predictor, and its ``IngressReady`` condition.

Ported from kserve aaac4e294 ``pkg/controller/v1beta1/inferenceservice/reconcilers/ingress/``:

* ``kube_ingress_reconciler.go`` (Standard mode, ``enableGatewayApi: false``, the shipped
  default): ``RawIngressReconciler.Reconcile``, ``createRawIngress``, ``generateRule``,
  ``semanticIngressEquals``, ``createAddress``. One Ingress named after the
  InferenceService, every rule to the *stable* predictor Service: no split, ever.
* ``httproute_reconciler.go`` (Standard mode, ``enableGatewayApi: true``):
  ``createRawPredictorHTTPRoute``, ``createRawTopLevelHTTPRoute`` (the predictor-only
  case), ``createHTTPRouteRule``, ``addIsvcHeaders``, ``resolveTimeout``,
  ``applyCanaryWeights``, ``semanticHttpRouteEquals``, ``isHTTPRouteReady``,
  ``reconcileHTTPRouteStatus``, ``RawHTTPRouteReconciler.Reconcile``.
* ``ingress_reconciler.go`` (Knative mode): ``IngressReconciler.Reconcile`` with no Istio
  VirtualService CRD (``reconcileVirtualService`` returns early, as upstream does then),
  ``reconcileExternalService``, ``getServiceHost``/``getHostBasedServiceUrl``.

Transformers and explainers are not emulated (modelctl runs neither), so only the
predictor branches are ported.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from typing import Any

from tests.support.kserve import _api, _status
from tests.support.kserve import config as c
from tests.support.kserve._conditions import FALSE, TRUE, get_condition

INGRESS_READY = _status.INGRESS_READY


def _ready(status: dict[str, Any], now: Callable[[], float], value: str, reason: str = "",
           message: str = "") -> None:
    _status.set_condition(status, INGRESS_READY, {"status": value, "reason": reason,
                                                  "message": message}, now)


def _is_internal(isvc: Mapping[str, Any], config: c.KServeConfig) -> bool:
    labels = (isvc.get("metadata") or {}).get("labels") or {}
    return labels.get(c.NETWORK_VISIBILITY) == c.CLUSTER_LOCAL or (
        config.ingress_domain == c.CLUSTER_LOCAL_DOMAIN)


def _names(isvc: Mapping[str, Any]) -> tuple[str, str, str]:
    meta = isvc["metadata"]
    predictor = (isvc.get("spec") or {}).get("predictor") or {}
    return meta["name"], meta.get("namespace", ""), c.predictor_service_name(
        meta["name"], predictor.get("name"))


def _url_and_address(snapshot: _api.Snapshot, isvc: Mapping[str, Any], status: dict[str, Any],
                     config: c.KServeConfig) -> None:
    """``createRawURL`` (the InferenceService's host) and ``createAddress`` (the entry
    point Service's cluster host; a headless Service adds its HTTP target port)."""
    name, namespace, predictor = _names(isvc)
    status["url"] = f"{config.url_scheme}://{config.domain(name, namespace)}"
    service = snapshot.get(_api.SERVICE, predictor)
    if service is None:
        raise LookupError(f"failed to get entry point service {predictor}")
    host = c.service_hostname(predictor, namespace)
    if (service.get("spec") or {}).get("clusterIP") == "None":
        ports = [p for p in service["spec"].get("ports") or []
                 if "grpc" not in str(p.get("name", "")).lower()
                 and "h2c" not in str(p.get("name", "")).lower()]
        port = ports[0].get("targetPort") if ports else None
        host = f"{host}:{port or c.DEFAULT_HTTP_PORT}"
    status["address"] = {"url": f"http://{host}"}


def _rule(host: str, service: str) -> dict[str, Any]:
    """``generateRule``: path "/" (Prefix) to ``service`` port 80."""
    return {"host": host, "http": {"paths": [{
        "path": "/", "pathType": "Prefix",
        "backend": {"service": {"name": service, "port": {"number": c.COMMON_HTTP_PORT}}}}]}}


def reconcile_raw_ingress(snapshot: _api.Snapshot, isvc: dict[str, Any], status: dict[str, Any],
                          config: c.KServeConfig, now: Callable[[], float]) -> None:
    """``RawIngressReconciler.Reconcile`` + ``createRawIngress``."""
    name, namespace, predictor = _names(isvc)
    if not _is_internal(isvc, config) and not config.disable_ingress_creation:
        if not _status.is_condition_ready(status, _status.PREDICTOR_READY):
            _ready(status, now, FALSE, "Predictor ingress not created")
            return
        desired = {
            "metadata": {"name": name, "namespace": namespace,
                         "annotations": dict(isvc["metadata"].get("annotations") or {}),
                         "ownerReferences": [_api.owner_reference(isvc, _api.ISVC)]},
            "spec": {"ingressClassName": config.ingress_class_name, "rules": [
                _rule(config.domain(name, namespace), predictor),
                _rule(config.domain(predictor, namespace), predictor)]},
        }
        existing = snapshot.get(_api.INGRESS, name)
        if existing is None:
            snapshot.create(_api.INGRESS, desired)
        elif existing.get("spec") != desired["spec"]:
            snapshot.replace(_api.INGRESS, desired)
    _url_and_address(snapshot, isvc, status, config)
    _ready(status, now, TRUE)


def apply_canary_weights(isvc: Mapping[str, Any], status: Mapping[str, Any],
                         route: dict[str, Any]) -> None:
    """``applyCanaryWeights``: each rule's backends become the stable one weighted with what
    the Ready canaries leave, then every Ready canary's Service with its trafficPercent.
    A canary that ``status.canaryStatuses`` does not report Ready gets no backend."""
    name = isvc["metadata"]["name"]
    ready = {s.get("name"): bool(s.get("ready")) for s in status.get("canaryStatuses") or []}
    canaries = (isvc.get("spec") or {}).get("canary") or []
    ready_percent = sum(int(canary.get("trafficPercent") or 0) for canary in canaries
                        if ready.get((canary.get("predictor") or {}).get("name")))
    for rule in route["spec"]["rules"]:
        if not rule.get("backendRefs"):
            continue
        template = rule["backendRefs"][0]
        reference = {k: v for k, v in template.items() if k != "weight"}
        backends = [{**reference, "weight": 100 - ready_percent}]
        for canary in canaries:
            canary_name = (canary.get("predictor") or {}).get("name")
            if not ready.get(canary_name):
                continue
            backend = {"kind": template.get("kind"),
                       "name": c.predictor_service_name(name, canary_name),
                       "namespace": template.get("namespace"), "port": template.get("port"),
                       "weight": int(canary.get("trafficPercent") or 0)}
            backends.append({k: v for k, v in backend.items() if v is not None})
        rule["backendRefs"] = backends


def _http_route(isvc: Mapping[str, Any], status: Mapping[str, Any], config: c.KServeConfig,
                route_name: str, host: str) -> dict[str, Any]:
    """``createRawPredictorHTTPRoute`` / ``createRawTopLevelHTTPRoute`` (predictor only):
    one rule (``FallbackPrefix``) to the stable predictor Service on port 80 (its port is
    not gRPC, so ``detectServiceProtocolPorts`` finds no dual protocol)."""
    name, namespace, predictor = _names(isvc)
    timeout = ((isvc.get("spec") or {}).get("predictor") or {}).get("timeout")
    rule = {
        "matches": [{"path": {"type": "RegularExpression", "value": c.FALLBACK_PREFIX}}],
        "filters": [{"type": "RequestHeaderModifier", "requestHeaderModifier": {"set": [
            {"name": c.ISVC_NAME_HEADER, "value": name},
            {"name": c.ISVC_NAMESPACE_HEADER, "value": namespace}]}}],
        "backendRefs": [{"kind": "Service", "name": predictor, "namespace": namespace,
                         "port": c.COMMON_HTTP_PORT}],
        "timeouts": {"request": f"{int(timeout)}s" if timeout is not None else "60s"},
    }
    gateway_namespace, gateway = config.kserve_ingress_gateway.split("/")
    meta = isvc["metadata"]
    route = {
        "metadata": {
            "name": route_name, "namespace": namespace,
            "annotations": {k: v for k, v in (meta.get("annotations") or {}).items()
                            if k not in config.disallowed_annotations},
            "labels": {k: v for k, v in (meta.get("labels") or {}).items()
                       if k not in config.disallowed_labels},
            "ownerReferences": [_api.owner_reference(isvc, _api.ISVC)]},
        "spec": {"hostnames": [host], "rules": [rule], "parentRefs": [{
            "group": "gateway.networking.k8s.io", "kind": "Gateway",
            "namespace": gateway_namespace, "name": gateway}]},
    }
    if (isvc.get("spec") or {}).get("canary"):
        apply_canary_weights(isvc, status, route)
    return route


def deep_derivative(desired: Any, existing: Any) -> bool:
    """apimachinery ``equality.Semantic.DeepDerivative``: what ``desired`` leaves unset
    (empty strings, maps, lists, absent keys) is not compared; a shorter list is compared
    with the start of the longer one."""
    if isinstance(desired, Mapping):
        if not isinstance(existing, Mapping):
            return not desired
        return all(deep_derivative(value, existing.get(key)) for key, value in desired.items()
                   if value not in (None, "", [], {}))
    if isinstance(desired, list):
        if not desired:
            return True
        if not isinstance(existing, list) or len(desired) > len(existing):
            return False
        return all(deep_derivative(a, b) for a, b in zip(desired, existing, strict=False))
    if desired in (None, ""):
        return True
    return bool(desired == existing)


def semantic_http_route_equals(desired: Mapping[str, Any], existing: Mapping[str, Any]) -> bool:
    """``semanticHttpRouteEquals``: DeepDerivative on labels, annotations and spec, plus
    equal rule and backendRef counts (a canary's addition or removal)."""
    d_meta, e_meta = desired.get("metadata") or {}, existing.get("metadata") or {}
    if not deep_derivative(d_meta.get("labels") or {}, e_meta.get("labels") or {}) or (
            not deep_derivative(d_meta.get("annotations") or {}, e_meta.get("annotations") or {})):
        return False
    d_rules = (desired.get("spec") or {}).get("rules") or []
    e_rules = (existing.get("spec") or {}).get("rules") or []
    if len(d_rules) != len(e_rules) or any(
            len(a.get("backendRefs") or []) != len(b.get("backendRefs") or [])
            for a, b in zip(d_rules, e_rules, strict=True)):
        return False
    return deep_derivative(desired.get("spec"), existing.get("spec"))


def is_http_route_ready(route: Mapping[str, Any]) -> tuple[bool, str, str]:
    """``isHTTPRouteReady``: some parent status, and no parent condition False."""
    parents = (route.get("status") or {}).get("parents") or []
    if not parents:
        return False, "ParentStatusNotAvailable", "HttpRouteNotReady"
    for parent in parents:
        for condition in parent.get("conditions") or []:
            if condition.get("status") == FALSE:
                return False, condition.get("reason", ""), condition.get("message", "")
    return True, "", ""


def reconcile_http_routes(snapshot: _api.Snapshot, isvc: dict[str, Any], status: dict[str, Any],
                          config: c.KServeConfig, now: Callable[[], float]) -> None:
    """``RawHTTPRouteReconciler.Reconcile``: the predictor HTTPRoute ``<isvc>-predictor``
    (a name without predictor.name, so it survives promotion) and the top-level one
    ``<isvc>``, written once the predictor is Ready; then IngressReady from their status."""
    name, namespace, _ = _names(isvc)
    if _is_internal(isvc, config) or config.disable_ingress_creation:
        _ready(status, now, TRUE)
    else:
        route_name = c.predictor_service_name(name)
        for kind, host in ((route_name, config.domain(route_name, namespace)),
                           (name, config.domain(name, namespace))):
            if not _status.is_condition_ready(status, _status.PREDICTOR_READY):
                _ready(status, now, FALSE, "Predictor ingress not created")
                continue
            desired = _http_route(isvc, status, config, kind, host)
            existing = snapshot.get(_api.HTTPROUTE, kind)
            if existing is None:
                snapshot.create(_api.HTTPROUTE, desired)
            elif not semantic_http_route_equals(desired, existing):
                desired["metadata"]["resourceVersion"] = existing["metadata"].get(
                    "resourceVersion")
                snapshot.replace(_api.HTTPROUTE, desired)
        for route, component in ((route_name, "Predictor"), (name, "InferenceService")):
            found = snapshot.get(_api.HTTPROUTE, route)
            if found is None:
                _ready(status, now, FALSE, f"{component} Deployment NotReady",
                       f"{component} HTTPRoute not created")
                return
            ok, reason, message = is_http_route_ready(found)
            if not ok:
                _ready(status, now, FALSE, reason, f"{component} {message}")
                return
        _ready(status, now, TRUE)
    _url_and_address(snapshot, isvc, status, config)


def reconcile_knative_ingress(snapshot: _api.Snapshot, isvc: dict[str, Any],
                              status: dict[str, Any], config: c.KServeConfig,
                              now: Callable[[], float]) -> None:
    """``IngressReconciler.Reconcile`` without the VirtualService CRD: the ExternalName
    Service ``<isvc>`` to the local gateway, then the InferenceService URL from the
    predictor's (``-predictor`` dropped) and IngressReady once there is one."""
    name, namespace, _ = _names(isvc)
    desired = {"metadata": {"name": name, "namespace": namespace,
                            "ownerReferences": [_api.owner_reference(isvc, _api.ISVC)]},
               "spec": {"externalName": config.local_gateway_service, "type": "ExternalName",
                        "sessionAffinity": "None"}}
    existing = snapshot.get(_api.SERVICE, name)
    if existing is None:
        snapshot.create(_api.SERVICE, desired)
    elif not deep_derivative(desired, existing):
        updated = copy.deepcopy(existing)
        updated["spec"] = desired["spec"]
        snapshot.replace(_api.SERVICE, updated)
    url = ((status.get("components") or {}).get(c.PREDICTOR) or {}).get("url")
    if not url:
        return  # "service host and serviceurl are empty"
    _, _, rest = str(url).partition("://")
    rest = rest.replace(f"-{c.PREDICTOR}-default", "", 1) if "-default" in rest else (
        rest.replace(f"-{c.PREDICTOR}", "", 1))
    status["url"] = f"{config.url_scheme}://{rest}"
    status["address"] = {"url": f"http://{c.service_hostname(name, namespace)}"}
    _ready(status, now, TRUE)


def ingress_ready(status: Mapping[str, Any]) -> bool:
    condition = get_condition(dict(status), INGRESS_READY)
    return condition is not None and condition.get("status") == TRUE
