"""KServe's Standard mode: the canary is an entry of ``spec.canary[]``, its own Deployment.

What KServe does, from its source (kserve/kserve v0.20.0, the release the tests run,
``devcluster/modules.txt``; and at aaac4e294, after it, where it differs):

* ``components/predictor.go`` ``reconcileCanaryDeployments``: each entry runs as
  the Deployment and Service ``<isvc>-<predictor.name>-predictor``
  (``constants.PredictorServiceName``), built by ``buildCanaryPredictor``: the
  stable predictor with the entry merged over it, autoscaling zeroed, and a fixed
  replica count from ``canaryReplicaCount`` (the entry's ``minReplicas``, else
  ``ceil(stable minReplicas x trafficPercent / 100)``). Its scaler is built from
  ``ComponentExtensionSpec{MinReplicas}`` alone: under the default class an HPA
  pinned at that count, floored at 1 (``hpa_reconciler.go`` ``createHPA``: a
  "drained" entry with ``minReplicas: 0`` keeps one pod until the entry goes); under
  ``serving.kserve.io/autoscalerClass: keda`` a ScaledObject with no triggers
  (``keda_reconciler.go`` ``getKedaMetrics`` returns none without ``AutoScaling``),
  which KEDA's CRD refuses, and the whole predictor reconcile stops there: such a
  canary never becomes Ready, so ``_canary_rules.start_blockers`` refuses it.
  ``status.canaryStatuses[].ready`` is the Deployment's ``availableReplicas > 0``.
  Orphaned Deployments and Services are deleted, their autoscalers not (``_leftovers``).
* Before the stable's reconcile (same file) its minReplicas is lowered by the canaries'
  *intended* replicas (at once, Ready or not), floored at 1.
* Traffic: in v0.20.0 no route carries a canary (its HTTPRoute has the stable Service
  alone), so a rollout waits at 0% and says why (``unrouted``). From kserve#5912 (after
  v0.20.0; aaac4e294) ``httproute_reconciler.go`` ``applyCanaryWeights`` weights Ready
  canaries on the HTTPRoute, the whole share at once. With ``enableGatewayApi: false``
  (the shipped default) an Ingress sends everything to the stable Service.
* ``inference_service_status.go`` ``PropagateRawStatus`` copies ``observedGeneration``
  from the first *Deployment*, so it cannot tell whether KServe acted on spec.canary.
* ``inference_service_validation.go`` ``validateCanarySpecs``: an entry needs
  ``predictor.name``; no ``maxReplicas``, ``scaleTarget``, ``scaleMetric``,
  ``autoScaling`` or ``workerSpec``; ``minReplicas`` at most the stable's (default
  1); the annotation ``serving.kserve.io/deploymentMode`` exactly ``Standard``;
  ``validatePredictorNameChange``: renaming the predictor needs a new storageUri.
  The CRD requires ``name`` and ``modelFormat`` on ``spec.canary[].predictor.model``.

So readiness comes from the canary Deployment's own rollout state (as ``kubectl
rollout status`` reads it), the weight from the HTTPRoute. The canary is sized for
its share of the fleet the stable ran when the rollout started; when that needs
more than the stable's minReplicas (the webhook's cap), the stable's minReplicas
is raised to the fleet size for the rollout and put back at the end. Capacity moves
before weight: a step first grows the canary to its new size, with the stable's
minReplicas raised by as much so that KServe keeps the stable as it is, waits for the
canary Deployment to roll out, and only then moves ``trafficPercent`` and lets the
stable shrink. Promotion does the same up to 100%, then renames the predictor to the
canary (KServe keeps that Deployment and deletes the old one); rollback first takes
all traffic from the canary, then drops the entry.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from rollout._errors import InvalidTransition
from rollout._state import RolloutState
from rollout.backends._interface import Change, Deploy, Promote, Rollback, SetWeight
from rollout.backends._kserve._knative import ModeView, predictor, source_uri, spec_uri

STANDARD = "standard"
MODE_ANNOTATION = "serving.kserve.io/deploymentMode"
AUTOSCALER_ANNOTATION = "serving.kserve.io/autoscalerClass"
# The model format the modelctl runtime serves (manifests/10-serving-runtime.yaml):
# what a canary entry names when the stable names none (the CRD requires one there).
DEFAULT_MODEL_FORMAT = {"name": "modelctl"}


def service_name(isvc: str, predictor_name: str | None) -> str:
    """kserve ``pkg/constants/constants.go`` ``PredictorServiceName``."""
    return f"{isvc}-{predictor_name}-predictor" if predictor_name else f"{isvc}-predictor"


def route_name(isvc: str) -> str:
    """The predictor's HTTPRoute keeps the name without predictor.name
    (``createRawPredictorHTTPRoute``), so it survives promotion."""
    return f"{isvc}-predictor"


@dataclass(frozen=True)
class Seen:
    """What Standard mode reads besides the InferenceService: Deployments and the route."""

    isvc: Mapping[str, Any]
    stable_deployment: Mapping[str, Any] | None
    canary_deployment: Mapping[str, Any] | None
    route: Mapping[str, Any] | None
    leftover_hpa: Mapping[str, Any] | None = None


def entries(obj: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [dict(e) for e in (obj.get("spec") or {}).get("canary") or []]


def canary_entry(obj: Mapping[str, Any], name: str | None) -> dict[str, Any] | None:
    return next((e for e in entries(obj)
                 if name and (e.get("predictor") or {}).get("name") == name), None)


def entry_uri(entry: Mapping[str, Any]) -> str | None:
    return ((entry.get("predictor") or {}).get("model") or {}).get("storageUri")


def stable_min_replicas(obj: Mapping[str, Any]) -> int:
    value = predictor(obj).get("minReplicas")
    return 1 if value is None else int(value)


def is_rolled_out(deployment: Mapping[str, Any] | None, uri: str, replicas: int = 1) -> bool:
    """The Deployment runs ``uri`` with at least ``replicas`` available, rollout complete."""
    if deployment is None:
        return False
    spec = deployment.get("spec") or {}
    return (source_uri(spec.get("template") or {}) == uri
            and rollout_complete(deployment, replicas))


def rollout_complete(deployment: Mapping[str, Any] | None, replicas: int = 0) -> bool:
    """The Deployment's rollout is complete, with at least ``replicas`` wanted.

    The test of k8s.io/kubectl ``pkg/polymorphichelpers/rollout_status.go``
    ``DeploymentStatusViewer.Status``: the controller observed this generation, every
    replica is updated, no old replica is left, every updated one is available.
    """
    if deployment is None:
        return False
    meta = deployment.get("metadata") or {}
    spec = deployment.get("spec") or {}
    status = deployment.get("status") or {}
    replicas_spec = spec.get("replicas")
    wanted = 1 if replicas_spec is None else int(replicas_spec)
    updated = int(status.get("updatedReplicas") or 0)
    return (int(status.get("observedGeneration") or 0) >= int(meta.get("generation") or 1)
            and wanted >= replicas and updated >= wanted
            and int(status.get("replicas") or 0) <= updated
            and int(status.get("availableReplicas") or 0) >= updated)


def routed_pct(route: Mapping[str, Any] | None, service: str) -> int:
    """Percent of the route's weight on ``service`` (its first rule with backends)."""
    for rule in ((route or {}).get("spec") or {}).get("rules") or []:
        refs = rule.get("backendRefs") or []
        if not refs:
            continue
        weights = [(str(r.get("name")), int(1 if r.get("weight") is None else r["weight"]))
                   for r in refs]
        total = sum(w for _, w in weights)
        mine = sum(w for name, w in weights if name == service)
        return round(100 * mine / total) if total else 0
    return 0


def canary_replicas(state: RolloutState, weight_pct: int) -> int:
    fleet = int(state.backend_data.get("fleet_replicas") or 1)
    return max(1, math.ceil(fleet * weight_pct / 100)) if weight_pct > 0 else 0


def view(seen: Seen, state: RolloutState | None) -> ModeView:
    obj = seen.isvc
    isvc = str((obj.get("metadata") or {}).get("name"))
    name = state.backend_data.get("canary_name") if state else None
    entry = canary_entry(obj, name)
    statuses = (obj.get("status") or {}).get("canaryStatuses") or []
    reported = next((s for s in statuses if name and s.get("name") == name), None)
    weight = routed_pct(seen.route, service_name(isvc, name)) if entry and name else 0
    detail = {
        "predictorName": predictor(obj).get("name"),
        "canaryName": name,
        "canaryTrafficPercent": entry.get("trafficPercent") if entry else None,
        "canaryStatuses": [{"name": s.get("name"), "ready": s.get("ready"),
                            "trafficPercent": s.get("trafficPercent")} for s in statuses],
        "httpRoute": route_name(isvc) if seen.route is not None else None,
        "routedPercent": weight,
    }
    if state is None:
        return ModeView(restored=True, detail=detail)
    canary, stable = state.canary_uri, state.stable_uri
    runs_canary = entry is not None and entry_uri(entry) == canary
    sized = canary_replicas(state, max(state.weight_pct, 1))
    ready = bool(runs_canary and reported and reported.get("ready")
                 and is_rolled_out(seen.canary_deployment, canary, sized))
    requested = int(entry.get("trafficPercent") or 0) if entry and runs_canary else None
    clean = seen.leftover_hpa is None
    if seen.leftover_hpa is not None:
        detail["leftoverHpa"] = (seen.leftover_hpa.get("metadata") or {}).get("name")
    return ModeView(
        weight=weight,
        ready=ready,
        restored=(not entries(obj) and spec_uri(obj) == stable
                  and is_rolled_out(seen.stable_deployment, stable) and clean),
        promoted=(not entries(obj) and spec_uri(obj) == canary
                  and predictor(obj).get("name") == name
                  and is_rolled_out(seen.stable_deployment, canary) and clean),
        requested=requested,
        detail=detail,
        traffic_note=(unrouted(seen.route, service_name(isvc, name))
                      if ready and requested and not weight else
                      growing(seen.canary_deployment, name, sized)
                      if runs_canary and requested != state.weight_pct else None),
    )


def growing(deployment: Mapping[str, Any] | None, name: str | None, replicas: int) -> str:
    """What the weight waits for while the canary grows to its new size first."""
    available = int(((deployment or {}).get("status") or {}).get("availableReplicas") or 0)
    if available >= replicas:
        return f"canary {name} at its new size ({available} pods available), moving the weight"
    return (f"canary {name} not Ready at its new size yet ({available} of {replicas} pods "
            "available); the weight moves once it is")


def unrouted(route: Mapping[str, Any] | None, service: str) -> str | None:
    """Why a Ready canary with a share asked for gets none: the route KServe wrote
    names no backend for it (KServe up to v0.20.0 weights no Standard-mode canary;
    applyCanaryWeights came with kserve#5912), or there is no route at all."""
    if route is None:
        return None
    names = {str(ref.get("name")) for rule in (route.get("spec") or {}).get("rules") or []
             for ref in rule.get("backendRefs") or []}
    if not names or service in names:
        return None
    name = (route.get("metadata") or {}).get("name")
    return (f"KServe's HTTPRoute {name} routes to {', '.join(sorted(names))} only, not to "
            f"the canary's Service {service}: this KServe does not weight Standard-mode "
            "canaries (that came after v0.20.0, kserve#5912); use Knative mode, or a KServe "
            "with HTTPRoute canary weights")


def backend_data(obj: Mapping[str, Any], change: Deploy,
                 stable_deployment: Mapping[str, Any] | None, target: str) -> dict[str, str]:
    """What the rollout remembers of the stable: its name, minReplicas and fleet size."""
    stable_name = predictor(obj).get("name") or ""
    current = entries(obj)
    same = [e for e in current if entry_uri(e) == change.uri]
    if current and not (len(current) == 1 and same):
        raise InvalidTransition(f"{target}: spec.canary already runs another version; "
                                "remove that entry or roll it out first")
    if same:  # adopt the canary the manifests declared for this very version
        name = str((same[0].get("predictor") or {}).get("name") or "")
    else:
        name = f"v{change.version}" if stable_name != f"v{change.version}" else (
            f"v{change.version}-canary")
    minimum, maximum = predictor(obj).get("minReplicas"), predictor(obj).get("maxReplicas")
    running = int(((stable_deployment or {}).get("spec") or {}).get("replicas") or 0)
    fleet = max(stable_min_replicas(obj), running, 1)
    return {"mode": STANDARD, "canary_name": name, "stable_name": str(stable_name),
            "stable_min_replicas": "" if minimum is None else str(minimum),
            "stable_max_replicas": "" if not maximum else str(maximum),
            "fleet_replicas": str(fleet)}


def _entry(obj: Mapping[str, Any], state: RolloutState, weight_pct: int,
           size_pct: int | None = None) -> dict[str, Any]:
    """The canary entry at ``weight_pct``: only what differs from the stable (KServe
    merges it over the stable predictor), sized for ``size_pct`` (default: that same
    share) of the fleet."""
    name = state.backend_data.get("canary_name", "")
    replicas = canary_replicas(state, weight_pct if size_pct is None else size_pct)
    adopted = canary_entry(obj, name)
    if adopted is not None and entry_uri(adopted) == state.canary_uri:
        entry = {**adopted, "trafficPercent": weight_pct}
        entry["predictor"] = {**adopted["predictor"], "minReplicas": replicas}
        return entry
    model = predictor(obj).get("model") or {}
    # The CRD requires name and modelFormat here, whatever the stable says.
    canary_model: dict[str, Any] = {"name": "kserve-container", "storageUri": state.canary_uri,
                                    "modelFormat": model.get("modelFormat")
                                    or DEFAULT_MODEL_FORMAT}
    return {"trafficPercent": weight_pct,
            "predictor": {"name": name, "minReplicas": replicas, "model": canary_model}}


def promoted(entry: Mapping[str, Any] | None, uri: str) -> dict[str, Any]:
    """The predictor fields that make the stable run what ``entry`` ran: the entry's own
    fields (KServe merges them over the stable to build the canary's Deployment,
    ``buildCanaryPredictor``) but its sizes, and its model's but ``name``, which the
    webhook refuses in ``spec.predictor.model``."""
    fields = {k: v for k, v in ((entry or {}).get("predictor") or {}).items()
              if k not in ("name", "minReplicas", "maxReplicas")}
    model = {k: v for k, v in (fields.get("model") or {}).items() if k != "name"}
    return {**fields, "model": {**model, "storageUri": uri}}


def _stable_min(state: RolloutState, during: bool, growth: int = 0) -> int | None:
    """The stable's minReplicas during the rollout (raised to the fleet, and by
    ``growth`` more while the canary grows ahead of its weight) or after it."""
    fleet = int(state.backend_data.get("fleet_replicas") or 1)
    original = state.backend_data.get("stable_min_replicas") or ""
    if during:
        return max(fleet, int(original or 1)) + growth
    return int(original) if original else None


def _stable_sizes(state: RolloutState, during: bool, growth: int = 0) -> dict[str, Any]:
    """The stable's minReplicas, and its maxReplicas where the rollout raises the minimum
    past it (KServe's webhook refuses min > max): during the rollout, or put back."""
    minimum = _stable_min(state, during, growth)
    sizes: dict[str, Any] = {"minReplicas": minimum}
    cap = state.backend_data.get("stable_max_replicas") or ""
    if cap:
        sizes["maxReplicas"] = max(int(cap), minimum or 0) if during else int(cap)
    return sizes


def current_pct(obj: Mapping[str, Any], state: RolloutState) -> int:
    """The share the canary entry asks for now (0 without an entry of this canary)."""
    entry = canary_entry(obj, state.backend_data.get("canary_name"))
    if entry is None or entry_uri(entry) != state.canary_uri:
        return 0
    return int(entry.get("trafficPercent") or 0)


def _weighted(seen: Seen, state: RolloutState, weight_pct: int) -> dict[str, Any]:
    """The spec that takes the canary to ``weight_pct``, capacity first.

    KServe weights a canary as soon as one pod is available and shrinks the stable by
    the canary's intended size at once, so weight and size written together would
    send a share to a canary still starting its pods. A larger share is therefore two
    writes: (1) the canary's new size at the old weight, with the stable's minReplicas
    raised by the growth (KServe subtracts the canary's intended size, so the stable
    keeps what it runs); (2) once the canary Deployment has rolled out at that size,
    the weight, and the stable back to the fleet (it shrinks after the weight moved).
    A smaller share moves weight and size in one write: the weight leaves first.
    """
    obj = seen.isvc
    current = current_pct(obj, state)
    wanted = canary_replicas(state, weight_pct)
    if weight_pct > current and not is_rolled_out(seen.canary_deployment, state.canary_uri,
                                                  wanted):
        growth = wanted - canary_replicas(state, current)
        return {"predictor": _stable_sizes(state, during=True, growth=growth),
                "canary": [_entry(obj, state, current, size_pct=weight_pct)]}
    return {"predictor": _stable_sizes(state, during=True),
            "canary": [_entry(obj, state, weight_pct)]}


def spec_for(seen: Seen, change: Change, state: RolloutState) -> dict[str, Any]:
    obj = seen.isvc
    name = state.backend_data.get("canary_name", "")
    isvc = str((obj.get("metadata") or {}).get("name"))
    if isinstance(change, Deploy | SetWeight):
        return _weighted(seen, state, change.weight_pct)
    if isinstance(change, Promote):
        if predictor(obj).get("name") == name and not entries(obj):
            return {}  # renamed already; KServe is finishing
        full = _entry(obj, state, 100)
        at_full = (canary_entry(obj, name) == full
                   and routed_pct(seen.route, service_name(isvc, name)) == 100
                   and is_rolled_out(seen.canary_deployment, state.canary_uri,
                                     canary_replicas(state, 100)))
        if not at_full:  # 1: all traffic to a full-size canary first, capacity first
            return _weighted(seen, state, 100)
        # 2: the canary becomes the predictor; KServe keeps its Deployment and deletes
        # the old stable's as an orphan. What the canary ran becomes the stable as it is
        # (an adopted entry's own args and the like), so its Deployment does not roll again.
        return {"predictor": {**promoted(canary_entry(obj, name), state.canary_uri),
                              "name": name, **_stable_sizes(state, during=False)},
                "canary": None}
    assert isinstance(change, Rollback)
    entry = canary_entry(obj, name) if name else None
    if entry is not None:
        drained = {**entry, "trafficPercent": 0,
                   "predictor": {**entry["predictor"], "minReplicas": 0}}
        # 1: no traffic for the canary, at once; minReplicas 0 gives the stable its whole
        # fleet back (KServe subtracts the canary's intended size), though KServe's
        # HPA floor (createHPA) keeps one canary pod until the entry goes.
        if entry != drained:
            return {"canary": [drained]}
        if routed_pct(seen.route, service_name(isvc, name)) != 0:
            return {}  # KServe has not moved the traffic yet
    elif not entries(obj) and all(predictor(obj).get(key) == value for key, value
                                  in _stable_sizes(state, during=False).items()):
        return {}
    # 2: the entry goes and the stable's sizes are put back
    return {"predictor": _stable_sizes(state, during=False), "canary": None}
