"""What a running rollout tells Prometheus: ``rollout run --metrics-port`` serves these
on ``/metrics`` (prometheus_client), from the last state the run saw:

* ``modelctl_rollout_weight_percent{namespace, isvc, stable_version, canary_version}``:
  the canary's weight the rollout asks for (the dashboards show it beside the weight
  as routed);
* ``modelctl_rollout_phase{namespace, isvc, phase}``: 1 for the phase it is in, 0 for
  the others;
* ``modelctl_rollout_decisions_total{namespace, isvc, kind}``: the decisions in its
  history by kind (StepAdvanced, AnalysisFailed, Promoted, …): the Rollouts
  dashboard marks each increase as an annotation.

The labels are the rollout's own, so a scrape must keep them (``honorLabels: true``
on a PodMonitor; the dev environment's file discovery adds none).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

from rollout._state import Phase, RolloutState


class RolloutExporter:
    """A prometheus_client collector over the latest state; ``update`` is thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._state: RolloutState | None = None
        self._server: Any = None
        self._scraped = threading.Event()  # the latest state has been read since update

    def update(self, state: RolloutState) -> None:
        with self._lock:
            if state != self._state:
                self._scraped.clear()
            self._state = state

    def wait_scraped(self, timeout_s: float) -> bool:
        """Wait until the latest state has been scraped (a run's last decisions must
        reach Prometheus before it exits); False after ``timeout_s``."""
        return self._scraped.wait(timeout_s)

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        with self._lock:
            state = self._state
            if state is not None:
                self._scraped.set()
        if state is None:
            return
        scope = [state.namespace, state.isvc]
        weight = GaugeMetricFamily(
            "modelctl_rollout_weight_percent", "The canary's weight the rollout asks for.",
            labels=["namespace", "isvc", "stable_version", "canary_version"])
        weight.add_metric([*scope, str(state.stable_version), str(state.canary_version)],
                          state.weight_pct)
        phase = GaugeMetricFamily("modelctl_rollout_phase", "1 for the rollout's phase.",
                                  labels=["namespace", "isvc", "phase"])
        for each in Phase:
            phase.add_metric([*scope, each.value], 1.0 if state.phase is each else 0.0)
        decisions = CounterMetricFamily(
            "modelctl_rollout_decisions", "Decisions the rollout made, by kind.",
            labels=["namespace", "isvc", "kind"])
        counts: dict[str, int] = {}
        for decision in state.history:
            counts[decision.kind] = counts.get(decision.kind, 0) + 1
        for kind, n in sorted(counts.items()):
            decisions.add_metric([*scope, kind], n)
        yield from (weight, phase, decisions)

    def serve(self, port: int, host: str = "0.0.0.0") -> int:
        """Serve ``/metrics`` on ``host:port`` (0: a free port) in a thread; the port."""
        from prometheus_client import CollectorRegistry, start_http_server

        registry = CollectorRegistry(auto_describe=False)
        registry.register(self)
        self._server, _ = start_http_server(port, addr=host, registry=registry)
        return int(self._server.server_port)

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
