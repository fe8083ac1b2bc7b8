"""A stand-in for the Kubernetes Deployment controller, with its ReplicaSets and pods.

Ported from kubernetes/kubernetes ``pkg/controller/deployment``:
``deployment_controller.go`` ``syncDeployment`` (a scaling event, else the strategy),
``sync.go`` (``getNewReplicaSet``, ``scale`` with ``GetProportion``/``IsSaturated``,
``isScalingEvent``, ``calculateStatus``), ``rolling.go`` (``rolloutRolling``,
``reconcileNewReplicaSet``, ``reconcileOldReplicaSets``, ``cleanupUnhealthyReplicas``,
``scaleDownOldReplicaSetsForRollingUpdate``), ``recreate.go`` ``rolloutRecreate``,
``progress.go`` ``syncRolloutStatus``, and ``util/deployment_util.go``
``NewRSNewReplicas`` (the other helpers are in ``_deployment_util``).

ReplicaSets and pods live in memory: a pod created at time t is Ready (and available,
minReadySeconds 0) at t + ``ready_delay_s`` (read when it is created), sticky, and never
while its template's storage URI is in ``failing_uris`` (its storage-initializer fails
then). Not emulated: ``paused`` rollbacks (``rollbackTo``), revision-history cleanup
(old ReplicaSets are kept), ReplicaFailure (quota) and pod scheduling.
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tests.support.kserve import _api
from tests.support.kserve import config as c
from tests.support.kserve._conditions import timestamp
from tests.support.kserve._deployment_util import (
    FALSE,
    TRUE,
    deployment_complete,
    deployment_progressing,
    deployment_timed_out,
    get_condition,
    has_progress_deadline,
    max_surge,
    max_unavailable,
    set_condition,
    spec_replicas,
)
from tests.support.kserve._status import Pod


@dataclass
class _Pod:
    ready_at: float
    ready: bool = False


@dataclass
class _ReplicaSet:
    name: str
    template: dict[str, Any]
    created: float
    replicas: int = 0
    pods: list[_Pod] = field(default_factory=list)
    desired_annotation: int | None = None  # deployment.kubernetes.io/desired-replicas
    max_annotation: int | None = None  # deployment.kubernetes.io/max-replicas

    @property
    def uri(self) -> str | None:
        return c.template_uri(self.template)


@dataclass
class _State:
    uid: str
    replica_sets: list[_ReplicaSet] = field(default_factory=list)
    rollouts: int = 0


class DeploymentController:
    def __init__(self, now: Callable[[], float], ready_delay: Callable[[], float],
                 failing: Callable[[str | None], bool]) -> None:
        self.now = now
        self.ready_delay = ready_delay
        self.failing = failing
        self._states: dict[str, _State] = {}

    # -- inspection ---------------------------------------------------------------------
    def rollouts(self, names: set[str]) -> dict[str, int]:
        return {name: s.rollouts for name, s in sorted(self._states.items()) if name in names}

    def pods(self, name: str) -> list[Pod]:
        state = self._states.get(name)
        found = []
        for rs in sorted(state.replica_sets if state else [], key=lambda r: r.created):
            for pod in rs.pods:
                ready = self._ready(rs, pod)
                failed = not ready and self.failing(rs.uri) and self.now() >= pod.ready_at
                found.append(Pod(ready=ready, initializer_running=not ready and not failed,
                                 initializer_failed=failed))
        return found

    # -- pods and replica sets -----------------------------------------------------------
    def _ready(self, rs: _ReplicaSet, pod: _Pod) -> bool:
        if not pod.ready and not self.failing(rs.uri) and self.now() >= pod.ready_at:
            pod.ready = True
        return pod.ready

    def _available(self, rs: _ReplicaSet) -> int:
        return sum(1 for pod in rs.pods if self._ready(rs, pod))

    def _scale(self, rs: _ReplicaSet, size: int, d: dict[str, Any]) -> bool:
        """``scaleReplicaSet``: the ReplicaSet's spec and replica annotations."""
        changed = rs.replicas != size
        rs.replicas = size
        rs.desired_annotation = spec_replicas(d)
        rs.max_annotation = spec_replicas(d) + max_surge(d)
        return changed

    def _replica_sets(self, state: _State) -> None:
        """The ReplicaSet controller, after the Deployment controller's sync: pods created
        or deleted to match each ReplicaSet (the not-ready ones go first,
        ``getPodsToDelete``), so a new ReplicaSet's pods show in the next sync's status."""
        for rs in state.replica_sets:
            while len(rs.pods) < rs.replicas:
                rs.pods.append(_Pod(ready_at=self.now() + self.ready_delay()))
            if len(rs.pods) > rs.replicas:
                rs.pods.sort(key=lambda p: (self._ready(rs, p), -p.ready_at))
                del rs.pods[:len(rs.pods) - rs.replicas]

    # -- reconciling --------------------------------------------------------------------
    def reconcile(self, snapshot: _api.Snapshot) -> None:
        seen = set()
        for d in snapshot.list(_api.DEPLOYMENT):
            name = d["metadata"]["name"]
            seen.add(name)
            state = self._states.get(name)
            if state is None or state.uid != d["metadata"].get("uid"):
                state = self._states[name] = _State(uid=str(d["metadata"].get("uid")))
            working = copy.deepcopy(d)
            for _ in range(50):  # one sync per event; here until nothing moves
                before = (copy.deepcopy(working.get("status")), self._fingerprint(state))
                working["status"] = self._sync(working, state)
                self._replica_sets(state)
                if (working["status"], self._fingerprint(state)) == before:
                    break
            if working["status"] != (d.get("status") or {}):
                snapshot.replace_status(_api.DEPLOYMENT, {**d, "status": working["status"]})
        for gone in set(self._states) - seen:
            del self._states[gone]

    def _fingerprint(self, state: _State) -> list[tuple[str, int, int, int]]:
        return [(rs.name, rs.replicas, len(rs.pods), self._available(rs))
                for rs in state.replica_sets]

    def _sync(self, d: dict[str, Any], state: _State) -> dict[str, Any]:
        """``syncDeployment``."""
        status = copy.deepcopy(d.get("status") or {})
        template = (d.get("spec") or {}).get("template") or {}
        new = next((rs for rs in state.replica_sets if rs.template == template), None)
        olds = [rs for rs in state.replica_sets if rs is not new]
        if (d.get("spec") or {}).get("paused"):
            self._scale_event(d, new, olds)
            return self._rollout_status(d, status, new, olds)
        active = [rs for rs in state.replica_sets if rs.replicas > 0]
        if any(rs.desired_annotation is not None and rs.desired_annotation != spec_replicas(d)
               for rs in active):  # isScalingEvent
            self._scale_event(d, new, olds)
            return self._rollout_status(d, status, new, olds)
        strategy = ((d.get("spec") or {}).get("strategy") or {}).get("type", "RollingUpdate")
        if new is None:
            if strategy == "Recreate" and any(rs.replicas > 0 or rs.pods for rs in olds):
                for rs in olds:  # rolloutRecreate: old pods first, all of them
                    self._scale(rs, 0, d)
                return self._rollout_status(d, status, new, olds)
            new = self._new_replica_set(d, state, template, status)
        if strategy == "Recreate":
            self._scale(new, spec_replicas(d), d)
        elif not self._reconcile_new(d, new, olds):
            self._reconcile_old(d, new, olds)
        return self._rollout_status(d, status, new, olds)

    def _new_replica_set(self, d: dict[str, Any], state: _State, template: dict[str, Any],
                         status: dict[str, Any]) -> _ReplicaSet:
        """``getNewReplicaSet`` with createIfNotExisted: ``<deployment>-<pod-template-hash>``
        sized by ``NewRSNewReplicas``; Progressing True NewReplicaSetCreated."""
        digest = hashlib.sha256(json.dumps(template, sort_keys=True).encode()).hexdigest()[:10]
        rs = _ReplicaSet(f"{d['metadata']['name']}-{digest}", copy.deepcopy(template),
                         self.now())
        state.rollouts += 1  # the Deployment's revision: 1 for the first template
        state.replica_sets.append(rs)
        strategy = (d.get("spec") or {}).get("strategy") or {}
        if strategy.get("type", "RollingUpdate") == "Recreate":
            size = spec_replicas(d)
        else:
            total = sum(r.replicas for r in state.replica_sets)
            room = spec_replicas(d) + max_surge(d) - total
            size = min(max(room, 0), spec_replicas(d))
        self._scale(rs, size, d)
        set_condition(status, "Progressing", TRUE, "NewReplicaSetCreated",
                       f'Created new replica set "{rs.name}"', self.now())
        return rs

    def _scale_event(self, d: dict[str, Any], new: _ReplicaSet | None,
                     olds: list[_ReplicaSet]) -> None:
        """``scale``: one active (or latest) ReplicaSet takes the new count; a saturated new
        one empties the old; otherwise the change is spread proportionally."""
        replicas = spec_replicas(d)
        active = [rs for rs in [*olds, *([new] if new else [])] if rs.replicas > 0]
        if len(active) <= 1:
            latest = active[0] if active else new or max(olds, key=lambda r: r.created,
                                                         default=None)
            if latest is not None:
                self._scale(latest, replicas, d)
            return
        if new is not None and new.replicas == replicas and self._available(new) == replicas:
            for rs in olds:  # IsSaturated
                self._scale(rs, 0, d)
            return
        allowed = replicas + max_surge(d) if replicas > 0 else 0
        to_add = allowed - sum(rs.replicas for rs in active)
        order = sorted(active, key=lambda r: (-r.replicas, -r.created if to_add > 0 else r.created))
        added, sizes = 0, {}
        for rs in order:  # GetProportion
            proportion = 0
            if to_add not in (0, added):
                annotated = rs.max_annotation or int((d.get("status") or {}).get("replicas") or 0)
                fraction = (math.floor(rs.replicas * (replicas + max_surge(d)) / annotated
                                       + 0.5) - rs.replicas) if replicas and annotated else (
                    -rs.replicas)
                proportion = min(fraction, to_add - added) if to_add > 0 else max(
                    fraction, to_add - added)
            sizes[rs.name] = rs.replicas + proportion
            added += proportion
        if order and to_add:
            sizes[order[0].name] = max(sizes[order[0].name] + to_add - added, 0)
        for rs in order:
            self._scale(rs, sizes[rs.name], d)

    def _reconcile_new(self, d: dict[str, Any], new: _ReplicaSet, olds: list[_ReplicaSet]) -> bool:
        """``reconcileNewReplicaSet``."""
        replicas = spec_replicas(d)
        if new.replicas == replicas:
            return False
        if new.replicas > replicas:
            return self._scale(new, replicas, d)
        total = sum(rs.replicas for rs in [*olds, new])
        room = replicas + max_surge(d) - total
        size = new.replicas if room <= 0 else new.replicas + min(room, replicas - new.replicas)
        return self._scale(new, size, d)

    def _reconcile_old(self, d: dict[str, Any], new: _ReplicaSet, olds: list[_ReplicaSet]) -> bool:
        """``reconcileOldReplicaSets`` with ``cleanupUnhealthyReplicas`` and
        ``scaleDownOldReplicaSetsForRollingUpdate``."""
        if sum(rs.replicas for rs in olds) == 0:
            return False
        min_available = spec_replicas(d) - max_unavailable(d)
        all_pods = sum(rs.replicas for rs in [*olds, new])
        max_scaled_down = all_pods - min_available - (new.replicas - self._available(new))
        if max_scaled_down <= 0:
            return False
        cleaned = 0
        for rs in sorted(olds, key=lambda r: r.created):
            if cleaned >= max_scaled_down:
                break
            unhealthy = rs.replicas - self._available(rs)
            if rs.replicas == 0 or unhealthy == 0:
                continue
            count = min(max_scaled_down - cleaned, unhealthy)
            self._scale(rs, rs.replicas - count, d)
            cleaned += count
        available = sum(self._available(rs) for rs in [*olds, new])
        scaled = 0
        if available > min_available:
            total = available - min_available
            for rs in sorted(olds, key=lambda r: r.created):
                if scaled >= total:
                    break
                if rs.replicas == 0:
                    continue
                count = min(rs.replicas, total - scaled)
                self._scale(rs, rs.replicas - count, d)
                scaled += count
        return cleaned + scaled > 0

    def _rollout_status(self, d: dict[str, Any], old: dict[str, Any], new: _ReplicaSet | None,
                        olds: list[_ReplicaSet]) -> dict[str, Any]:
        """``calculateStatus`` + ``syncRolloutStatus``."""
        every = [*olds, *([new] if new else [])]
        available = sum(self._available(rs) for rs in every)
        replicas = spec_replicas(d)
        status: dict[str, Any] = {
            "observedGeneration": d["metadata"].get("generation", 1),
            "replicas": sum(len(rs.pods) for rs in every),
            "updatedReplicas": len(new.pods) if new else 0,
            "readyReplicas": available, "availableReplicas": available,
            "unavailableReplicas": max(sum(rs.replicas for rs in every) - available, 0),
            "conditions": copy.deepcopy(old.get("conditions") or []),
        }
        status = {k: v for k, v in status.items() if v not in (0, [])}
        now = self.now()
        if available >= replicas - max_unavailable(d):
            set_condition(status, "Available", TRUE, "MinimumReplicasAvailable",
                           "Deployment has minimum availability.", now)
        else:
            set_condition(status, "Available", FALSE, "MinimumReplicasUnavailable",
                           "Deployment does not have minimum availability.", now)
        if not has_progress_deadline(d):
            status["conditions"] = [x for x in status.get("conditions", [])
                                    if x.get("type") != "Progressing"]
        current = get_condition(old, "Progressing")
        complete_before = status.get("replicas", 0) == status.get("updatedReplicas", 0) and (
            current is not None and current.get("reason") == "NewReplicaSetAvailable")
        rs_name = f'ReplicaSet "{new.name}"' if new else f'Deployment "{d["metadata"]["name"]}"'
        if has_progress_deadline(d) and not complete_before:
            if deployment_complete(d, status):
                set_condition(status, "Progressing", TRUE, "NewReplicaSetAvailable",
                               f"{rs_name} has successfully progressed.", now)
            elif deployment_progressing(old, status):
                cond: dict[str, Any] = {
                    "type": "Progressing", "status": TRUE, "lastUpdateTime": timestamp(now),
                    "lastTransitionTime": timestamp(now), "reason": "ReplicaSetUpdated",
                    "message": f"{rs_name} is progressing."}
                if current is not None and current.get("status") == TRUE:
                    cond["lastTransitionTime"] = current.get("lastTransitionTime")
                status["conditions"] = [x for x in status.get("conditions", [])
                                        if x.get("type") != "Progressing"] + [cond]
            elif deployment_timed_out(d, status, now):
                set_condition(status, "Progressing", FALSE, "ProgressDeadlineExceeded",
                               f"{rs_name} has timed out progressing.", now)
        return status
