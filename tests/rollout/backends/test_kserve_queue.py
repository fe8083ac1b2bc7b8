"""A rollout in queue mode gives the canary version its own workers (issue 15).

The worker Deployment and ScaledObject are the queue overlay's, rendered by
``deploy render``'s code with real kustomize; the cluster is the emulated API server
with the ported KServe and Deployment controllers (tests/support/kserve). What the
rollout creates is checked against the real schemas (.modelctl/crds/keda, Kubernetes'
OpenAPI) by ``deploy validate``'s checker.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from deploycheck import Checker
from rollout import Command, Engine, Plan, start_rollout
from rollout.analysis._results import Verdict
from rollout.backends._interface import Promote
from tests.fakes.analyzer import ScriptedAnalyzer
from tests.fakes.clock import FakeClock
from tests.support.rollout_world import (
    ISVC,
    MODEL,
    World,
    add_queue_workers,
    get_or_none,
    make_world,
    storage_uri,
    streams,
)

STABLE, CANARY = f"{ISVC}-queue-worker", f"{ISVC}-queue-worker-canary"
P = Verdict.PASS


def _queue_world(tmp_path: Path, mode: str) -> World:
    world = make_world(tmp_path, FakeClock(1_800_000_000.0), mode=mode)
    add_queue_workers(world)
    return world


@pytest.fixture(params=["Knative", "Standard"])
def world(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[World]:
    w = _queue_world(tmp_path, request.param)
    yield w
    w.api.stop()


def _engine(world: World, script: list[Any]) -> Engine:
    return Engine(world.backend(), clock=world.clock, holder="run", lease_s=300.0,
                  registry=world.registry, analyzer=ScriptedAnalyzer(script, clock=world.clock))


def _start(world: World) -> None:
    start_rollout(world.backend(), world.registry, model=MODEL, ref="2",
                  plan=Plan(steps_pct=(50,), interval_s=30.0), clock=world.clock)


def _tick(world: World, engine: Engine, seconds: float = 30.0) -> Any:
    assert isinstance(world.clock, FakeClock)
    world.clock.advance(seconds)
    world.sim.reconcile()
    return engine.step()


def test_the_canary_gets_its_own_workers_on_its_own_stream(world: World,
                                                           checker: Checker) -> None:
    _start(world)
    canary = get_or_none(world, "Deployment", CANARY)
    scaler = get_or_none(world, "ScaledObject", CANARY)
    assert canary is not None and scaler is not None
    assert storage_uri(canary) == world.uri(2)
    assert streams(scaler) == {f"modelctl:{{{ISVC}:2}}:requests"}
    assert scaler["spec"]["scaleTargetRef"]["name"] == CANARY
    [worker] = canary["spec"]["template"]["spec"]["containers"]
    assert "--role=canary" in worker["args"] and "--queue_role=worker" in worker["args"]
    # The two Deployments' selectors do not overlap.
    stable = get_or_none(world, "Deployment", STABLE)
    assert stable is not None
    canary_pods = canary["spec"]["template"]["metadata"]["labels"]
    assert not stable["spec"]["selector"]["matchLabels"].items() <= canary_pods.items()
    # What the rollout created is valid as `deploy validate` checks every overlay.
    created = [{k: v for k, v in obj.items() if k != "status"} for obj in (canary, scaler)]
    for obj in created:
        obj["metadata"] = {k: obj["metadata"][k] for k in ("name", "namespace", "labels")}
    problems, count = checker.check_text("canary-workers", yaml.safe_dump_all(created))
    assert count == 2 and [str(p) for p in problems] == []
    # The stable's workers are untouched while the canary runs.
    assert storage_uri(stable) == world.uri(1)
    assert streams(get_or_none(world, "ScaledObject", STABLE)) == {
        f"modelctl:{{{ISVC}:1}}:requests"}


def test_the_canary_is_ready_only_once_its_workers_are(tmp_path: Path) -> None:
    world = _queue_world(tmp_path, "Knative")
    try:
        world.sim.ready_delay_s = 60.0  # pods, the canary's workers among them, start slowly
        _start(world)
        world.sim.reconcile()
        assert not world.backend().observe().canary_ready
        world.sim.ready_delay_s = 0.0
        for _ in range(3):
            assert isinstance(world.clock, FakeClock)
            world.clock.advance(30.0)
            world.sim.reconcile()
        seen = world.backend().observe()
        assert seen.canary_ready
        assert seen.detail["queue_workers"]["canary"]["available"] >= 1
    finally:
        world.api.stop()


def test_a_promotion_moves_the_stable_workers_then_removes_the_canarys(world: World) -> None:
    _start(world)
    engine = _engine(world, [P])
    for _ in range(8):
        result = _tick(world, engine)
        if isinstance(result.change, Promote):
            break
    assert isinstance(result.change, Promote), result.waiting
    for _ in range(8):
        result = _tick(world, engine, 10.0)
        if result.is_final:
            break
        # Until the stable's workers run the new version, the canary's keep reading.
        if storage_uri(get_or_none(world, "Deployment", STABLE)) != world.uri(2):
            assert get_or_none(world, "Deployment", CANARY) is not None
    assert result.is_final and result.seen.promoted
    stable = get_or_none(world, "Deployment", STABLE)
    assert storage_uri(stable) == world.uri(2)
    assert streams(get_or_none(world, "ScaledObject", STABLE)) == {
        f"modelctl:{{{ISVC}:2}}:requests"}
    assert get_or_none(world, "Deployment", CANARY) is None
    assert get_or_none(world, "ScaledObject", CANARY) is None


def test_a_rollback_removes_the_canarys_workers(world: World) -> None:
    _start(world)
    engine = _engine(world, [P])
    _tick(world, engine)
    engine.step(Command("rollback", "bad outputs"))
    for _ in range(6):
        result = _tick(world, engine, 10.0)
        if result.is_final:
            break
    assert result.is_final and result.state.phase.value == "RolledBack"
    assert get_or_none(world, "Deployment", CANARY) is None
    assert get_or_none(world, "ScaledObject", CANARY) is None
    assert storage_uri(get_or_none(world, "Deployment", STABLE)) == world.uri(1)


def test_a_dry_run_shows_the_workers_it_would_create(tmp_path: Path) -> None:
    world = _queue_world(tmp_path, "Knative")
    try:
        result = start_rollout(world.backend(), world.registry, model=MODEL, ref="2",
                               plan=Plan(steps_pct=(50,), interval_s=30.0),
                               clock=world.clock, dry_run=True)
        assert result.planned is not None
        planned = result.planned["queue_workers"]
        assert [(a["verb"], a["kind"], a["name"]) for a in planned] == [
            ("create", "Deployment", CANARY), ("create", "ScaledObject", CANARY)]
        assert get_or_none(world, "Deployment", CANARY) is None
    finally:
        world.api.stop()


def test_without_queue_workers_the_rollout_writes_no_deployment(tmp_path: Path) -> None:
    world = make_world(tmp_path, FakeClock(1_800_000_000.0), mode="Knative")
    try:
        _start(world)
        engine = _engine(world, [P])
        for _ in range(6):
            if _tick(world, engine).is_final:
                break
        writes = [r for r in world.api.writes()
                  if "/deployments" in r.path or "/scaledobjects" in r.path]
        assert writes == []
    finally:
        world.api.stop()
