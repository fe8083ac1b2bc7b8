"""KServe's Knative mode: the canary is the latest revision, ``canaryTrafficPercent`` its share.

What KServe does, from its source (kserve/kserve at aaac4e294):

* ``reconcilers/knative/ksvc_reconciler.go`` ``createKnativeService``: with
  ``canaryTrafficPercent`` set and a ``latestRolledoutRevision``, the Knative route
  sends that share to the *latest ready* revision (``latestRevision: true``) and the
  rest to ``latestRolledoutRevision`` (tag ``prev``); without it, 100% to the latest
  ready revision. There is no other rule: no "previous rolled-out revision" split.
* ``pkg/apis/serving/v1beta1/inference_service_status.go`` ``PropagateStatus``
  copies ``latestCreatedRevision``, ``latestReadyRevision``, the resolved
  ``traffic`` and ``observedGeneration`` *from the Knative Service*: that
  observedGeneration is the Knative Service's, never the InferenceService's, and
  it stays put when a change leaves the Knative Service as it was (a step of 100
  then Promote), so it cannot tell whether KServe acted on our change.
* ``components/predictor.go`` ``addStorageInitializerAnnotations`` writes the
  ``storageUri`` into the revision template as the annotation
  ``internal.serving.kserve.io/storage-initializer-sourceuri``, so every Knative
  Revision says which model it runs.

So this module decides from revisions and the URIs they run: the canary is the
latest created revision that runs the canary URI, its weight is the traffic
routed to revisions running it, and a rollback is done once the latest revision
runs the stable URI again, is Ready, and has all the traffic. The reader passes
``uris``: revision name -> the URI it runs (None: unknown).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from rollout._state import RolloutState
from rollout.backends._interface import Change, Deploy, Promote, Rollback, SetWeight

KNATIVE = "knative"
SOURCE_URI_ANNOTATION = "internal.serving.kserve.io/storage-initializer-sourceuri"


@dataclass(frozen=True)
class ModeView:
    """What one mode's reading says: the ``Observation`` fields it decides."""

    weight: int = 0
    ready: bool = False
    restored: bool = False
    promoted: bool = False
    requested: int | None = None
    detail: Mapping[str, Any] = field(default_factory=dict)
    traffic_note: str | None = None


def component_status(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return ((obj.get("status") or {}).get("components") or {}).get("predictor") or {}


def predictor(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return (obj.get("spec") or {}).get("predictor") or {}


def spec_uri(obj: Mapping[str, Any]) -> str | None:
    return (predictor(obj).get("model") or {}).get("storageUri")


def revisions_to_read(obj: Mapping[str, Any]) -> list[str]:
    """The revisions whose URI the view needs: created, ready, and those with traffic."""
    pred = component_status(obj)
    names = [pred.get("latestCreatedRevision"), pred.get("latestReadyRevision"),
             *(t.get("revisionName") for t in pred.get("traffic") or [])]
    return sorted({str(n) for n in names if n})


def source_uri(obj: Mapping[str, Any]) -> str | None:
    """The storageUri KServe annotated an object with (a Revision, a pod template)."""
    return ((obj.get("metadata") or {}).get("annotations") or {}).get(SOURCE_URI_ANNOTATION)


def traffic_to(obj: Mapping[str, Any], uris: Mapping[str, str | None], uri: str) -> int:
    """Percent of traffic Knative routes to revisions that run ``uri``."""
    return sum(int(t.get("percent") or 0) for t in component_status(obj).get("traffic") or []
               if uri and uris.get(str(t.get("revisionName"))) == uri)


def _latest_runs(obj: Mapping[str, Any], uris: Mapping[str, str | None], uri: str) -> bool:
    """The latest created revision runs ``uri`` and is the latest Ready one."""
    pred = component_status(obj)
    created = pred.get("latestCreatedRevision")
    return bool(created and uris.get(str(created)) == uri
                and pred.get("latestReadyRevision") == created)


def view(obj: Mapping[str, Any], state: RolloutState | None,
         uris: Mapping[str, str | None]) -> ModeView:
    """Weight, readiness, restored and promoted, as KServe reports them."""
    pred = component_status(obj)
    percent = predictor(obj).get("canaryTrafficPercent")
    uri = spec_uri(obj)
    detail = {
        "latestCreatedRevision": pred.get("latestCreatedRevision"),
        "latestReadyRevision": pred.get("latestReadyRevision"),
        "latestRolledoutRevision": pred.get("latestRolledoutRevision"),
        "canaryTrafficPercent": percent,
        "traffic": [{"revision": t.get("revisionName"), "percent": t.get("percent"),
                     "tag": t.get("tag"), "uri": uris.get(str(t.get("revisionName")))}
                    for t in pred.get("traffic") or []],
    }
    if state is None:
        return ModeView(restored=True, detail=detail)
    canary, stable = state.canary_uri, state.stable_uri
    weight = traffic_to(obj, uris, canary)
    ready = uri == canary and _latest_runs(obj, uris, canary)
    rolled_out = pred.get("latestRolledoutRevision") == pred.get("latestCreatedRevision")
    return ModeView(
        weight=weight,
        ready=ready,
        restored=(percent is None and uri == stable and _latest_runs(obj, uris, stable)
                  and traffic_to(obj, uris, stable) == 100),
        promoted=(percent is None and uri == canary and ready and weight == 100
                  and rolled_out),
        requested=(100 if percent is None else int(percent)) if uri == canary else None,
        detail=detail,
    )


def spec_for(obj: Mapping[str, Any], change: Change, state: RolloutState,
             uris: Mapping[str, str | None]) -> dict[str, Any]:
    """The ``spec`` merge patch for ``change`` (empty: nothing to write now)."""
    if isinstance(change, Deploy | SetWeight):
        # SetWeight also restores the canary URI: a spec write lost after the state
        # write is redone by the next SetWeight.
        return {"predictor": {"canaryTrafficPercent": change.weight_pct,
                              "model": {"storageUri": state.canary_uri}}}
    if isinstance(change, Promote):
        return {"predictor": {"canaryTrafficPercent": None,
                              "model": {"storageUri": state.canary_uri}}}
    assert isinstance(change, Rollback)
    percent = predictor(obj).get("canaryTrafficPercent")
    if spec_uri(obj) != state.stable_uri:
        if percent != 0:  # 1: all traffic to latestRolledoutRevision (the stable), at once
            return {"predictor": {"canaryTrafficPercent": 0}}
        # 2: the stable spec again; its new revision gets no traffic until it is Ready
        return {"predictor": {"model": {"storageUri": state.stable_uri}}}
    if percent is not None and _latest_runs(obj, uris, state.stable_uri):
        return {"predictor": {"canaryTrafficPercent": None}}  # 3: restored and Ready: no split
    return {}


def start_blockers(obj: Mapping[str, Any], state: RolloutState | None) -> list[str]:
    problems = []
    percent = predictor(obj).get("canaryTrafficPercent")
    ours = state is not None and not state.phase.is_final
    if percent not in (None, 100) and not ours:
        problems.append(f"spec.predictor.canaryTrafficPercent is {percent}: another canary "
                        "is in progress")
    if not component_status(obj).get("latestRolledoutRevision"):
        # createKnativeService splits only when a rolled-out revision exists.
        problems.append("no revision has been rolled out yet (latestRolledoutRevision)")
    return problems
