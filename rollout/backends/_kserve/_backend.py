"""The ``kserve`` traffic backend: a canary on a ``serving.kserve.io/v1beta1`` InferenceService.

Knative mode (``_kserve_knative``): the canary is the latest revision and
``spec.predictor.canaryTrafficPercent`` its share. Standard mode
(``_kserve_standard``): the canary is an entry of ``spec.canary[]``, its own
Deployment, weighted by KServe on the HTTPRoute. Each module says which KServe
source its rules follow. Readiness and weight come from what KServe and the
systems under it really report (revisions and the URIs they run, the traffic
Knative routes, the canary Deployment's rollout state, the HTTPRoute's weights),
never from ``status.observedGeneration``, which KServe copies from the Knative
Service or the first Deployment and which therefore does not follow the
InferenceService's generation.

In queue mode (an ``<isvc>-queue-worker`` Deployment exists) the canary version also
gets its own workers (``_queue``): readiness, promotion and rollback wait for them too.

The rollout state lives in a ConfigMap (``_kserve_state``), not on the
InferenceService, whose annotations KServe copies onto revisions and pods. A
write stores the state first (conditional on the ConfigMap's resourceVersion: the
one place two writers can collide), then patches the spec, which is derived from
the state alone: a spec write that is lost is redone by the next tick.
"""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from rollout._errors import Conflict, NotFound, RolloutError, UnsupportedTarget
from rollout._state import MODEL_ANNOTATION, VERSION_ANNOTATION, Decision, Phase, RolloutState
from rollout.backends._interface import Change, Deploy, Observation, SaveState, Served
from rollout.backends._kserve import _canary_rules as canary_rules
from rollout.backends._kserve import _knative as knative
from rollout.backends._kserve import _leftovers as leftovers
from rollout.backends._kserve import _queue as queue
from rollout.backends._kserve import _standard as standard
from rollout.backends._kserve._kube import GROUP, KIND, VERSION, KubeClient
from rollout.backends._kserve._state_store import StateStore, StoredState

MODE_ANNOTATION = standard.MODE_ANNOTATION
KNATIVE = knative.KNATIVE
STANDARD = standard.STANDARD
_MODES = {"Knative": KNATIVE, "Serverless": KNATIVE, "Standard": STANDARD,
          "RawDeployment": STANDARD}
EVENT_COMPONENT = "modelctl-rollout"
SPEC_RETRIES = 4


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
        reporter: str = EVENT_COMPONENT,
    ) -> None:
        self.kube = kube
        self.namespace = namespace
        self.isvc = isvc
        self.store = StateStore(kube, namespace, isvc)
        self._reporter = reporter
        self._uid: str | None = None

    @property
    def target(self) -> str:
        return f"{self.namespace}/{self.isvc}"

    # -- reading ---------------------------------------------------------------
    def observe(self) -> Observation:
        stored = self.store.read()
        obj = self.kube.get_isvc(self.namespace, self.isvc)
        return self.view(obj, stored, self._related(obj, stored.state))

    def _related(self, obj: Mapping[str, Any], state: RolloutState | None) -> dict[str, Any]:
        """What KServe's status alone does not say: revisions' URIs, Deployments, the
        route, and in queue mode the workers."""
        return {**self._mode_related(obj, state), "workers": self._workers()}

    def _workers(self) -> queue.Workers:
        return read_workers(self.kube, self.namespace, self.isvc, queue.names(self.isvc)[1])

    def _mode_related(self, obj: Mapping[str, Any], state: RolloutState | None) -> dict[str, Any]:
        mode = deployment_mode(obj)
        if mode == KNATIVE:
            uris: dict[str, str | None] = {}
            for name in knative.revisions_to_read(obj):
                revision = self._get_or_none(self.kube.get_revision, name)
                uris[name] = knative.source_uri(revision) if revision else None
            return {"revision_uris": uris}
        if mode == STANDARD:
            canary = state.backend_data.get("canary_name") if state else None
            stable = standard.service_name(self.isvc, knative.predictor(obj).get("name"))
            leftover = leftovers.leftover_hpa_name(obj, state)
            hpa = self._get_or_none(self.kube.get_hpa, leftover) if leftover else None
            return {
                "stable_deployment": self._get_or_none(self.kube.get_deployment, stable),
                "canary_deployment": (self._get_or_none(
                    self.kube.get_deployment, standard.service_name(self.isvc, canary))
                    if canary else None),
                "route": self._get_or_none(self.kube.get_httproute,
                                           standard.route_name(self.isvc)),
                "leftover_hpa": hpa if leftovers.owned_by(hpa, obj) else None,
            }
        return {}

    def _get_or_none(self, get: Callable[[str, str], dict[str, Any]],
                     name: str) -> dict[str, Any] | None:
        try:
            return get(self.namespace, name)
        except NotFound:
            return None

    def view(self, obj: Mapping[str, Any], stored: StoredState,
             related: Mapping[str, Any]) -> Observation:
        """Interpret one read of the InferenceService, its state and what runs it (pure)."""
        meta = obj.get("metadata") or {}
        self._uid = meta.get("uid") or self._uid
        state = stored.state
        mode = deployment_mode(obj)
        if mode == KNATIVE:
            seen = knative.view(obj, state, related.get("revision_uris") or {})
            blockers = knative.start_blockers(obj, state)
        elif mode == STANDARD:
            seen = standard.view(_standard_seen(obj, related), state)
            blockers = canary_rules.start_blockers(obj, related.get("route"))
        else:
            seen = knative.ModeView(restored=state is None)
            blockers = []
        workers = related.get("workers") or queue.Workers()
        ready, promoted, restored = seen.ready, seen.promoted, seen.restored
        if state is not None:
            ready = ready and queue.canary_ready(workers, state)
            promoted = promoted and queue.promoted(workers, state)
            restored = restored and queue.restored(workers)
        return Observation(
            target=self.target,
            mode=mode or "unknown",
            version=stored.version,
            state=state,
            served=_served(obj, state),
            canary_weight_pct=seen.weight,
            canary_ready=ready,
            restored=restored,
            promoted=promoted,
            requested_weight_pct=seen.requested,
            traffic_note=seen.traffic_note,
            start_blockers=_start_blockers(obj, mode, state, promoted, blockers),
            detail={**seen.detail, **queue.detail(workers)},
            raw={"isvc": obj, **related},
        )

    # -- writing ---------------------------------------------------------------
    def apply(self, seen: Observation, change: Change, state: RolloutState) -> Observation:
        state = self._prepared(seen, change, state)
        if state != seen.state:
            stored = self.store.write(state, seen.version, self._uid)
        else:
            stored = StoredState(state, seen.version)
        obj: Mapping[str, Any] = seen.raw["isvc"]
        related: Mapping[str, Any] = {k: v for k, v in seen.raw.items() if k != "isvc"}
        current = seen
        for _ in range(SPEC_RETRIES):
            spec = self._spec_patch(current, change, state)
            if not spec:
                break
            patch = {"metadata": {"resourceVersion": _resource_version(obj)}, "spec": spec}
            try:
                obj = self.kube.patch_isvc(self.namespace, self.isvc, patch)
                break
            except Conflict:  # KServe wrote status meanwhile; the spec follows the state
                obj = self.kube.get_isvc(self.namespace, self.isvc)
                related = self._related(obj, state)
                current = self.view(obj, stored, related)
        actions = queue.plan(related.get("workers") or queue.Workers(), self.isvc, state)
        if actions:
            for action in actions:
                carry_out(self.kube, self.namespace, action)
            related = {**related, "workers": self._workers()}
        leftover = related.get("leftover_hpa")
        if leftover is not None:  # KServe deleted its Deployment, not its autoscaler
            with contextlib.suppress(NotFound):
                self.kube.delete_hpa(self.namespace, leftover["metadata"]["name"])
            related = {**related, "leftover_hpa": None}
        return self.view(obj, stored, related)

    def describe(self, seen: Observation, change: Change, state: RolloutState) -> Mapping[str, Any]:
        state = self._prepared(seen, change, state)
        planned: dict[str, Any] = {}
        if state != seen.state:
            planned["configmap"] = self.store.body(state, seen.version, self._uid)
        spec = self._spec_patch(seen, change, state)
        if spec:
            planned["inferenceservice"] = {"spec": spec}
        actions = queue.plan(seen.raw.get("workers") or queue.Workers(), self.isvc, state)
        if actions:
            planned["queue_workers"] = [a.to_dict() for a in actions]
        leftover = seen.raw.get("leftover_hpa")
        if leftover is not None:
            planned["delete_hpa"] = leftover["metadata"]["name"]
        return planned

    def _prepared(self, seen: Observation, change: Change, state: RolloutState) -> RolloutState:
        """``state`` with what this backend must remember of a new rollout."""
        if not isinstance(change, Deploy):
            return state
        if seen.start_blockers:
            raise RolloutError(f"cannot start on {seen.target}: {seen.start_blockers[0]}")
        obj = seen.raw["isvc"]
        if seen.mode == KNATIVE:
            data = {"mode": KNATIVE}
        else:
            data = standard.backend_data(obj, change, seen.raw.get("stable_deployment"),
                                         seen.target)
            for entry in standard.entries(obj):
                canary_rules.check_entry(entry, seen.target)
        return state.evolve(backend_data=data)

    def _spec_patch(self, seen: Observation, change: Change, state: RolloutState) -> dict[str, Any]:
        if isinstance(change, SaveState):
            return {}
        obj = seen.raw["isvc"]
        if seen.mode == KNATIVE:
            return knative.spec_for(obj, change, state, seen.raw.get("revision_uris") or {})
        if seen.mode == STANDARD:
            return standard.spec_for(_standard_seen(obj, seen.raw), change, state)
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

    def list_events(self) -> list[dict[str, Any]]:
        """The Kubernetes Events about the InferenceService (the API keeps them ~1 h)."""
        return self.kube.list_events(self.namespace, self.isvc)

    # -- defaults --------------------------------------------------------------
    def default_registry_url(self) -> str | None:
        """None: a cluster names no registry of its own (``--registry``, or the default)."""
        return None

    def default_prometheus_url(self) -> str | None:
        """None: a cluster names no Prometheus of its own (``--prometheus-url``)."""
        return None

    def announce_exporter(self, address: str | None) -> float | None:
        """None: the PodMonitor of manifests/40-monitoring.yaml finds a run's pod."""
        return None


# -- shared ------------------------------------------------------------------------
def read_workers(kube: KubeClient, namespace: str, isvc: str, candidate: str) -> queue.Workers:
    """The queue's workers of ``isvc`` (empty outside queue mode), with ``candidate``'s
    (the canary's or the shadow's) in the ``canary`` fields."""
    def get(read: Callable[[str, str], dict[str, Any]], name: str) -> dict[str, Any] | None:
        try:
            return read(namespace, name)
        except NotFound:
            return None

    stable = queue.names(isvc)[0]
    deployment = get(kube.get_deployment, stable)
    if deployment is None:
        return queue.Workers()
    return queue.Workers(stable=deployment, stable_scaler=get(kube.get_scaledobject, stable),
                         canary=get(kube.get_deployment, candidate),
                         canary_scaler=get(kube.get_scaledobject, candidate))


def carry_out(kube: KubeClient, namespace: str, action: queue.Action) -> None:
    """One write to the queue's workers; one already done (by a concurrent run) is fine."""
    deployment = action.kind == queue.DEPLOYMENT
    try:
        if action.verb == "create":
            (kube.create_deployment if deployment else kube.create_scaledobject)(
                namespace, action.body)
        elif action.verb == "patch":
            (kube.patch_deployment if deployment else kube.patch_scaledobject)(
                namespace, action.name, action.body)
        else:
            (kube.delete_deployment if deployment else kube.delete_scaledobject)(
                namespace, action.name)
    except (Conflict, NotFound):
        pass  # created or deleted meanwhile: the next reading decides again


def _standard_seen(obj: Mapping[str, Any], related: Mapping[str, Any]) -> standard.Seen:
    return standard.Seen(isvc=obj, stable_deployment=related.get("stable_deployment"),
                         canary_deployment=related.get("canary_deployment"),
                         route=related.get("route"), leftover_hpa=related.get("leftover_hpa"))


def _served(obj: Mapping[str, Any], state: RolloutState | None) -> Served:
    """What the predictor serves: the version the rollout state names for its URI, else
    the annotations ``modelctl deploy render`` wrote (which the rollout never changes:
    KServe would copy a change onto the pods)."""
    annotations = _annotations(obj)
    uri = knative.spec_uri(obj)
    version = annotations.get(VERSION_ANNOTATION)
    number = int(version) if version and version.isdigit() else None
    model = annotations.get(MODEL_ANNOTATION)
    if state is not None and uri in (state.stable_uri, state.canary_uri):
        # The stable stays the primary until the promotion (a Knative canary already
        # sits in spec.predictor).
        model = state.model
        number = state.canary_version if state.phase is Phase.PROMOTED else state.stable_version
    return Served(model=model, version=number, uri=uri)


def _start_blockers(obj: Mapping[str, Any], mode: str | None, state: RolloutState | None,
                    promoted: bool, specific: list[str]) -> tuple[str, ...]:
    problems: list[str] = []
    if state is not None and not state.phase.is_final:
        problems.append(f"a rollout to {state.canary_label} is already {state.phase.value}; "
                        "promote or roll it back first")
    if (state is not None and state.phase is Phase.PROMOTED and not state.aliases_synced
            and not promoted):
        problems.append(f"the promotion of {state.canary_label} is not in effect yet; "
                        "`modelctl rollout promote` or `run` finishes it")
    if mode is None:
        problems.append("KServe reports no deployment mode yet (status.deploymentMode)")
    if not knative.spec_uri(obj):
        problems.append("spec.predictor.model.storageUri is not set; modelctl rollouts "
                        "move that field")
    if not _is_ready(obj):
        problems.append("the InferenceService is not Ready")
    return tuple(problems + specific)


def _is_ready(obj: Mapping[str, Any]) -> bool:
    for condition in (obj.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Ready":
            return str(condition.get("status")) == "True"
    return False


def _resource_version(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion") or "")


def _annotations(obj: Mapping[str, Any]) -> dict[str, str]:
    return dict((obj.get("metadata") or {}).get("annotations") or {})
