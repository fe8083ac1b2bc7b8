"""``KServeSim``: KServe's controller and the cluster under it, against an (emulated) API.

One :meth:`KServeSim.reconcile` runs rounds until a round writes nothing (at most
``MAX_ROUNDS``), so one call settles whatever can settle at the current clock time. A
round, over every object in the namespace, in the order a cluster would react:

1. KServe's InferenceService controller (``_controller``): the Knative Service, or the
   Standard-mode Services, Deployments and HPAs with their canaries and orphan cleanup,
   the Ingress or HTTPRoutes, then the InferenceService status;
2. the garbage collector (when an InferenceService went away) and the Gateway
   (``_cluster``);
3. Knative Serving (``_knative_serving``): Configuration, Revisions, Route, Service status;
4. the HPA controller (``_cluster``), then the Deployment and ReplicaSet controllers
   (``_deployments``).

Each reads a fresh :class:`~tests.support.kserve._api.Snapshot`; a 409 on a write ends that
controller's work for the round, and the next round retries (RetryOnConflict / requeue).
Any other API error is raised as the official client's ``ApiException``.

Source: kserve ``pkg/controller/v1beta1/inferenceservice/controller.go``
(``InferenceServiceReconciler.Reconcile``) for step 1, knative/serving
``pkg/reconciler/{service,configuration,route}`` for step 3, kubernetes
``pkg/controller/{garbagecollector,podautoscaler,deployment}`` for steps 2 and 4; the
modules named above cite the functions.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from typing import Any

from tests.support.kserve import _api, _cluster
from tests.support.kserve import config as c
from tests.support.kserve._controller import InferenceServiceController
from tests.support.kserve._deployments import DeploymentController
from tests.support.kserve._knative_serving import KnativeServing
from tests.support.kserve._status import Pod

MAX_ROUNDS = 12


class KServeSim:
    """Writes what KServe (and Knative, the Deployment and HPA controllers, a Gateway)
    would write for every InferenceService in ``namespace``.

    ``failing_uris``: storage URIs whose storage-initializer fails (their revisions and
    pods never become Ready). ``paused``: every emulated controller stands still.
    ``ready_delay_s``: how long a revision or pod created from now on takes to be Ready.
    """

    def __init__(self, api_client: Any, namespace: str, *,
                 clock: Callable[[], float] = time.time, ready_delay_s: float = 0.0,
                 config: c.KServeConfig = c.KSERVE_DEFAULTS) -> None:
        self.namespace = namespace
        self.clock = clock
        self.ready_delay_s = ready_delay_s
        self.config = config
        self.failing_uris: set[str] = set()
        self.paused = False
        self.passes = 0
        self.rounds = 0
        self._client = _api.RawClient(api_client)
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._owners: tuple[str, ...] | None = None
        now = self._now
        self.knative = KnativeServing(now, self._delay, self._failing)
        self.deployments = DeploymentController(now, self._delay, self._failing)
        self.hpas = _cluster.HPAController()
        self.gateway = _cluster.GatewayController(now)
        self.kserve = InferenceServiceController(config, now, self._pods)

    def _now(self) -> float:
        return float(self.clock())

    def _delay(self) -> float:
        return float(self.ready_delay_s)

    def _failing(self, uri: str | None) -> bool:
        return uri is not None and uri in self.failing_uris

    def _pods(self, kind: str, name: str) -> list[Pod]:
        if kind == "revision":
            return self.knative.revision_pods(name)
        return self.deployments.pods(name)

    # -- driving ------------------------------------------------------------------------
    def reconcile(self) -> None:
        """Rounds of every controller until a round writes nothing (see the module doc)."""
        if self.paused:
            return
        with self._lock:
            for _ in range(MAX_ROUNDS):
                before = self._client.writes
                self._round()
                self.rounds += 1
                if self._client.writes == before:
                    break
            self.passes += 1

    def _round(self) -> None:
        snapshot = self._snapshot()  # one informer-like cache, shared by the round
        owners = tuple(sorted(str(o["metadata"].get("uid")) for o in snapshot.list(_api.ISVC)))
        for isvc in snapshot.list(_api.ISVC):
            with contextlib.suppress(_api.Conflict):
                self.kserve.reconcile(snapshot, isvc)
        steps: list[Callable[[_api.Snapshot], None]] = [
            self.gateway.reconcile, self.knative.reconcile, self.hpas.reconcile,
            self.deployments.reconcile]
        if owners != self._owners:  # the garbage collector reacts to owners going away
            steps.insert(0, _cluster.collect_garbage)
            self._owners = owners
        for step in steps:
            with contextlib.suppress(_api.Conflict):
                step(snapshot)

    def _snapshot(self) -> _api.Snapshot:
        return _api.Snapshot(self._client, self.namespace)

    def start(self, interval_s: float = 0.02) -> KServeSim:
        def loop() -> None:
            while not self._stop.is_set():
                # A controller retries on its next pass (e.g. while the API restarts).
                with contextlib.suppress(Exception):
                    self.reconcile()
                self._stop.wait(interval_s)

        self._stop.clear()
        self._thread = threading.Thread(target=loop, name="kserve-sim", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None

    # -- inspection ---------------------------------------------------------------------
    def _owned(self, isvc: str, kind: _api.Kind) -> set[str]:
        snapshot = self._snapshot()
        return {o["metadata"]["name"] for o in snapshot.list(kind, {c.ISVC_LABEL: isvc})}

    def revisions(self, isvc: str) -> list[str]:
        """The Knative revisions of ``isvc``'s Knative Services, in creation order."""
        with self._lock:
            return self.knative.revisions_of(self._owned(isvc, _api.KSVC))

    def rollouts(self, isvc: str) -> dict[str, int]:
        """Deployment name -> how many pod templates it has rolled out since it was created
        (its revision, as ``deployment.kubernetes.io/revision`` counts: 1 for the first
        template, +1 per template change, i.e. per restart of its pods), for ``isvc``'s
        predictor Deployments that exist now."""
        with self._lock:
            return self.deployments.rollouts(self._owned(isvc, _api.DEPLOYMENT))

    def get(self, kind: _api.Kind, name: str) -> dict[str, Any] | None:
        """The object ``name`` of ``kind`` (e.g. ``kserve.DEPLOYMENT``) as the API has it."""
        return self._snapshot().get(kind, name)
