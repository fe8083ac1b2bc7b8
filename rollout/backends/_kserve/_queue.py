"""Queue mode through a rollout: the canary version gets its own workers (pure).

In queue mode (``kustomize/overlays/queue``) the InferenceService runs the frontends and
the Deployment ``<isvc>-queue-worker`` runs the stable version's workers, scaled by the
KEDA ScaledObject of the same name on the stream ``modelctl:{<isvc>:<version>}:requests``.
A canary revision's frontends read the canary's MANIFEST, so they enqueue on the
canary's own stream, which nothing reads unless the canary has workers. From the rollout
state alone this module derives what the workers must be:

* while the rollout progresses: ``<isvc>-queue-worker-canary``, a Deployment and a
  ScaledObject copied from the stable's with the canary's storageUri (the storage
  initializer's argument), the canary's stream (the version in the stream's hash tag),
  ``--role=canary`` and the component label ``queue-worker-canary`` (the two
  Deployments' selectors must not overlap);
* once promoted: the stable's Deployment and ScaledObject moved to the canary's URI and
  stream; the canary's workers are removed only when the stable's Deployment has rolled
  out on the new URI, so the canary's stream always has readers. The old version's pods
  leave last (the worker Deployment's ``maxUnavailable: 0``), which outlasts every
  request its stream still holds (a request's deadline is seconds, a worker's start
  minutes);
* rolling back or rolled back: the canary's workers are removed (their frontends get no
  traffic any more; a worker finishes its batch in hand on SIGTERM).

Without an ``<isvc>-queue-worker`` Deployment (every other overlay) nothing is done.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from rollout._state import Phase, RolloutState
from rollout.backends._kserve._standard import rollout_complete

WORKER_SUFFIX = "-queue-worker"
CANARY_SUFFIX = "-queue-worker-canary"
COMPONENT_LABEL = "app.kubernetes.io/component"
CANARY_COMPONENT = "queue-worker-canary"
INITIALIZER = "storage-initializer"
DEPLOYMENT = "Deployment"
SCALEDOBJECT = "ScaledObject"
# The hash tag of the queue's key contract (predictor/queue/_keys.py): {<model>:<version>}.
_TAG = re.compile(r"\{([^{}:]+):([^{}]*)\}")
# What the API server owns in an object's metadata; never copied into a new object.
_SERVER_FIELDS = ("uid", "resourceVersion", "generation", "creationTimestamp",
                  "managedFields", "selfLink", "deletionTimestamp", "ownerReferences")
_SERVER_ANNOTATIONS = ("deployment.kubernetes.io/revision",
                       "kubectl.kubernetes.io/last-applied-configuration")


def names(isvc: str) -> tuple[str, str]:
    """The stable's and the canary's worker Deployment (and ScaledObject) names."""
    return f"{isvc}{WORKER_SUFFIX}", f"{isvc}{CANARY_SUFFIX}"


@dataclass(frozen=True)
class Workers:
    """What the cluster runs for the queue's workers (None: absent)."""

    stable: Mapping[str, Any] | None = None
    stable_scaler: Mapping[str, Any] | None = None
    canary: Mapping[str, Any] | None = None
    canary_scaler: Mapping[str, Any] | None = None

    @property
    def queue_mode(self) -> bool:
        return self.stable is not None


@dataclass(frozen=True)
class Action:
    """One write: ``verb`` (create, patch, delete) on ``kind``/``name``."""

    verb: str
    kind: str
    name: str
    body: Mapping[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"verb": self.verb, "kind": self.kind, "name": self.name}
        if self.body:
            out["body"] = dict(self.body)
        return out


def storage_uri(deployment: Mapping[str, Any] | None) -> str | None:
    """The URI the worker Deployment's storage initializer downloads (its first arg)."""
    for container in _pod_spec(deployment or {}).get("initContainers") or []:
        if container.get("name") == INITIALIZER and container.get("args"):
            return str(container["args"][0])
    return None


def streams(scaler: Mapping[str, Any] | None) -> list[str]:
    """The streams a ScaledObject's triggers read."""
    triggers = ((scaler or {}).get("spec") or {}).get("triggers") or []
    return [str(t["metadata"]["stream"]) for t in triggers
            if "stream" in (t.get("metadata") or {})]


def with_version(stream: str, version: int) -> str:
    """``stream`` with the version in its hash tag replaced by ``version``."""
    return _TAG.sub(lambda m: f"{{{m.group(1)}:{version}}}", stream, count=1)


def plan(workers: Workers, isvc: str, state: RolloutState | None) -> list[Action]:
    """The writes that bring the workers to what ``state`` needs (none when they are)."""
    if not workers.queue_mode or state is None:
        return []
    stable_name, canary_name = names(isvc)
    removal = removals(canary_name, workers.canary, workers.canary_scaler)
    if state.phase in (Phase.ROLLING_BACK, Phase.ROLLED_BACK):
        return removal
    if state.phase is Phase.PROMOTED:
        moves = _promotion(workers, stable_name, state)
        if moves or not rollout_complete(workers.stable):
            return moves
        return removal
    return candidate_actions(workers.stable or {}, workers.stable_scaler, workers.canary,
                             workers.canary_scaler, canary_name, uri=state.canary_uri,
                             version=state.canary_version, role="canary",
                             component=CANARY_COMPONENT)


def removals(name: str, deployment: Mapping[str, Any] | None,
             scaler: Mapping[str, Any] | None) -> list[Action]:
    """The deletes of the workers ``name`` (those that exist)."""
    present = [(DEPLOYMENT, deployment), (SCALEDOBJECT, scaler)]
    return [Action("delete", kind, name) for kind, obj in present if obj is not None]


def candidate_actions(stable: Mapping[str, Any], stable_scaler: Mapping[str, Any] | None,
                      existing: Mapping[str, Any] | None,
                      existing_scaler: Mapping[str, Any] | None, name: str, *, uri: str,
                      version: int, role: str, component: str) -> list[Action]:
    """The writes that give ``version`` (at ``uri``) workers named ``name``, copied from
    the stable's: created when missing, moved when left on another version."""
    actions: list[Action] = []
    if existing is None:
        actions.append(Action("create", DEPLOYMENT, name, candidate_deployment(
            stable, name, uri=uri, role=role, component=component)))
    elif storage_uri(existing) != uri:  # left by an earlier rollout or shadow
        actions.append(Action("patch", DEPLOYMENT, name, {"spec": {"template": {
            "spec": {"initContainers": _initializers(existing, uri)}}}}))
    if stable_scaler is None:
        return actions
    if existing_scaler is None:
        actions.append(Action("create", SCALEDOBJECT, name, candidate_scaler(
            stable_scaler, name, version=version, component=component)))
    elif streams(existing_scaler) != [with_version(s, version) for s in streams(stable_scaler)]:
        actions.append(Action("patch", SCALEDOBJECT, name, {"spec": {
            "triggers": _triggers(existing_scaler, version)}}))
    return actions


def canary_ready(workers: Workers, state: RolloutState) -> bool:
    """True outside queue mode; in it, the canary's workers run the canary and rolled out."""
    if not workers.queue_mode:
        return True
    return (storage_uri(workers.canary) == state.canary_uri
            and rollout_complete(workers.canary))


def promoted(workers: Workers, state: RolloutState) -> bool:
    """The stable's workers run the canary's version and the canary's are gone."""
    if not workers.queue_mode:
        return True
    return (not _promotion(workers, "", state) and rollout_complete(workers.stable)
            and workers.canary is None and workers.canary_scaler is None)


def restored(workers: Workers) -> bool:
    """Nothing of the canary's workers is left."""
    return workers.canary is None and workers.canary_scaler is None


def detail(workers: Workers) -> dict[str, Any]:
    """What ``rollout status`` shows of the workers."""
    if not workers.queue_mode:
        return {}
    out: dict[str, Any] = {}
    for role, dep, scaler in (("stable", workers.stable, workers.stable_scaler),
                              ("canary", workers.canary, workers.canary_scaler)):
        if dep is None:
            continue
        status = dep.get("status") or {}
        out[role] = {"uri": storage_uri(dep), "streams": streams(scaler),
                     "replicas": int(status.get("replicas") or 0),
                     "available": int(status.get("availableReplicas") or 0)}
    return {"queue_workers": out}


def _promotion(workers: Workers, name: str, state: RolloutState) -> list[Action]:
    """Patches that move the stable's workers to the canary's URI and stream."""
    actions: list[Action] = []
    stable = workers.stable or {}
    if storage_uri(stable) != state.canary_uri:
        actions.append(Action("patch", DEPLOYMENT, name, {"spec": {"template": {"spec": {
            "initContainers": _initializers(stable, state.canary_uri)}}}}))
    scaler = workers.stable_scaler
    if scaler is not None and any(s != with_version(s, state.canary_version)
                                  for s in streams(scaler)):
        actions.append(Action("patch", SCALEDOBJECT, name, {"spec": {
            "triggers": _triggers(scaler, state.canary_version)}}))
    return actions


def canary_deployment(stable: Mapping[str, Any], name: str,
                      state: RolloutState) -> dict[str, Any]:
    """The stable's worker Deployment, made the canary's."""
    return candidate_deployment(stable, name, uri=state.canary_uri, role="canary",
                                component=CANARY_COMPONENT)


def canary_scaler(stable: Mapping[str, Any], name: str, state: RolloutState) -> dict[str, Any]:
    """The stable's ScaledObject, made the canary's: its Deployment and its stream."""
    return candidate_scaler(stable, name, version=state.canary_version,
                            component=CANARY_COMPONENT)


def candidate_deployment(stable: Mapping[str, Any], name: str, *, uri: str, role: str,
                         component: str) -> dict[str, Any]:
    """The stable's worker Deployment for another version (``uri``), with metric label
    ``role`` and its own ``component`` label (the selectors never overlap)."""
    body = _fresh(stable, name)
    spec = body.setdefault("spec", {})
    spec.pop("replicas", None)  # one to start with; KEDA owns the count from then on
    for labels in (body["metadata"].setdefault("labels", {}),
                   spec.setdefault("selector", {}).setdefault("matchLabels", {}),
                   spec.setdefault("template", {}).setdefault("metadata", {})
                   .setdefault("labels", {})):
        labels[COMPONENT_LABEL] = component
    pod = _pod_spec(body)
    pod["initContainers"] = _initializers(body, uri)
    for container in pod.get("containers") or []:
        args = [a for a in container.get("args") or [] if not str(a).startswith("--role")]
        if "--queue_role=worker" in args:
            container["args"] = [*args, f"--role={role}"]
    return body


def candidate_scaler(stable: Mapping[str, Any], name: str, *, version: int,
                     component: str) -> dict[str, Any]:
    """The stable's ScaledObject for another version: its Deployment and its stream."""
    body = _fresh(stable, name)
    body["metadata"].setdefault("labels", {})[COMPONENT_LABEL] = component
    spec = body.setdefault("spec", {})
    spec.setdefault("scaleTargetRef", {})["name"] = name
    spec["triggers"] = _triggers(stable, version)
    return body


def _fresh(obj: Mapping[str, Any], name: str) -> dict[str, Any]:
    body = {k: copy.deepcopy(v) for k, v in obj.items() if k != "status"}
    meta = body.setdefault("metadata", {})
    for key in _SERVER_FIELDS:
        meta.pop(key, None)
    annotations = meta.get("annotations") or {}
    for key in _SERVER_ANNOTATIONS:
        annotations.pop(key, None)
    meta["name"] = name
    return body


def _pod_spec(deployment: Mapping[str, Any]) -> Any:
    return ((deployment.get("spec") or {}).get("template") or {}).get("spec") or {}


def _initializers(deployment: Mapping[str, Any], uri: str) -> list[dict[str, Any]]:
    out = copy.deepcopy(list(_pod_spec(deployment).get("initContainers") or []))
    for container in out:
        if container.get("name") == INITIALIZER and container.get("args"):
            container["args"] = [uri, *container["args"][1:]]
    return out


def _triggers(scaler: Mapping[str, Any], version: int) -> list[dict[str, Any]]:
    out = copy.deepcopy(list((scaler.get("spec") or {}).get("triggers") or []))
    for trigger in out:
        meta = trigger.get("metadata") or {}
        if "stream" in meta:
            meta["stream"] = with_version(str(meta["stream"]), version)
    return out
