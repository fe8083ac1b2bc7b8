"""A stand-in for Knative Serving's controllers: Service -> Configuration -> Revisions, Route.

Ported from knative/serving (main, 98e5ef90aa) and knative/pkg:

* ``pkg/reconciler/service/service.go`` ``ReconcileKind``/``checkRoutesNotReady`` and
  ``pkg/apis/serving/v1/service_lifecycle.go`` (``PropagateConfigurationStatus``,
  ``PropagateRouteStatus``, ``MarkRouteNotYetReady``): Ready = ConfigurationsReady and
  RoutesReady; ``resources/configuration.go``/``route.go`` copy the template and traffic.
* ``pkg/reconciler/configuration/configuration.go`` (``ReconcileKind``,
  ``findAndSetLatestReadyRevision``) and ``resources/revision.go`` ``MakeRevision``: a
  Revision ``<config>-<generation, 5 digits>`` per Configuration generation, which moves
  only when ``spec.template`` changes; ``configuration_lifecycle.go`` for its conditions.
* ``pkg/reconciler/route/route.go`` ``configureTraffic`` and ``route/traffic/traffic.go``
  (``BuildTrafficConfiguration``, ``addConfigurationTarget``, ``addRevisionTarget``,
  ``mergeIfNecessary``, ``GetRevisionTrafficTargets``): ``latestRevision: true`` resolves
  to the Configuration's latestReadyRevisionName; a target that is not ready leaves the
  Route's traffic as it was (``MarkBadTrafficTarget``); ``route_lifecycle.go``.
* knative/pkg ``reconciler/reconcile_common.go`` ``PostProcessReconcile``:
  ``status.observedGeneration`` = ``metadata.generation`` once reconciled.

Revisions: Ready ``ready_delay_s`` (read when it is created) after creation, sticky once
Ready; never while its ``storage-initializer-sourceuri`` is in ``failing_uris``, and False
with ``ProgressDeadlineExceeded`` once Knative's progress deadline (600 s,
``pkg/deployment/config.go`` ``ProgressDeadlineDefault``) has passed
(``revision_lifecycle.go`` ``PropagateAutoscalerStatus``). Not emulated: gradual rollout
(``rollout-duration``), scale to zero, the KIngress/network layer (taken as Ready at once,
no TLS: ``MarkTLSNotEnabled``), BYO revision names, Knative's defaulting webhook. The
Configuration, Route and Revision objects are kept here and written to the API as they
change (only this stand-in writes them).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tests.support.kserve import _api
from tests.support.kserve import config as c
from tests.support.kserve._conditions import FALSE, TRUE, UNKNOWN, ConditionSet, get_condition
from tests.support.kserve._status import Pod

PROGRESS_DEADLINE_S = 600.0
DOMAIN = "svc.cluster.local"  # route/config/domain.go DefaultDomain


@dataclass
class Revision:
    name: str
    generation: int
    created: float
    ready_at: float
    template: dict[str, Any]
    replicas: int
    became_ready: bool = False

    @property
    def uri(self) -> str | None:
        return c.template_uri(self.template)


@dataclass
class _State:
    uid: str
    generation: int = 0  # the Configuration's
    template: dict[str, Any] | None = None
    revisions: list[Revision] = field(default_factory=list)
    config_status: dict[str, Any] = field(default_factory=dict)
    route_generation: int = 0
    route_traffic: list[dict[str, Any]] | None = None
    route_status: dict[str, Any] = field(default_factory=dict)


class KnativeServing:
    def __init__(self, now: Callable[[], float], ready_delay: Callable[[], float],
                 failing: Callable[[str | None], bool]) -> None:
        self.now = now
        self.ready_delay = ready_delay
        self.failing = failing
        self._states: dict[str, _State] = {}

    # -- inspection ---------------------------------------------------------------------
    def revisions_of(self, ksvc_names: set[str]) -> list[str]:
        found = [r for name, state in self._states.items() if name in ksvc_names
                 for r in state.revisions]
        return [r.name for r in sorted(found, key=lambda r: r.created)]

    def revision_pods(self, name: str) -> list[Pod]:
        for state in self._states.values():
            for revision in state.revisions:
                if revision.name == name:
                    status, _, _ = self._revision_ready(revision)
                    failed = status == FALSE
                    return [Pod(ready=status == TRUE, initializer_running=status == UNKNOWN,
                                initializer_failed=failed)] * revision.replicas
        return []

    # -- reconciling --------------------------------------------------------------------
    def reconcile(self, snapshot: _api.Snapshot) -> None:
        seen = set()
        for ksvc in snapshot.list(_api.KSVC):
            name = ksvc["metadata"]["name"]
            seen.add(name)
            state = self._states.get(name)
            if state is None or state.uid != ksvc["metadata"].get("uid"):
                state = self._states[name] = _State(uid=str(ksvc["metadata"].get("uid")))
            self._configuration(ksvc, state)
            self._route(ksvc, state)
            self._service_status(snapshot, ksvc, state)
            self._publish(snapshot, ksvc, state)
        for gone in set(self._states) - seen:
            self._unpublish(snapshot, self._states.pop(gone))

    def _revision_ready(self, revision: Revision) -> tuple[str, str, str]:
        now = self.now()
        if revision.became_ready:
            return TRUE, "", ""
        if self.failing(revision.uri):
            if now >= revision.created + PROGRESS_DEADLINE_S:
                return FALSE, "ProgressDeadlineExceeded", "Initial scale was never achieved"
            return UNKNOWN, "Deploying", ""
        if now >= revision.ready_at:
            revision.became_ready = True
            return TRUE, "", ""
        return UNKNOWN, "Deploying", ""

    def _configuration(self, ksvc: dict[str, Any], state: _State) -> None:
        """The Service reconciler's ``reconcileConfiguration`` + the Configuration's
        ``ReconcileKind``."""
        name = ksvc["metadata"]["name"]
        template = copy.deepcopy((ksvc.get("spec") or {}).get("template") or {})
        if state.template != template:
            state.template = template
            state.generation += 1
        status = state.config_status
        manager = ConditionSet(status, (), now=self.now)
        manager.initialize()
        current = next((r for r in state.revisions if r.generation == state.generation), None)
        if current is None:  # createRevision (MakeRevision)
            now = self.now()
            scale = (template.get("metadata") or {}).get("annotations", {}).get(
                c.KNATIVE_MIN_SCALE, "1")
            current = Revision(f"{name}-{state.generation:05d}", state.generation, now,
                               now + self.ready_delay(), template, max(int(scale), 1))
            state.revisions.append(current)
        status["latestCreatedRevisionName"] = current.name  # SetLatestCreatedRevisionName
        if status.get("latestReadyRevisionName") != current.name:
            manager.mark_unknown("Ready", "", "")
        ready, _, message = self._revision_ready(current)
        if ready == FALSE:  # MarkLatestCreatedFailed
            manager.mark_false("Ready", "RevisionFailed",
                               f'Revision "{current.name}" failed with message: {message}.')
        floor = next((r.generation for r in state.revisions
                      if r.name == status.get("latestReadyRevisionName")), 0)
        for revision in sorted(state.revisions, key=lambda r: -r.generation):
            if floor <= revision.generation <= state.generation and (
                    self._revision_ready(revision)[0] == TRUE):
                status["latestReadyRevisionName"] = revision.name  # SetLatestReadyRevisionName
                if revision.name == current.name:
                    manager.mark_true("Ready")
                break
        status["observedGeneration"] = state.generation

    def _route(self, ksvc: dict[str, Any], state: _State) -> None:
        """``MakeRoute`` + the Route's ``configureTraffic`` (network layer Ready at once)."""
        name = ksvc["metadata"]["name"]
        spec_traffic = [dict(t) for t in (ksvc.get("spec") or {}).get("traffic") or []]
        for target in spec_traffic:
            if not target.get("revisionName"):
                target["configurationName"] = name
        if state.route_traffic != spec_traffic:
            state.route_traffic = spec_traffic
            state.route_generation += 1
        status = state.route_status
        manager = ConditionSet(status, ("AllTrafficAssigned", "IngressReady",
                                        "CertificateProvisioned"), now=self.now)
        manager.initialize()
        host = f"{name}.{ksvc['metadata'].get('namespace', '')}.{DOMAIN}"
        status["url"] = f"http://{host}"
        status["address"] = {"url": f"http://{host}"}
        flattened, error = self._build_traffic(spec_traffic, state)
        if error is not None and error[0] == FALSE:
            manager.mark_false(*error[1:])
        elif error is not None:
            manager.mark_unknown(*error[1:])
        else:
            status["traffic"] = flattened
            manager.mark_true("AllTrafficAssigned")
            manager.mark_true("IngressReady")
            manager.mark_true_with_reason("CertificateProvisioned", "TLSNotEnabled",
                                          "external-domain-tls is not enabled")
        status["observedGeneration"] = state.route_generation

    def _build_traffic(self, traffic: list[dict[str, Any]], state: _State
                       ) -> tuple[list[dict[str, Any]], tuple[str, str, str, str] | None]:
        """``BuildTrafficConfiguration`` + ``GetRevisionTrafficTargets``; the first target
        error is kept unless a later one is a failure (``deferTargetError``)."""
        revisions = {r.name: r for r in state.revisions}
        flattened: list[dict[str, Any]] = []
        error: tuple[str, str, str, str] | None = None
        assigned = "AllTrafficAssigned"
        for target in traffic:
            found: tuple[str, str, str, str] | None = None
            if target.get("revisionName"):
                name = target["revisionName"]
                revision = revisions.get(name)
                if revision is None:
                    found = (FALSE, assigned, "RevisionMissing",
                             f'Revision "{name}" referenced in traffic not found.')
                else:
                    ready = self._revision_ready(revision)[0]
                    if ready != TRUE:
                        found = (ready, assigned, "RevisionMissing",
                                 f'Revision "{name}" failed to become ready.' if ready == FALSE
                                 else f'Revision "{name}" is not yet ready.')
            else:
                config = target["configurationName"]
                name = state.config_status.get("latestReadyRevisionName", "")
                if not name:
                    failed = (get_condition(state.config_status, "Ready") or {}).get(
                        "status") == FALSE
                    found = (FALSE if failed else UNKNOWN, assigned, "RevisionMissing",
                             f'Configuration "{config}" does not have any ready Revision.'
                             if failed else
                             f'Configuration "{config}" is waiting for a Revision to become'
                             " ready.")
            if found is not None:
                if error is None or found[0] == FALSE:
                    error = found
                continue
            entry = {"tag": target.get("tag"), "revisionName": name,
                     "latestRevision": target.get("latestRevision"),
                     "percent": int(target.get("percent") or 0)}
            for existing in flattened:  # mergeIfNecessary
                if (existing["tag"], existing["revisionName"], existing["latestRevision"]) == (
                        entry["tag"], entry["revisionName"], entry["latestRevision"]):
                    existing["percent"] += entry["percent"]
                    break
            else:
                flattened.append(entry)
        out = []
        for entry in flattened:
            item = {k: v for k, v in entry.items() if v not in (None, "")}
            if entry.get("tag"):
                ns_host = f"{entry['tag']}-{self._route_host_suffix(state)}"
                item["url"] = f"http://{ns_host}"
            out.append(item)
        return out, error

    def _route_host_suffix(self, state: _State) -> str:
        url = str(state.route_status.get("url", "http://"))
        return url.split("://", 1)[1]

    def _service_status(self, snapshot: _api.Snapshot, ksvc: dict[str, Any],
                        state: _State) -> None:
        """The Service reconciler: PropagateConfigurationStatus, PropagateRouteStatus,
        checkRoutesNotReady, observedGeneration; written with UpdateStatus when changed."""
        status = copy.deepcopy(ksvc.get("status") or {})
        manager = ConditionSet(status, ("ConfigurationsReady", "RoutesReady"), now=self.now)
        manager.initialize()
        for key in ("latestReadyRevisionName", "latestCreatedRevisionName"):
            if state.config_status.get(key):
                status[key] = state.config_status[key]
        _propagate(manager, "ConfigurationsReady", get_condition(state.config_status, "Ready"))
        for key in ("url", "address", "traffic"):
            if key in state.route_status:
                status[key] = copy.deepcopy(state.route_status[key])
        _propagate(manager, "RoutesReady", get_condition(state.route_status, "Ready"))
        routes = get_condition(status, "RoutesReady") or {}
        if routes.get("status") == TRUE:
            want = [{"tag": t.get("tag"), "revisionName": t.get("revisionName") or
                     state.config_status.get("latestReadyRevisionName"),
                     "percent": t.get("percent")} for t in state.route_traffic or []]
            got = [{"tag": t.get("tag"), "revisionName": t.get("revisionName"),
                    "percent": t.get("percent")} for t in status.get("traffic") or []]
            if want != got:
                manager.mark_unknown("RoutesReady", "TrafficNotMigrated",
                                     "Traffic is not yet migrated to the latest revision.")
        status["observedGeneration"] = ksvc["metadata"].get("generation", 1)
        if status != (ksvc.get("status") or {}):
            snapshot.replace_status(_api.KSVC, {**ksvc, "status": status})

    # -- the objects in the API ---------------------------------------------------------
    def _publish(self, snapshot: _api.Snapshot, ksvc: dict[str, Any], state: _State) -> None:
        name, namespace = ksvc["metadata"]["name"], ksvc["metadata"].get("namespace", "")
        owner = [_api.owner_reference(ksvc, _api.KSVC)]
        labels = {**(ksvc["metadata"].get("labels") or {}), "serving.knative.dev/service": name}
        _put(snapshot, _api.CONFIGURATION, {
            "metadata": {"name": name, "namespace": namespace, "labels": labels,
                         "ownerReferences": owner},
            "spec": {"template": state.template}}, state.config_status)
        _put(snapshot, _api.ROUTE, {
            "metadata": {"name": name, "namespace": namespace, "labels": labels,
                         "ownerReferences": owner},
            "spec": {"traffic": state.route_traffic}}, state.route_status)
        for revision in state.revisions:
            published = snapshot.get(_api.REVISION, revision.name) or {}
            status = copy.deepcopy(published.get("status") or {})
            manager = ConditionSet(status, ("ResourcesAvailable", "ContainerHealthy"),
                                   now=self.now)
            ready, reason, message = self._revision_ready(revision)
            if ready == TRUE:
                manager.mark_true("ResourcesAvailable")
                manager.mark_true("ContainerHealthy")
            elif ready == FALSE:
                manager.mark_false("ResourcesAvailable", reason, message)
            else:
                manager.mark_unknown("ResourcesAvailable", reason, message)
            status["observedGeneration"] = 1
            meta = revision.template.get("metadata") or {}
            _put(snapshot, _api.REVISION, {
                "metadata": {"name": revision.name, "namespace": namespace,
                             "labels": {**(meta.get("labels") or {}),
                                        "serving.knative.dev/configuration": name,
                                        "serving.knative.dev/configurationGeneration":
                                            str(revision.generation),
                                        "serving.knative.dev/service": name},
                             "annotations": dict(meta.get("annotations") or {})},
                "spec": copy.deepcopy(revision.template.get("spec") or {})}, status)

    def _unpublish(self, snapshot: _api.Snapshot, state: _State) -> None:
        for revision in state.revisions:
            snapshot.delete(_api.REVISION, revision.name)


def _propagate(manager: ConditionSet, kind: str, condition: dict[str, Any] | None) -> None:
    if condition is None:
        return
    if condition.get("status") == TRUE:
        manager.mark_true(kind)
    elif condition.get("status") == FALSE:
        manager.mark_false(kind, condition.get("reason", ""), condition.get("message", ""))
    else:
        manager.mark_unknown(kind, condition.get("reason", ""), condition.get("message", ""))


def _put(snapshot: _api.Snapshot, kind: _api.Kind, obj: dict[str, Any],
         status: dict[str, Any]) -> None:
    existing = snapshot.get(kind, obj["metadata"]["name"])
    if existing is None:
        existing = snapshot.create(kind, obj)
    elif {k: existing.get(k) for k in ("spec",)} != {"spec": obj["spec"]}:
        existing = snapshot.replace(kind, {**obj, "metadata": {
            **obj["metadata"], "resourceVersion": existing["metadata"].get("resourceVersion")}})
    if (existing.get("status") or {}) != status:
        snapshot.replace_status(kind, {**existing, "status": copy.deepcopy(status)})
