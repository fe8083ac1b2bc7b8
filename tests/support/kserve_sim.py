"""A test-side stand-in for the KServe controller: it writes InferenceService ``status``.

It reads InferenceServices through the official client and patches their
``/status`` subresource the way KServe documents and implements it:

Knative mode (``serving.kserve.io/deploymentMode: Knative``): every change of the
predictor's revision template (the predictor spec without
``canaryTrafficPercent``, plus the InferenceService's annotations and labels that
are not in ``serviceAnnotationDisallowedList``) creates a revision
``<isvc>-predictor-0000N``; it becomes Ready ``ready_delay_s`` (as set when it
was created) later, never if its ``storageUri`` is in ``failing_uris``. Traffic
follows KServe's Knative service reconciler: with ``canaryTrafficPercent`` set
and a rolled-out revision, the latest *ready* revision gets that share (tag
``latest``) and the last rolled-out one the rest (tag ``prev``); otherwise the
latest ready revision gets 100%.
``latestRolledoutRevision`` / ``previousRolledoutRevision`` move as in
``InferenceServiceStatus.PropagateStatus``.

Standard mode: one Deployment per predictor name (``<isvc>-predictor`` or
``<isvc>-<name>-predictor``) and per ``spec.canary[]`` entry; each is Ready
``ready_delay_s`` after its template last changed; ``status.canaryStatuses`` lists
each canary's ``name``, ``ready`` and ``trafficPercent``.

Both modes report ``deploymentMode``, ``observedGeneration`` and a ``Ready``
condition. ``reconcile()`` runs one pass (tests call it tick by tick with a fake
clock); ``start()`` runs passes in a background thread on the real clock.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

GROUP, VERSION, PLURAL = "serving.kserve.io", "v1beta1", "inferenceservices"
MODE_ANNOTATION = "serving.kserve.io/deploymentMode"
# What the platform's KServe config adds to serviceAnnotationDisallowedList (docs/ROLLOUT.md).
DEFAULT_DISALLOWED = (
    "rollout.modelctl.io/state",
    "modelctl.io/model",
    "modelctl.io/version",
    "kubectl.kubernetes.io/last-applied-configuration",
)


@dataclass
class _Unit:
    """A Knative revision or a Deployment: its template and when it becomes Ready."""

    name: str
    template: str
    uri: str | None
    ready_at: float


@dataclass
class _Memory:
    revisions: list[_Unit] = field(default_factory=list)
    rolled_out: str | None = None
    previous_rolled_out: str | None = None
    deployments: dict[str, _Unit] = field(default_factory=dict)


class KServeSim:
    """Writes the status KServe would write for every InferenceService in ``namespace``."""

    def __init__(
        self,
        api_client: Any,
        namespace: str,
        *,
        clock: Callable[[], float] = time.time,
        ready_delay_s: float = 0.0,
        disallowed_annotations: tuple[str, ...] = DEFAULT_DISALLOWED,
    ) -> None:
        from kubernetes import client

        self._api = client.CustomObjectsApi(api_client)
        self.namespace = namespace
        self.clock = clock
        self.ready_delay_s = ready_delay_s
        self.disallowed = disallowed_annotations
        self.failing_uris: set[str] = set()
        self.paused = False
        self._memory: dict[str, _Memory] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.passes = 0

    # -- driving ------------------------------------------------------------------------
    def reconcile(self) -> None:
        """One pass over every InferenceService: compute and patch its status."""
        if self.paused:
            return
        items: Any = self._api.list_namespaced_custom_object(
            GROUP, VERSION, self.namespace, PLURAL)
        for obj in items.get("items") or []:
            status = self._status_for(obj)
            if _changed(obj.get("status") or {}, status):
                self._api.patch_namespaced_custom_object_status(
                    GROUP, VERSION, self.namespace, PLURAL, obj["metadata"]["name"],
                    {"status": status})
        self.passes += 1

    def start(self, interval_s: float = 0.02) -> KServeSim:
        def loop() -> None:
            while not self._stop.is_set():
                # A controller retries on its next pass (e.g. while the API restarts).
                with contextlib.suppress(Exception):
                    self.reconcile()
                self._stop.wait(interval_s)

        self._thread = threading.Thread(target=loop, name="kserve-sim", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def revisions(self, isvc: str) -> list[str]:
        return [r.name for r in self._memory.get(isvc, _Memory()).revisions]

    # -- status ---------------------------------------------------------------------------
    def _status_for(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        meta = obj.get("metadata") or {}
        name = meta["name"]
        memory = self._memory.setdefault(name, _Memory())
        mode = (meta.get("annotations") or {}).get(MODE_ANNOTATION, "Standard")
        if mode in ("Knative", "Serverless"):
            status = self._knative(obj, memory)
            status["deploymentMode"] = "Knative"
        else:
            status = self._standard(obj, memory)
            status["deploymentMode"] = "Standard"
        status["observedGeneration"] = meta.get("generation", 1)
        return status

    def _template(self, obj: Mapping[str, Any], predictor: Mapping[str, Any]) -> str:
        meta = obj.get("metadata") or {}
        annotations = {k: v for k, v in (meta.get("annotations") or {}).items()
                       if k not in self.disallowed}
        spec = {k: v for k, v in predictor.items() if k != "canaryTrafficPercent"}
        return json.dumps({"predictor": spec, "annotations": annotations,
                           "labels": meta.get("labels") or {}}, sort_keys=True)

    def _is_ready(self, unit: _Unit) -> bool:
        if unit.uri is not None and unit.uri in self.failing_uris:
            return False
        return self.clock() >= unit.ready_at

    def _knative(self, obj: Mapping[str, Any], memory: _Memory) -> dict[str, Any]:
        name = obj["metadata"]["name"]
        predictor = (obj.get("spec") or {}).get("predictor") or {}
        template = self._template(obj, predictor)
        if not memory.revisions or memory.revisions[-1].template != template:
            number = len(memory.revisions) + 1
            uri = (predictor.get("model") or {}).get("storageUri")
            memory.revisions.append(_Unit(f"{name}-predictor-{number:05d}", template, uri,
                                          self.clock() + self.ready_delay_s))
        created = memory.revisions[-1].name
        ready = [r.name for r in memory.revisions if self._is_ready(r)]
        latest_ready = ready[-1] if ready else None
        traffic = self._knative_traffic(predictor.get("canaryTrafficPercent"), latest_ready,
                                        memory)
        self._propagate(traffic, latest_ready, created, memory)
        component: dict[str, Any] = {
            "latestCreatedRevision": created,
            "latestReadyRevision": latest_ready,
            "latestRolledoutRevision": memory.rolled_out,
            "previousRolledoutRevision": memory.previous_rolled_out,
            "traffic": traffic,
        }
        is_ready = latest_ready is not None
        return {"components": {"predictor": component},
                "conditions": _conditions(is_ready)}

    @staticmethod
    def _knative_traffic(percent: int | None, latest_ready: str | None,
                         memory: _Memory) -> list[dict[str, Any]]:
        if latest_ready is None:
            return []
        last = memory.rolled_out
        # KServe: a rolled-out revision that is also the latest ready one, with a split
        # asked for, means a rollback: the previous rolled-out revision takes the rest.
        if last == latest_ready and percent is not None and percent < 100:
            last = memory.previous_rolled_out
        if percent is not None and last:
            traffic = [{"tag": "latest", "latestRevision": True, "percent": percent,
                        "revisionName": latest_ready}]
            if percent < 100:
                traffic.append({"tag": "prev", "latestRevision": False,
                                "percent": 100 - percent, "revisionName": last})
            return traffic
        return [{"latestRevision": True, "percent": 100, "revisionName": latest_ready}]

    @staticmethod
    def _propagate(traffic: list[dict[str, Any]], latest_ready: str | None, created: str,
                   memory: _Memory) -> None:
        per_revision: dict[str, int] = {}
        for target in traffic:
            per_revision[target["revisionName"]] = (per_revision.get(target["revisionName"], 0)
                                                    + int(target["percent"]))
        for target in traffic:
            if target["revisionName"] != latest_ready or not target["latestRevision"]:
                continue
            if memory.rolled_out != latest_ready:
                if target["percent"] == 100:
                    memory.previous_rolled_out = memory.rolled_out
                    memory.rolled_out = latest_ready
            elif (latest_ready == created and target["percent"] < 100
                  and per_revision.get(latest_ready) == 100 and memory.previous_rolled_out):
                memory.rolled_out = memory.previous_rolled_out

    def _standard(self, obj: Mapping[str, Any], memory: _Memory) -> dict[str, Any]:
        name = obj["metadata"]["name"]
        spec = obj.get("spec") or {}
        predictor = spec.get("predictor") or {}
        wanted: dict[str, tuple[str, str | None]] = {}
        main = predictor.get("name")
        main_name = f"{name}-{main}-predictor" if main else f"{name}-predictor"
        wanted[main_name] = (self._template(obj, predictor),
                             (predictor.get("model") or {}).get("storageUri"))
        entries = list(spec.get("canary") or [])
        for entry in entries:
            canary = entry.get("predictor") or {}
            wanted[f"{name}-{canary.get('name')}-predictor"] = (
                self._template(obj, canary), (canary.get("model") or {}).get("storageUri"))
        for deployment, (template, uri) in wanted.items():
            unit = memory.deployments.get(deployment)
            if unit is None or unit.template != template:
                memory.deployments[deployment] = _Unit(deployment, template, uri,
                                                       self.clock() + self.ready_delay_s)
        for stale in set(memory.deployments) - set(wanted):
            del memory.deployments[stale]
        statuses = []
        for entry in entries:
            canary_name = (entry.get("predictor") or {}).get("name")
            unit = memory.deployments[f"{name}-{canary_name}-predictor"]
            ready = self._is_ready(unit)
            statuses.append({"name": canary_name, "ready": ready,
                             "trafficPercent": int(entry.get("trafficPercent") or 0) if ready
                             else 0,
                             "modelStatus": {"transitionStatus":
                                             "UpToDate" if ready else "InProgress"}})
        main_ready = self._is_ready(memory.deployments[main_name])
        return {"components": {"predictor": {"url": f"http://{main_name}.svc"}},
                "canaryStatuses": statuses or None,
                "conditions": _conditions(main_ready)}


def _conditions(ready: bool) -> list[dict[str, str]]:
    value = "True" if ready else "False"
    return [{"type": "PredictorReady", "status": value}, {"type": "Ready", "status": value}]


def _changed(current: Mapping[str, Any], wanted: Mapping[str, Any]) -> bool:
    for key, value in wanted.items():
        if value is None:
            if key in current:
                return True
        elif current.get(key) != value:
            return True
    return False
