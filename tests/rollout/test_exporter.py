"""``rollout run``'s exporter: a real HTTP server on loopback, read back with
prometheus_client's own parser, as Prometheus would scrape it."""

from __future__ import annotations

import dataclasses

import httpx
from prometheus_client.parser import text_string_to_metric_families

from rollout import Decision, Phase, Plan, RolloutExporter, RolloutState


def _state(**changes: object) -> RolloutState:
    base = RolloutState(namespace="ml", isvc="demo", model="m", stable_version=1,
                        stable_uri="s3://r/m/1", canary_version=2, canary_uri="s3://r/m/2",
                        plan=Plan((10, 50), 60.0, 2), weight_pct=10, history=(
                            Decision(1.0, "RolloutStarted", "", 0, 10),
                            Decision(2.0, "CanaryReady", "", 0, 10)))
    return dataclasses.replace(base, **changes)  # type: ignore[arg-type]


Labels = frozenset[tuple[str, str]]


def _key(**labels: str) -> Labels:
    return frozenset({"namespace": "ml", "isvc": "demo", **labels}.items())


def _scrape(port: int) -> dict[str, dict[Labels, float]]:
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
    return {f.name: {frozenset(s.labels.items()): s.value for s in f.samples}
            for f in text_string_to_metric_families(text)}


def test_the_exporter_serves_the_latest_state() -> None:
    exporter = RolloutExporter()
    port = exporter.serve(0, host="127.0.0.1")
    try:
        assert _scrape(port) == {}  # nothing until a state is seen
        exporter.update(_state())
        seen = _scrape(port)
        assert seen["modelctl_rollout_weight_percent"] == {
            _key(stable_version="1", canary_version="2"): 10.0}
        assert seen["modelctl_rollout_phase"][_key(phase="Progressing")] == 1.0
        assert seen["modelctl_rollout_phase"][_key(phase="Promoted")] == 0.0
        assert seen["modelctl_rollout_decisions"] == {_key(kind="CanaryReady"): 1.0,
                                                      _key(kind="RolloutStarted"): 1.0}

        later = _state(phase=Phase.PROMOTED, weight_pct=100, history=(
            *_state().history, Decision(3.0, "StepAdvanced", "", 0, 10),
            Decision(4.0, "StepAdvanced", "", 1, 50), Decision(5.0, "Promoted", "", 1, 50)))
        exporter.update(later)
        assert not exporter.wait_scraped(0.1)  # a new state, not yet read
        seen = _scrape(port)
        assert exporter.wait_scraped(0)  # what `rollout run` waits for before it exits
        assert seen["modelctl_rollout_decisions"][_key(kind="StepAdvanced")] == 2.0
        assert seen["modelctl_rollout_phase"][_key(phase="Promoted")] == 1.0
        assert list(seen["modelctl_rollout_weight_percent"].values()) == [100.0]
    finally:
        exporter.close()
    with_closed = httpx.Client(timeout=1)
    try:
        with_closed.get(f"http://127.0.0.1:{port}/metrics")
        raise AssertionError("the exporter still answers after close()")
    except httpx.TransportError:
        pass
    finally:
        with_closed.close()
