"""KServe's side of Knative mode: the Knative Service it writes for a predictor.

Ported from kserve aaac4e294 ``pkg/controller/v1beta1/inferenceservice/reconcilers/knative/
ksvc_reconciler.go`` (``createKnativeService``, ``reconcileKsvc``, ``semanticEquals``,
``KsvcReconciler.Reconcile``) and ``pkg/controller/v1alpha1/utils/utils.go``
(``SetAutoScalingAnnotations``).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from tests.support.kserve import _api
from tests.support.kserve import config as c
from tests.support.kserve._resources import PredictorResources

# managedKsvcAnnotations: moved from the revision template to the ksvc's own metadata.
MANAGED_KSVC_ANNOTATIONS = (c.ROLLOUT_DURATION, c.OPENSHIFT_PASSTHROUGH)


def set_autoscaling_annotations(annotations: dict[str, str], ext: Mapping[str, Any]) -> None:
    """``SetAutoScalingAnnotations``: class KPA unless set, target/metric when given,
    min-scale from minReplicas (default 1), max-scale unless maxReplicas is 0."""
    annotations.setdefault(c.KNATIVE_CLASS, c.KNATIVE_KPA)
    if ext.get("scaleTarget") is not None:
        annotations[c.KNATIVE_TARGET] = str(int(ext["scaleTarget"]))
    if ext.get("scaleMetric") is not None:
        annotations[c.KNATIVE_METRIC] = str(ext["scaleMetric"])
    min_replicas = ext.get("minReplicas")
    annotations[c.KNATIVE_MIN_SCALE] = str(
        int(min_replicas) if min_replicas is not None else c.DEFAULT_MIN_REPLICAS)
    if int(ext.get("maxReplicas") or 0) != 0:
        annotations[c.KNATIVE_MAX_SCALE] = str(int(ext["maxReplicas"]))


def traffic_targets(percent: int | None, rolled_out: str, annotations: Mapping[str, str]
                    ) -> list[dict[str, Any]]:
    """``createKnativeService``'s traffic: with canaryTrafficPercent *and* a
    latestRolledoutRevision, ``percent`` to the latest revision and the rest to the
    rolled-out one (tag ``prev``); otherwise 100% to the latest revision. Tag ``latest``
    only with ``serving.kserve.io/enable-tag-routing: "true"``."""
    tagged = annotations.get(c.ENABLE_TAG_ROUTING) == "true"
    if percent is not None and rolled_out:
        latest: dict[str, Any] = {"latestRevision": True, "percent": int(percent)}
        if tagged:
            latest["tag"] = "latest"
        targets = [latest]
        if int(percent) < 100:
            targets.append({"revisionName": rolled_out, "latestRevision": False,
                            "percent": 100 - int(percent), "tag": "prev"})
        return targets
    latest = {"latestRevision": True, "percent": 100}  # blue-green rollout
    if tagged:
        latest["tag"] = "latest"
    return [latest]


def create_knative_service(res: PredictorResources, predictor: Mapping[str, Any],
                           component_status: Mapping[str, Any], config: c.KServeConfig,
                           owner: dict[str, Any]) -> dict[str, Any]:
    """``createKnativeService``: the desired ``serving.knative.dev/v1`` Service."""
    annotations = dict(res.annotations)
    set_autoscaling_annotations(annotations, predictor)
    ksvc_annotations = {key: annotations.pop(key) for key in MANAGED_KSVC_ANNOTATIONS
                        if key in annotations}
    traffic = traffic_targets(predictor.get("canaryTrafficPercent"),
                              str(component_status.get("latestRolledoutRevision") or ""),
                              annotations)
    labels = {k: v for k, v in res.labels.items() if k not in config.disallowed_labels}
    revision_spec: dict[str, Any] = {}
    if predictor.get("timeout") is not None:
        revision_spec["timeoutSeconds"] = predictor["timeout"]
        revision_spec["responseStartTimeoutSeconds"] = predictor["timeout"]
    if predictor.get("containerConcurrency") is not None:
        revision_spec["containerConcurrency"] = predictor["containerConcurrency"]
    revision_spec.update(copy.deepcopy(res.pod_spec))  # RevisionSpec inlines the PodSpec
    return {
        "metadata": {"name": res.name, "namespace": res.namespace, "labels": dict(res.labels),
                     "annotations": ksvc_annotations,
                     "ownerReferences": [_api.owner_reference(owner, _api.ISVC)]},
        "spec": {"template": {"metadata": {"labels": labels, "annotations": annotations},
                              "spec": revision_spec},
                 "traffic": traffic},
    }


def _managed(annotations: Mapping[str, str] | None) -> dict[str, str]:
    return {k: v for k, v in (annotations or {}).items() if k in MANAGED_KSVC_ANNOTATIONS}


def semantic_equals(desired: Mapping[str, Any], existing: Mapping[str, Any]) -> bool:
    """``semanticEquals``: managed annotations, the ConfigurationSpec (template), labels
    and the RouteSpec (traffic)."""
    d_meta, e_meta = desired.get("metadata") or {}, existing.get("metadata") or {}
    d_spec, e_spec = desired.get("spec") or {}, existing.get("spec") or {}
    return (_managed(d_meta.get("annotations")) == _managed(e_meta.get("annotations"))
            and d_spec.get("template") == e_spec.get("template")
            and (d_meta.get("labels") or {}) == (e_meta.get("labels") or {})
            and (d_spec.get("traffic") or []) == (e_spec.get("traffic") or []))


def reconcile_ksvc(snapshot: _api.Snapshot, desired: dict[str, Any]) -> dict[str, Any]:
    """``KsvcReconciler.Reconcile``: create when missing (returning the desired object's
    empty status); else, when ``semanticEquals`` says they differ, copy the template,
    labels, traffic and managed annotations onto the existing Service and update it. The
    status returned is the existing Service's (the update changes only its spec).

    KServe calls Update even when nothing differs; the API server treats an update that
    changes nothing as a no-op (no new generation), so skipping it is equivalent."""
    name = desired["metadata"]["name"]
    existing = snapshot.get(_api.KSVC, name)
    if existing is None:
        snapshot.create(_api.KSVC, desired)
        return {}
    if not semantic_equals(desired, existing):
        updated = copy.deepcopy(existing)
        updated.setdefault("spec", {})["template"] = copy.deepcopy(desired["spec"]["template"])
        updated["spec"]["traffic"] = copy.deepcopy(desired["spec"]["traffic"])
        meta = updated.setdefault("metadata", {})
        meta["labels"] = dict(desired["metadata"]["labels"])
        annotations = {k: v for k, v in (meta.get("annotations") or {}).items()
                       if k not in MANAGED_KSVC_ANNOTATIONS}
        meta["annotations"] = {**annotations, **desired["metadata"]["annotations"]}
        existing = snapshot.replace(_api.KSVC, updated)
    return dict(existing.get("status") or {})
