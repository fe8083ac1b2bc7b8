"""The ``kserve`` traffic backend: a canary on a ``serving.kserve.io/v1beta1`` InferenceService.

Knative mode: the canary is the latest revision of the predictor, its share is
``spec.predictor.canaryTrafficPercent`` and the previous rolled-out revision keeps
the rest (KServe splits the Knative route that way). Rollback first pins all
traffic to the stable revision (``canaryTrafficPercent: 0``), then restores the
stable ``storageUri``, and only when that restored revision is Ready removes the
percentage, so no request ever reaches a revision that is not Ready.

Standard mode: the canary is an entry of ``spec.canary[]`` (a named copy of the
predictor with the new ``storageUri``, or the entry the manifests already declare
for that version) with ``trafficPercent``; promotion renames
the predictor to the canary's name and drops the entry (KServe then keeps the
canary's Deployment, so nothing restarts); rollback drops the entry.

Readiness comes from what KServe reports: ``status.components.predictor``
(``latestCreatedRevision``, ``latestReadyRevision``, ``latestRolledoutRevision``,
``traffic``) in Knative mode, ``status.canaryStatuses[]`` in Standard mode, and
``status.observedGeneration`` against ``metadata.generation`` in both.
"""

from __future__ import annotations

import copy
import secrets
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from rollout._backend import (
    Change,
    Deploy,
    Observation,
    Promote,
    Rollback,
    SaveState,
    Served,
    SetWeight,
)
from rollout._errors import InvalidTransition, RolloutError, UnsupportedTarget
from rollout._kube import GROUP, KIND, VERSION, KubeClient
from rollout._state import (
    MODEL_ANNOTATION,
    STATE_ANNOTATION,
    VERSION_ANNOTATION,
    Decision,
    Phase,
    RolloutState,
)

MODE_ANNOTATION = "serving.kserve.io/deploymentMode"
KNATIVE = "knative"
STANDARD = "standard"
_MODES = {"Knative": KNATIVE, "Serverless": KNATIVE, "Standard": STANDARD,
          "RawDeployment": STANDARD}
EVENT_COMPONENT = "modelctl-rollout"


def deployment_mode(obj: Mapping[str, Any]) -> str | None:
    """``knative`` or ``standard`` as KServe reports it (status first, then the annotation)."""
    status_mode = (obj.get("status") or {}).get("deploymentMode")
    annotated = _annotations(obj).get(MODE_ANNOTATION)
    raw = status_mode or annotated
    return _MODES.get(raw) if raw else None


class KServeBackend:
    """Moves canary traffic on one InferenceService (``namespace``/``name``)."""

    name = "kserve"

    def __init__(
        self,
        kube: KubeClient,
        namespace: str,
        isvc: str,
        *,
        clock: Callable[[], float] = time.time,
        reporter: str = EVENT_COMPONENT,
    ) -> None:
        self.kube = kube
        self.namespace = namespace
        self.isvc = isvc
        self._clock = clock
        self._reporter = reporter
        self._uid: str | None = None

    # -- reading ---------------------------------------------------------------
    def observe(self) -> Observation:
        obj = self.kube.get_isvc(self.namespace, self.isvc)
        return self.view(obj)

    def view(self, obj: Mapping[str, Any]) -> Observation:
        """Interpret one read of the InferenceService (pure)."""
        meta = obj.get("metadata") or {}
        self._uid = meta.get("uid") or self._uid
        annotations = _annotations(obj)
        where = f"{self.namespace}/{self.isvc}"
        text = annotations.get(STATE_ANNOTATION)
        state = RolloutState.from_json(text, where=where) if text else None
        version = annotations.get(VERSION_ANNOTATION)
        served = Served(
            model=annotations.get(MODEL_ANNOTATION),
            version=int(version) if version and version.isdigit() else None,
            uri=_model(obj).get("storageUri"),
        )
        mode = deployment_mode(obj)
        if mode == KNATIVE:
            weight, ready, restored, detail = _knative_view(obj, state)
        elif mode == STANDARD:
            weight, ready, restored, detail = _standard_view(obj, state)
        else:
            weight, ready, restored, detail = 0, False, state is None, {}
        return Observation(
            target=where,
            mode=mode or "unknown",
            version=str(meta.get("resourceVersion") or ""),
            state=state,
            served=served,
            canary_weight_pct=weight,
            canary_ready=ready,
            restored=restored,
            start_blockers=_start_blockers(obj, mode, state),
            detail=detail,
            raw=obj,
        )

    # -- writing ---------------------------------------------------------------
    def apply(self, seen: Observation, change: Change, state: RolloutState) -> Observation:
        patch = self.patch_for(seen, change, state)
        current = {k: v for k, v in _annotations(seen.raw).items()
                   if k in patch["metadata"]["annotations"]}
        if "spec" not in patch and current == patch["metadata"]["annotations"]:
            return seen  # nothing would change: no write, no new resourceVersion
        obj = self.kube.patch_isvc(self.namespace, self.isvc, patch)
        return self.view(obj)

    def describe(self, seen: Observation, change: Change, state: RolloutState) -> Mapping[str, Any]:
        return self.patch_for(seen, change, state)

    def patch_for(self, seen: Observation, change: Change, state: RolloutState) -> dict[str, Any]:
        """The conditional merge patch that carries out ``change`` and stores ``state``."""
        if isinstance(change, Deploy):
            if seen.start_blockers:
                raise RolloutError(f"cannot start on {seen.target}: {seen.start_blockers[0]}")
            state = state.evolve(backend_data=_backend_data(seen, change))
        spec = self._spec_patch(seen, change, state)
        promoted = state.phase is Phase.PROMOTED
        version = state.canary_version if promoted else state.stable_version
        annotations = {
            STATE_ANNOTATION: state.to_json(),
            MODEL_ANNOTATION: state.model,
            VERSION_ANNOTATION: str(version),
        }
        patch: dict[str, Any] = {
            "metadata": {"resourceVersion": seen.version, "annotations": annotations},
        }
        if spec:
            patch["spec"] = spec
        return patch

    def _spec_patch(self, seen: Observation, change: Change, state: RolloutState) -> dict[str, Any]:
        if isinstance(change, SaveState):
            return {}
        if seen.mode == KNATIVE:
            return _knative_spec(seen, change, state)
        if seen.mode == STANDARD:
            return _standard_spec(seen, change, state)
        raise UnsupportedTarget(f"{seen.target}: cannot tell KServe's deployment mode "
                                "(no status.deploymentMode); has KServe reconciled it?")

    # -- events ----------------------------------------------------------------
    def record(self, state: RolloutState, decision: Decision) -> None:
        stamp = datetime.fromtimestamp(decision.at, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        involved: dict[str, Any] = {
            "apiVersion": f"{GROUP}/{VERSION}", "kind": KIND,
            "name": self.isvc, "namespace": self.namespace,
        }
        if self._uid:
            involved["uid"] = self._uid
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            # client-go names events <object>.<hex time>; the suffix keeps names unique
            # when a fake clock repeats a time.
            "metadata": {
                "name": f"{self.isvc}.{int(decision.at * 1e9):x}{secrets.token_hex(3)}",
                "namespace": self.namespace,
            },
            "involvedObject": involved,
            "reason": decision.kind,
            "message": decision.message[:1024],
            "type": decision.event_type,
            "source": {"component": self._reporter},
            "reportingComponent": f"modelctl.io/{self._reporter}",
            "reportingInstance": state.holder or self._reporter,
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "count": 1,
        }
        self.kube.create_event(self.namespace, body)


# -- Knative mode ------------------------------------------------------------------
def _knative_view(obj: Mapping[str, Any], state: RolloutState | None) -> tuple[
        int, bool, bool, dict[str, Any]]:
    pred = _component_status(obj)
    created = pred.get("latestCreatedRevision")
    ready_rev = pred.get("latestReadyRevision")
    stable_rev = (state.backend_data.get("stable_revision") if state else None) or pred.get(
        "latestRolledoutRevision")
    settled = _generation_observed(obj) and bool(ready_rev) and ready_rev == created
    spec_uri = _model(obj).get("storageUri")
    percent = _predictor(obj).get("canaryTrafficPercent")
    canary_ready = bool(state and spec_uri == state.canary_uri and settled
                        and ready_rev != stable_rev)
    weight = 0
    if ready_rev and ready_rev != stable_rev:
        weight = sum(int(t.get("percent") or 0) for t in pred.get("traffic") or []
                     if t.get("revisionName") == ready_rev)
    restored = bool(state is None or (percent is None and spec_uri == state.stable_uri
                                      and settled))
    detail = {
        "latestCreatedRevision": created,
        "latestReadyRevision": ready_rev,
        "latestRolledoutRevision": pred.get("latestRolledoutRevision"),
        "stableRevision": stable_rev,
        "canaryTrafficPercent": percent,
        "traffic": [{"revision": t.get("revisionName"), "percent": t.get("percent"),
                     "tag": t.get("tag")} for t in pred.get("traffic") or []],
    }
    return weight, canary_ready, restored, detail


def _knative_spec(seen: Observation, change: Change, state: RolloutState) -> dict[str, Any]:
    if isinstance(change, Deploy):
        return {"predictor": {"canaryTrafficPercent": change.weight_pct,
                              "model": {"storageUri": change.uri}}}
    if isinstance(change, SetWeight):
        return {"predictor": {"canaryTrafficPercent": change.weight_pct}}
    if isinstance(change, Promote):
        return {"predictor": {"canaryTrafficPercent": None}}
    assert isinstance(change, Rollback)
    spec_uri = _model(seen.raw).get("storageUri")
    percent = _predictor(seen.raw).get("canaryTrafficPercent")
    if spec_uri != state.stable_uri:
        if percent != 0:  # 1: all traffic back to the stable revision, at once
            return {"predictor": {"canaryTrafficPercent": 0}}
        # 2: the stable spec again; the new revision gets no traffic until Ready
        return {"predictor": {"model": {"storageUri": state.stable_uri}}}
    pred = _component_status(seen.raw)
    settled = _generation_observed(seen.raw) and pred.get("latestReadyRevision") == pred.get(
        "latestCreatedRevision")
    if percent is not None and settled:  # 3: the restored revision is Ready: no more split
        return {"predictor": {"canaryTrafficPercent": None}}
    return {}


# -- Standard mode -----------------------------------------------------------------
def _standard_view(obj: Mapping[str, Any], state: RolloutState | None) -> tuple[
        int, bool, bool, dict[str, Any]]:
    name = state.backend_data.get("canary_name") if state else None
    entries = list((obj.get("spec") or {}).get("canary") or [])
    entry = _canary_entry(obj, name)
    statuses = (obj.get("status") or {}).get("canaryStatuses") or []
    reported = next((s for s in statuses if name and s.get("name") == name), None)
    canary_uri = state.canary_uri if state else None
    canary_ready = bool(entry and reported and reported.get("ready")
                        and _generation_observed(obj)
                        and _model(entry).get("storageUri") == canary_uri)
    weight = int(reported.get("trafficPercent") or 0) if reported and reported.get("ready") else 0
    spec_uri = _model(obj).get("storageUri")
    restored = bool(state is None or (not entries and spec_uri == state.stable_uri))
    detail = {
        "predictorName": _predictor(obj).get("name"),
        "canaryName": name,
        "canaryTrafficPercent": entry.get("trafficPercent") if entry else None,
        "canaryStatuses": [{"name": s.get("name"), "ready": s.get("ready"),
                            "trafficPercent": s.get("trafficPercent")} for s in statuses],
    }
    return weight, canary_ready, restored, detail


def _standard_spec(seen: Observation, change: Change, state: RolloutState) -> dict[str, Any]:
    name = state.backend_data.get("canary_name", "")
    if isinstance(change, Deploy):
        adopted = _canary_entry(seen.raw, name)
        if adopted is not None:  # declared in the manifests for this very version
            return {"canary": [{**adopted, "trafficPercent": change.weight_pct}]}
        predictor = copy.deepcopy(dict(_predictor(seen.raw)))
        predictor.pop("canaryTrafficPercent", None)
        predictor["name"] = name
        model = predictor.setdefault("model", {})
        model["storageUri"] = change.uri
        model.setdefault("name", "kserve-container")  # the CRD requires it in canary entries
        return {"canary": [{"predictor": predictor, "trafficPercent": change.weight_pct}]}
    if isinstance(change, SetWeight):
        entry = copy.deepcopy(dict(_canary_entry(seen.raw, name) or {}))
        if not entry:
            raise RolloutError(f"{seen.target}: canary {name!r} is missing from spec.canary")
        entry["trafficPercent"] = change.weight_pct
        return {"canary": [entry]}
    if isinstance(change, Promote):
        # KServe: set predictor.name to the canary's name and drop the entry; the
        # canary's Deployment becomes the predictor's without a restart.
        return {"predictor": {"name": name, "model": {"storageUri": state.canary_uri}},
                "canary": None}
    assert isinstance(change, Rollback)
    return {"canary": None} if (seen.raw.get("spec") or {}).get("canary") else {}


def _canary_entry(obj: Mapping[str, Any], name: str | None) -> dict[str, Any] | None:
    for entry in (obj.get("spec") or {}).get("canary") or []:
        if name and ((entry.get("predictor") or {}).get("name") == name):
            return dict(entry)
    return None


# -- shared ------------------------------------------------------------------------
def _backend_data(seen: Observation, change: Deploy) -> dict[str, str]:
    if seen.mode == KNATIVE:
        pred = _component_status(seen.raw)
        stable = pred.get("latestRolledoutRevision") or pred.get("latestReadyRevision") or ""
        return {"mode": KNATIVE, "stable_revision": str(stable)}
    stable_name = _predictor(seen.raw).get("name") or ""
    entries = list((seen.raw.get("spec") or {}).get("canary") or [])
    same = [e for e in entries if _model(e).get("storageUri") == change.uri]
    if entries and not (len(entries) == 1 and same):
        raise InvalidTransition(f"{seen.target}: spec.canary already runs another version; "
                                "remove that entry or roll it out first")
    if same:  # adopt the canary the manifests declared for this version
        name = str((same[0].get("predictor") or {}).get("name") or "")
    else:
        name = f"v{change.version}" if stable_name != f"v{change.version}" else (
            f"v{change.version}-canary")
    return {"mode": STANDARD, "canary_name": name, "stable_name": str(stable_name)}


def _start_blockers(obj: Mapping[str, Any], mode: str | None,
                    state: RolloutState | None) -> tuple[str, ...]:
    problems: list[str] = []
    if state is not None and not state.phase.is_final:
        problems.append(f"a rollout to {state.canary_label} is already {state.phase.value}; "
                        "promote or roll it back first")
    if mode is None:
        problems.append("KServe reports no deployment mode yet (status.deploymentMode)")
    if not _model(obj).get("storageUri"):
        problems.append("spec.predictor.model.storageUri is not set; modelctl rollouts "
                        "move that field")
    if not _is_ready(obj):
        problems.append("the InferenceService is not Ready")
    percent = _predictor(obj).get("canaryTrafficPercent")
    if mode == KNATIVE:
        if percent not in (None, 100) and (state is None or state.phase.is_final):
            problems.append(f"spec.predictor.canaryTrafficPercent is {percent}: another canary "
                            "is in progress")
        if not _component_status(obj).get("latestRolledoutRevision"):
            problems.append("no revision has been rolled out yet (latestRolledoutRevision)")
    return tuple(problems)


def _is_ready(obj: Mapping[str, Any]) -> bool:
    for condition in (obj.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Ready":
            return str(condition.get("status")) == "True"
    return False


def _generation_observed(obj: Mapping[str, Any]) -> bool:
    generation = (obj.get("metadata") or {}).get("generation")
    observed = (obj.get("status") or {}).get("observedGeneration")
    if generation is None or observed is None:
        return observed is not None or generation is None
    return int(observed) >= int(generation)


def _annotations(obj: Mapping[str, Any]) -> dict[str, str]:
    return dict((obj.get("metadata") or {}).get("annotations") or {})


def _predictor(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return (obj.get("spec") or {}).get("predictor") or {}


def _model(predictor_holder: Mapping[str, Any]) -> Mapping[str, Any]:
    """``spec.predictor.model`` of an InferenceService, or ``predictor.model`` of a canary entry."""
    if "predictor" in predictor_holder and "spec" not in predictor_holder:
        return (predictor_holder.get("predictor") or {}).get("model") or {}
    return _predictor(predictor_holder).get("model") or {}


def _component_status(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return ((obj.get("status") or {}).get("components") or {}).get("predictor") or {}
