"""KServe's Standard (raw Kubernetes) mode: the Deployment, Service and HPA per predictor.

Ported from kserve aaac4e294, ``pkg/controller/v1beta1/inferenceservice/``:

* ``reconcilers/deployment/deployment_reconciler.go``: ``createRawDefaultDeployment``,
  ``setDefaultPodSpec``, ``setDefaultDeploymentSpec``, ``checkDeploymentExist``, ``Reconcile``;
* ``reconcilers/service/service_reconciler.go``: ``createDefaultSvc``, ``semanticServiceEquals``;
* ``reconcilers/hpa/hpa_reconciler.go``: ``createHPA``, ``getHPAMetrics`` (the default CPU
  metric), ``shouldCreateHPA``, ``shouldDeleteHPA``, ``semanticHPAEquals``;
* ``reconcilers/raw/raw_kube_reconciler.go`` ``Reconcile`` (Service, Deployment, HPA) and
  ``createRawURL``;
* ``components/predictor.go``: ``reconcileCanaryDeployments`` (canary Deployments, their
  ``canaryStatuses``, ``CanaryPredictorReady``, orphan cleanup) and ``reconcileRawDeployment``.

A Go detail kept on purpose: ``createRawDefaultDeployment`` adds the ``app`` label to the
*shared* ObjectMeta labels map, so the Service and HPA built from the same ObjectMeta
carry it too.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from typing import Any

from tests.support.kserve import _api, _resources, _status
from tests.support.kserve import config as c
from tests.support.kserve._conditions import FALSE, TRUE
from tests.support.kserve._resources import PredictorResources
from tests.support.kube_api import deployment_defaults

CANARY_PREDICTOR_READY = "CanaryPredictorReady"


def set_default_pod_spec(spec: dict[str, Any]) -> dict[str, Any]:
    """``setDefaultPodSpec``."""
    spec = copy.deepcopy(spec)
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("securityContext", {})
    spec.setdefault("schedulerName", "default-scheduler")
    for container in spec.get("containers") or []:
        container.setdefault("terminationMessagePath", "/dev/termination-log")
        container.setdefault("terminationMessagePolicy", "File")
        container.setdefault("imagePullPolicy", "IfNotPresent")
        if container.get("name") in (c.CONTAINER_NAME, "transformer-container") and (
                container.get("readinessProbe") is None):
            ports = container.get("ports") or []
            port = ports[0].get("containerPort") if ports else c.DEFAULT_HTTP_PORT
            container["readinessProbe"] = {"tcpSocket": {"port": port}, "timeoutSeconds": 1,
                                           "periodSeconds": 10, "successThreshold": 1,
                                           "failureThreshold": 3}
    return spec


def autoscaler_class(annotations: Mapping[str, str] | None) -> str:
    return (annotations or {}).get(c.AUTOSCALER_CLASS, c.AUTOSCALER_CLASS_HPA)


def create_deployment(res: PredictorResources, ext: Mapping[str, Any],
                      owner: dict[str, Any]) -> dict[str, Any]:
    """``createRawDefaultDeployment`` (+ ``setDefaultDeploymentSpec``; the ConfigMap's
    rollout strategy applies only with ``defaultDeploymentMode: Standard`` and a
    ``deploymentRolloutStrategy``, which the stand-in's config does not carry)."""
    app = c.raw_service_label(res.name)
    res.labels[c.RAW_APP_LABEL] = app  # the shared labels map (see the module docstring)
    meta = {"name": res.name, "namespace": res.namespace, "labels": dict(res.labels),
            "annotations": dict(res.annotations),
            "ownerReferences": [_api.owner_reference(owner, _api.ISVC)]}
    spec: dict[str, Any] = {
        "selector": {"matchLabels": {c.RAW_APP_LABEL: app}},
        "template": {"metadata": {"name": res.name, "namespace": res.namespace,
                                  "labels": dict(res.labels),
                                  "annotations": dict(res.annotations)},
                     "spec": set_default_pod_spec(res.pod_spec)},
    }
    if ext.get("deploymentStrategy") is not None:
        spec["strategy"] = copy.deepcopy(ext["deploymentStrategy"])
    else:
        spec["strategy"] = {"type": "RollingUpdate",
                            "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": "25%"}}
        spec["revisionHistoryLimit"] = 10
        spec["progressDeadlineSeconds"] = 600
    if ext.get("minReplicas") is not None and (
            autoscaler_class(res.annotations) == c.AUTOSCALER_CLASS_NONE):
        spec["replicas"] = int(ext["minReplicas"])
    return {"metadata": meta, "spec": spec}


def reconcile_deployment(snapshot: _api.Snapshot, desired: dict[str, Any]) -> dict[str, Any]:
    """``checkDeploymentExist`` + ``DeploymentReconciler.Reconcile``. Replicas are left out
    of the comparison and the update unless the autoscaler class is ``none`` (the HPA owns
    them). The strategic-merge patch KServe sends is applied as the update it amounts to:
    the desired spec and metadata over the existing object. Returns the Deployment whose
    status KServe propagates (the desired one, without status, right after a create)."""
    existing = snapshot.get(_api.DEPLOYMENT, desired["metadata"]["name"])
    if existing is None:
        snapshot.create(_api.DEPLOYMENT, desired)
        return desired
    ignore_replicas = autoscaler_class(existing["metadata"].get("annotations")) != (
        c.AUTOSCALER_CLASS_NONE)
    want, have = _dry_run_defaults(desired["spec"]), dict(existing.get("spec") or {})
    if ignore_replicas:
        want.pop("replicas", None)
        have.pop("replicas", None)
    if want == have:
        return existing
    updated = copy.deepcopy(existing)
    keep = updated["spec"].get("replicas")
    updated["spec"] = copy.deepcopy(desired["spec"])
    if autoscaler_class(desired["metadata"].get("annotations")) != c.AUTOSCALER_CLASS_NONE:
        updated["spec"].pop("replicas", None)
        if keep is not None:
            updated["spec"]["replicas"] = keep
    for key in ("labels", "annotations", "ownerReferences"):
        updated["metadata"][key] = copy.deepcopy(desired["metadata"][key])
    snapshot.replace(_api.DEPLOYMENT, updated)
    return existing  # "it carries the current .Status.Conditions before this spec update"


def _dry_run_defaults(spec: dict[str, Any]) -> dict[str, Any]:
    """What ``checkDeploymentExist``'s dry-run update adds to the desired spec: the API
    server's apps/v1 defaults (``SetDefaults_Deployment``)."""
    return deployment_defaults(copy.deepcopy(spec))


def create_service(res: PredictorResources, owner: dict[str, Any]) -> dict[str, Any]:
    """``createDefaultSvc``: the first container's ports, or ``<name>``: 80 -> 8080/TCP."""
    containers = res.pod_spec.get("containers") or []
    ports = (containers[0].get("ports") or []) if containers else []
    if ports:
        first = ports[0]
        service_ports = [{"name": first.get("name", ""), "port": c.COMMON_HTTP_PORT,
                          "targetPort": first["containerPort"],
                          "protocol": first.get("protocol", "")}]
        service_ports += [{"name": p.get("name", ""), "port": p["containerPort"],
                           "targetPort": p["containerPort"],
                           "protocol": p.get("protocol") or "TCP"} for p in ports[1:]]
        service_ports = [{k: v for k, v in p.items() if v != ""} for p in service_ports]
    else:
        service_ports = [{"name": res.name, "port": c.COMMON_HTTP_PORT,
                          "targetPort": c.DEFAULT_HTTP_PORT, "protocol": "TCP"}]
    return {"metadata": {"name": res.name, "namespace": res.namespace,
                         "labels": dict(res.labels), "annotations": dict(res.annotations),
                         "ownerReferences": [_api.owner_reference(owner, _api.ISVC)]},
            "spec": {"selector": {c.RAW_APP_LABEL: c.raw_service_label(res.name)},
                     "ports": service_ports}}


def reconcile_service(snapshot: _api.Snapshot, desired: dict[str, Any]) -> None:
    """``ServiceReconciler.Reconcile``: create, or update when ports or selector differ."""
    existing = snapshot.get(_api.SERVICE, desired["metadata"]["name"])
    if existing is None:
        snapshot.create(_api.SERVICE, desired)
        return
    spec = existing.get("spec") or {}
    if spec.get("ports") == desired["spec"]["ports"] and (
            spec.get("selector") == desired["spec"]["selector"]):
        return
    snapshot.replace(_api.SERVICE, desired)  # Update(desired): no resourceVersion


def create_hpa(res: PredictorResources, ext: Mapping[str, Any],
               owner: dict[str, Any]) -> dict[str, Any]:
    """``createHPA``: minReplicas (at least 1), maxReplicas raised to it, CPU utilization."""
    min_replicas = ext.get("minReplicas")
    minimum = int(min_replicas) if min_replicas is not None and int(min_replicas) >= 1 else (
        c.DEFAULT_MIN_REPLICAS)
    maximum = max(int(ext.get("maxReplicas") or 0), minimum)
    target = int(ext["scaleTarget"]) if ext.get("scaleTarget") is not None else (
        c.DEFAULT_CPU_UTILIZATION)
    metrics = [{"type": "Resource", "resource": {
        "name": "cpu", "target": {"type": "Utilization", "averageUtilization": target}}}]
    if ext.get("scaleMetric") not in (None, "cpu"):  # memory needs a scaleTarget
        metrics = [] if ext.get("scaleTarget") is None else [{"type": "Resource", "resource": {
            "name": ext["scaleMetric"],
            "target": {"type": "Utilization", "averageUtilization": target}}}]
    spec: dict[str, Any] = {
        "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": res.name},
        "minReplicas": minimum, "maxReplicas": maximum, "behavior": {}}
    if metrics:
        spec["metrics"] = metrics
    return {"metadata": {"name": res.name, "namespace": res.namespace,
                         "labels": dict(res.labels), "annotations": dict(res.annotations),
                         "ownerReferences": [_api.owner_reference(owner, _api.ISVC)]},
            "spec": spec}


def reconcile_hpa(snapshot: _api.Snapshot, desired: dict[str, Any]) -> None:
    """``HPAReconciler.Reconcile`` with ``checkHPAExist``."""
    name = desired["metadata"]["name"]
    klass = desired["metadata"]["annotations"].get(c.AUTOSCALER_CLASS)
    existing = snapshot.get(_api.HPA, name)
    if existing is None:
        if klass in (None, c.AUTOSCALER_CLASS_HPA):  # shouldCreateHPA
            snapshot.create(_api.HPA, desired)
        return
    owned = any(ref.get("kind") == "InferenceService"
                and str(ref.get("apiVersion", "")).startswith(c.KSERVE_GROUP)
                for ref in existing["metadata"].get("ownerReferences") or [])
    if owned and klass in (c.AUTOSCALER_CLASS_EXTERNAL, c.AUTOSCALER_CLASS_NONE):
        snapshot.delete(_api.HPA, name)  # shouldDeleteHPA
        return
    existing_class = (existing["metadata"].get("annotations") or {}).get(c.AUTOSCALER_CLASS)
    if existing.get("spec") == desired["spec"] and existing_class == klass:
        return  # semanticHPAEquals
    snapshot.replace(_api.HPA, desired)  # Update without a resourceVersion: unconditional


def raw_reconcile(snapshot: _api.Snapshot, res: PredictorResources, ext: Mapping[str, Any],
                  owner: dict[str, Any]) -> list[dict[str, Any]]:
    """``RawKubeReconciler.Reconcile``: Service, then Deployment, then HPA."""
    hpa = create_hpa(res, ext, owner)  # built before the Deployment adds "app" ...
    deployment = create_deployment(res, ext, owner)
    hpa["metadata"]["labels"] = dict(res.labels)  # ... but shares its labels map
    reconcile_service(snapshot, create_service(res, owner))
    result = reconcile_deployment(snapshot, deployment)
    reconcile_hpa(snapshot, hpa)
    return [result]


def raw_url(config: c.KServeConfig, res: PredictorResources) -> str:
    """raw_kube_reconciler.go ``createRawURL``: http://<GenerateDomainName(name)>."""
    return f"http://{config.domain(res.name, res.namespace)}"


def reconcile_canary_deployments(snapshot: _api.Snapshot, isvc: dict[str, Any],
                                 status: dict[str, Any], config: c.KServeConfig,
                                 now: Callable[[], float]) -> None:
    """``reconcileCanaryDeployments``: one Deployment per ``spec.canary[]`` entry (its
    predictor merged over the stable one, a fixed replica count), ``canaryStatuses``
    (ready = AvailableReplicas > 0; trafficPercent echoes the spec), the
    CanaryPredictorReady condition, and deletion of every predictor Deployment and
    Service of this InferenceService that is neither the stable one nor a canary."""
    name = isvc["metadata"]["name"]
    stable = _resources.predictor_of(isvc)
    expected = {c.predictor_service_name(name, stable.get("name"))}
    canaries = (isvc.get("spec") or {}).get("canary") or []
    for canary in canaries:
        canary_name = (canary.get("predictor") or {}).get("name")
        expected.add(c.predictor_service_name(name, canary_name))
        replicas = _resources.canary_replica_count(isvc, canary)
        merged = _resources.build_canary_predictor(stable, canary, replicas)
        res = _resources.build_predictor_resources(isvc, merged, config)
        raw_reconcile(snapshot, res, {"minReplicas": replicas}, isvc)
    statuses, all_ready = [], True
    for canary in canaries:
        canary_name = (canary.get("predictor") or {}).get("name")
        deploy = snapshot.get(_api.DEPLOYMENT, c.predictor_service_name(name, canary_name))
        ready = deploy is not None and int(
            (deploy.get("status") or {}).get("availableReplicas") or 0) > 0
        all_ready = all_ready and ready
        statuses.append({"name": canary_name, "ready": ready,
                         "trafficPercent": int(canary.get("trafficPercent") or 0),
                         "modelStatus": {"transitionStatus": ""}})
    if statuses:
        status["canaryStatuses"] = statuses
    else:
        status.pop("canaryStatuses", None)
    if canaries:
        condition = {"status": TRUE, "reason": "AllCanariesReady"} if all_ready else {
            "status": FALSE, "reason": "CanariesNotReady"}
        _status.set_condition(status, CANARY_PREDICTOR_READY, condition, now)
    else:
        _status.conditions(status, now).clear(CANARY_PREDICTOR_READY)
    selector = {c.ISVC_LABEL: name, c.COMPONENT_LABEL: c.PREDICTOR}
    for kind in (_api.DEPLOYMENT, _api.SERVICE):
        for obj in snapshot.list(kind, selector):
            if obj["metadata"]["name"] not in expected:
                snapshot.delete(kind, obj["metadata"]["name"])


def reconcile_raw_deployment(snapshot: _api.Snapshot, isvc: dict[str, Any],
                             status: dict[str, Any], res: PredictorResources,
                             config: c.KServeConfig, now: Callable[[], float]) -> None:
    """``reconcileRawDeployment``: the stable predictor, its minReplicas lowered by
    ``adjustStableMinReplicasForCanaries``, then ``PropagateRawStatus``."""
    ext = dict(_resources.predictor_of(isvc))
    adjusted = _resources.adjust_stable_min_replicas(
        {**isvc, "status": status}, ext.get("minReplicas"))
    if adjusted is not None:
        ext["minReplicas"] = adjusted
    deployments = raw_reconcile(snapshot, res, ext, isvc)
    _status.propagate_raw_status(status, c.PREDICTOR, deployments, raw_url(config, res), now)
