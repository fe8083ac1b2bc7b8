"""The step engine, tick by tick with a fake clock, against the emulated Kubernetes API.

The official client talks HTTP to the emulated API server; the KServe stand-in
writes status the way KServe does; the registry is real (a local directory); the
analysis is scripted (``ScriptedAnalyzer``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from rollout import (
    Command,
    Engine,
    InvalidTransition,
    LeaseHeld,
    NotReady,
    Phase,
    Plan,
    StepResult,
    start_rollout,
)
from rollout._engine import run
from rollout._errors import MetricSourceError
from rollout.analysis._results import Verdict
from tests.fakes.analyzer import ACCUMULATING, ScriptedAnalyzer
from tests.fakes.clock import FakeClock
from tests.support.rollout_world import ISVC, MODEL, NAMESPACE, World, make_world

P, F, N = Verdict.PASS, Verdict.FAIL, Verdict.INCONCLUSIVE  # N: no verdict
PLAN = Plan(steps_pct=(5, 25, 50), interval_s=60.0, failure_limit=2)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(start_s=1_800_000_000.0)


@pytest.fixture(params=["Knative", "Standard"])
def world(request: pytest.FixtureRequest, tmp_path: Path, clock: FakeClock) -> Iterator[World]:
    w = make_world(tmp_path, clock, mode=request.param)
    yield w
    w.api.stop()


@pytest.fixture
def knative(tmp_path: Path, clock: FakeClock) -> Iterator[World]:
    w = make_world(tmp_path, clock, mode="Knative")
    yield w
    w.api.stop()


def _engine(world: World, script: list[Any], *, holder: str | None = "run-a",
            lease_s: float = 300.0, dry_run: bool = False) -> Engine:
    return Engine(world.backend(), clock=world.clock,
                  analyzer=ScriptedAnalyzer(script, clock=world.clock),
                  registry=world.registry, holder=holder, lease_s=lease_s, dry_run=dry_run)


def _start(world: World, plan: Plan = PLAN) -> StepResult:
    return start_rollout(world.backend(), world.registry, model=MODEL, ref="2", plan=plan,
                         clock=world.clock)


GROWING = "at its new size"  # Standard mode's note while a canary grows ahead of its weight


def _tick(world: World, engine: Engine, advance_s: float = 0.0) -> StepResult:
    """The clock moves, the controller makes one pass, then the engine one step; in
    Standard mode a step that grew the canary ahead of its weight is followed by the
    controller's pass that rolls it out and the engine's step that moves the weight."""
    assert isinstance(world.clock, FakeClock)
    world.clock.advance(advance_s)
    world.sim.reconcile()
    result = engine.step()
    for _ in range(3):
        if GROWING not in result.waiting or world.sim.ready_delay_s:
            break
        world.sim.reconcile()
        later = engine.step()
        result = dataclasses.replace(later, decisions=result.decisions + later.decisions)
    return result


def _until_final(world: World, engine: Engine, ticks: int = 6) -> StepResult:
    """Tick until the rollout's end is in effect (or, without a registry, promoted)."""
    for _ in range(ticks):
        result = _tick(world, engine)
        if result.is_final or (engine.registry is None and result.in_effect):
            break
    return result


def _canary_weight(obj: dict[str, Any]) -> int | None:
    spec = obj["spec"]
    if obj["metadata"]["annotations"]["serving.kserve.io/deploymentMode"] == "Knative":
        value = spec["predictor"].get("canaryTrafficPercent")
        return None if value is None else int(value)
    entries = spec.get("canary") or []
    return int(entries[0]["trafficPercent"]) if entries else None


def _state(world: World) -> dict[str, Any]:
    state = world.state()
    assert state is not None
    return state


def _reasons(world: World) -> list[str]:
    return [e["reason"] for e in world.events()]


def test_start_points_the_canary_at_the_new_version(world: World) -> None:
    result = _start(world)
    obj = world.isvc()
    if obj["status"]["deploymentMode"] == "Standard":
        # Capacity first: the canary starts at its 5% size with no weight yet; the
        # weight follows once its Deployment rolled out.
        assert _canary_weight(obj) == 0
        assert obj["spec"]["canary"][0]["predictor"]["minReplicas"] == 1
        _tick(world, _engine(world, [P]))
        obj = world.isvc()
    assert _canary_weight(obj) == 5
    if obj["status"]["deploymentMode"] == "Knative":
        assert obj["spec"]["predictor"]["model"]["storageUri"] == world.uri(2)
    else:
        assert obj["spec"]["predictor"]["model"]["storageUri"] == world.uri(1)
        canary = obj["spec"]["canary"][0]["predictor"]
        assert canary["name"] == "v2" and canary["model"]["storageUri"] == world.uri(2)
        assert "canaryTrafficPercent" not in canary
    # Nothing of the rollout on the InferenceService's annotations: KServe copies them
    # onto revisions and pods.
    assert not [k for k in obj["metadata"]["annotations"] if "rollout" in k]
    assert world.backend().observe().served.version == 1
    state = _state(world)
    assert (state["stable"]["version"], state["canary"]["version"]) == (1, 2)
    assert state["phase"] == "Progressing" and state["weight_pct"] == 5
    assert result.state.canary_uri == world.uri(2)
    assert world.registry.aliases(MODEL) == {"stable": 1, "canary": 2}
    assert _reasons(world)[0] == "RolloutStarted"


def test_each_step_then_promote(world: World) -> None:
    _start(world)
    engine = _engine(world, [P, P, P])
    weights = []
    for _ in range(3):
        ready = _tick(world, engine)
        assert ready.decisions[0].kind == "CanaryReady"
        held = _tick(world, engine, 59.0)
        assert held.decisions == () and "analysis in" in held.waiting
        moved = _tick(world, engine, 1.0)
        weights.append(_canary_weight(world.isvc()))
        assert moved.decisions[0].kind in ("StepAdvanced", "Promoted")
    assert weights[:2] == [25, 50]
    if world.isvc()["status"]["deploymentMode"] == "Standard":
        # Standard mode promotes in two moves: all traffic to a full-size canary, then
        # the rename; the aliases move once it is in effect.
        assert weights[2] == 100 and _state(world)["aliases_synced"] is False
        _tick(world, engine)
    _tick(world, engine)
    assert _canary_weight(world.isvc()) is None
    assert world.backend().observe().served.version == 2
    assert _state(world)["phase"] == "Promoted" and _state(world)["aliases_synced"] is True
    assert world.registry.aliases(MODEL) == {"stable": 2}
    world.sim.reconcile()
    obj = world.isvc()
    if obj["status"]["deploymentMode"] == "Knative":
        predictor = obj["status"]["components"]["predictor"]
        assert predictor["traffic"] == [{"latestRevision": True, "percent": 100,
                                         "revisionName": predictor["latestRolledoutRevision"]}]
        assert predictor["latestRolledoutRevision"] != predictor["previousRolledoutRevision"]
    else:
        assert obj["spec"]["predictor"]["name"] == "v2" and "canary" not in obj["spec"]
        assert obj["spec"]["predictor"]["model"]["storageUri"] == world.uri(2)
        assert "canaryStatuses" not in obj["status"]
    assert _reasons(world) == ["RolloutStarted", "CanaryReady", "StepAdvanced", "CanaryReady",
                               "StepAdvanced", "CanaryReady", "Promoted"]
    assert engine.step().change is None  # idempotent once final


def test_never_advances_before_the_canary_is_ready(world: World, clock: FakeClock) -> None:
    world.sim.ready_delay_s = 300.0
    _start(world)
    world.sim.reconcile()  # the canary revision (or Deployment) appears now, Ready at +300 s
    engine = _engine(world, [P])
    for _ in range(4):
        result = _tick(world, engine, 60.0)
        assert "not Ready" in result.waiting and result.decisions == ()
    # Standard mode moves no weight before the canary's pods are up (capacity first).
    standard = world.isvc()["status"]["deploymentMode"] == "Standard"
    assert _canary_weight(world.isvc()) == (0 if standard else 5)
    with pytest.raises(NotReady):
        engine.step(Command("promote"))
    assert not engine.analyzer.calls  # type: ignore[union-attr]
    ready = _tick(world, engine, 61.0)
    if standard:  # grown at last: the weight moves now, the window starts next
        assert "moving the weight" in ready.waiting and ready.decisions == ()
        ready = _tick(world, engine)
    assert ready.decisions[0].kind == "CanaryReady"


def test_failures_roll_back_at_the_limit(world: World) -> None:
    _start(world)
    engine = _engine(world, [F, F])
    _tick(world, engine)
    held = _tick(world, engine, 60.0)
    assert held.decisions[0].kind == "AnalysisFailed" and _canary_weight(world.isvc()) == 5
    assert "canary 0.08 vs stable 0.001" in held.decisions[0].message
    rolling = _tick(world, engine, 60.0)
    assert rolling.decisions[0].kind == "RollbackStarted"
    assert rolling.state.phase is Phase.ROLLING_BACK
    for _ in range(6):
        if _tick(world, engine).is_final:
            break
    obj = world.isvc()
    assert _state(world)["phase"] == "RolledBack" and _state(world)["failures"] == 2
    assert obj["spec"]["predictor"]["model"]["storageUri"] == world.uri(1)
    assert "canaryTrafficPercent" not in obj["spec"]["predictor"] and not obj["spec"].get("canary")
    assert world.backend().observe().served.version == 1
    assert world.registry.aliases(MODEL) == {"stable": 1}
    assert _reasons(world)[-3:] == ["AnalysisFailed", "RollbackStarted", "RolledBack"]
    warnings = [e for e in world.events() if e["type"] == "Warning"]
    assert {e["reason"] for e in warnings} == {"AnalysisFailed", "RollbackStarted", "RolledBack"}


def test_knative_rollback_pins_traffic_before_restoring(knative: World) -> None:
    world = knative
    _start(world)
    engine = _engine(world, [P])
    _tick(world, engine)
    canary_revision = world.isvc()["status"]["components"]["predictor"]["latestReadyRevision"]
    world.sim.ready_delay_s = 30.0
    engine.step(Command("rollback", "bad outputs"))
    assert world.isvc()["spec"]["predictor"]["canaryTrafficPercent"] == 0
    world.sim.reconcile()
    traffic = world.isvc()["status"]["components"]["predictor"]["traffic"]
    assert {t["revisionName"]: t["percent"] for t in traffic if t["percent"]} == {
        "demo-predictor-00001": 100}
    engine.step()  # stage 2: the stable spec again, still 0% to the new revision
    spec = world.isvc()["spec"]["predictor"]
    assert spec["model"]["storageUri"] == world.uri(1) and spec["canaryTrafficPercent"] == 0
    world.sim.reconcile()
    waiting = engine.step()  # waits for the restored revision: nothing more to write
    assert waiting.wrote is False and "restoring" in waiting.waiting
    assert "canaryTrafficPercent" in world.isvc()["spec"]["predictor"]
    world.clock.advance(31.0)  # type: ignore[attr-defined]
    world.sim.reconcile()
    engine.step()  # stage 3: restored revision Ready: no more split
    assert "canaryTrafficPercent" not in world.isvc()["spec"]["predictor"]
    world.sim.reconcile()
    final = engine.step()
    assert final.state.phase is Phase.ROLLED_BACK
    status = world.isvc()["status"]["components"]["predictor"]
    assert status["traffic"][0]["percent"] == 100
    assert status["traffic"][0]["revisionName"] not in (canary_revision, "demo-predictor-00001")
    assert _state(world)["history"][-2]["message"].startswith("bad outputs")


def test_inconclusive_holds_and_never_promotes(world: World) -> None:
    _start(world, Plan(steps_pct=(50,), interval_s=60.0, failure_limit=1))
    engine = _engine(world, [N, MetricSourceError("prometheus unreachable"), N, P])
    _tick(world, engine)
    kinds = [_tick(world, engine, 60.0).decisions[0].kind for _ in range(3)]
    assert kinds == ["AnalysisInconclusive"] * 3
    assert _state(world)["phase"] == "Progressing" and _state(world)["inconclusive"] == 3
    assert "prometheus unreachable" in _state(world)["history"][-2]["message"]
    assert _tick(world, engine, 60.0).decisions[0].kind == "Promoted"


def test_healthy_but_unproven_steps_on_and_never_promotes(world: World) -> None:
    _start(world)
    script = [ACCUMULATING, ACCUMULATING, ACCUMULATING, ACCUMULATING, P]
    engine = _engine(world, script)
    _tick(world, engine)
    kinds: list[str] = []
    while len(kinds) < 4:
        kinds += [d.kind for d in _tick(world, engine, 60.0).decisions
                  if d.kind != "CanaryReady"]
    # 5% and 25% step on; at 50%, the last step, the same verdict holds.
    assert kinds == ["StepAdvanced", "StepAdvanced", "AnalysisInconclusive",
                     "AnalysisInconclusive"]
    state = _state(world)
    assert state["weight_pct"] == 50 and state["phase"] == "Progressing"
    messages = [d["message"] for d in state["history"]
                if d["kind"] in ("StepAdvanced", "AnalysisInconclusive")]
    assert "healthy, evidence accumulating" in messages[0]
    assert "healthy, not yet within tolerance" in messages[-1]
    # The evidence is kept in the state across steps, and handed to every analysis.
    assert state["evidence"]["error_rate"]["intervals"] == 4
    assert state["last_analysis"]["evidence"] == {}  # kept once, in the state
    analyzer = engine.analyzer
    assert isinstance(analyzer, ScriptedAnalyzer)
    assert [c.evidence.get("error_rate", None) is not None for c in analyzer.calls] == \
        [False, True, True, True]
    assert _tick(world, engine, 60.0).decisions[0].kind == "Promoted"


def test_second_run_refuses_while_the_lease_is_held_and_resumes_after(knative: World) -> None:
    world = knative
    _start(world)
    first = _engine(world, [P, F], holder="run-a", lease_s=30.0)
    _tick(world, first)
    _tick(world, first, 60.0)  # step 2 at 25%
    _tick(world, first)  # Ready at 25%, window started; then run-a dies here
    assert _state(world)["holder"] == "run-a"
    second = _engine(world, [F, P], holder="run-b", lease_s=30.0)
    with pytest.raises(LeaseHeld, match="run-a"):
        second.step()
    world.clock.advance(60.0)  # type: ignore[attr-defined]
    resumed = second.step()  # lease expired: run-b takes over where run-a stopped
    assert resumed.state.holder == "run-b" and resumed.state.weight_pct == 25
    assert resumed.decisions[0].kind == "AnalysisFailed" and resumed.state.failures == 1
    with pytest.raises(LeaseHeld, match="run-b"):
        first.step()
    assert second.step(Command("pause")).state.paused  # verbs need no lease
    second.release()
    assert _state(world)["holder"] is None


def test_a_conflicting_write_is_reread_and_redecided(knative: World) -> None:
    world = knative
    _start(world)
    engine = _engine(world, [P])
    _tick(world, engine)
    world.clock.advance(60.0)  # type: ignore[attr-defined]
    # Another writer lands between the engine's read and its patch: an unrelated change.
    # The state is stored first; the spec patch, derived from it, is re-read and redone.
    world.api.race_next_patch(NAMESPACE, ISVC, {"metadata": {"labels": {"team": "search"}}})
    before = len(world.api.log)
    result = engine.step()
    patches = [r for r in world.api.writes(before) if r.method == "PATCH"]
    assert len(patches) == 2 and all(ISVC in r.path for r in patches)
    assert result.decisions[0].kind == "StepAdvanced" and _canary_weight(world.isvc()) == 25
    assert world.isvc()["metadata"]["labels"] == {"team": "search"}
    assert len(engine.analyzer.calls) == 1  # type: ignore[union-attr]


def test_a_conflicting_pause_wins_over_the_advance(knative: World) -> None:
    world = knative
    _start(world)
    engine = _engine(world, [P])
    _tick(world, engine)
    world.clock.advance(60.0)  # type: ignore[attr-defined]
    paused = dict(_state(world), paused=True)
    world.api.race_next_patch(NAMESPACE, f"{ISVC}-rollout", {"data": {
        "state": json.dumps(paused)}})
    result = engine.step()
    assert result.conflicts == 1 and result.change is None and "paused" in result.waiting
    assert _canary_weight(world.isvc()) == 5


def test_dry_run_sends_no_writes(world: World) -> None:
    before = len(world.api.log)
    planned = start_rollout(world.backend(), world.registry, model=MODEL, ref="2", plan=PLAN,
                            clock=world.clock, dry_run=True)
    assert planned.planned is not None and not planned.wrote
    assert world.api.writes(before) == [] and world.state() is None
    assert world.registry.aliases(MODEL) == {"stable": 1}
    _start(world)
    engine = _engine(world, [P], dry_run=True)
    world.sim.reconcile()
    before = len(world.api.log)
    for command in ("tick", "pause", "promote-full", "rollback"):
        result = engine.step(Command(command))
        assert result.planned is not None and result.wrote is False
    assert world.api.writes(before) == []
    assert _state(world)["phase"] == "Progressing" and _state(world)["history"][-1]["kind"] == (
        "RolloutStarted")


def test_operator_verbs(world: World) -> None:
    _start(world)
    engine = _engine(world, [P], holder=None)
    world.sim.reconcile()
    assert engine.step(Command("pause", "checking dashboards")).state.paused
    assert "paused" in _tick(world, engine, 600.0).waiting
    assert not engine.step(Command("resume")).state.paused
    world.sim.reconcile()
    advanced = engine.step(Command("promote"))
    assert advanced.state.weight_pct == 25 and _canary_weight(world.isvc()) == 25
    world.sim.reconcile()
    full = engine.step(Command("promote-full"))
    assert full.state.phase is Phase.PROMOTED and not full.is_final  # KServe has to act
    full = _until_final(world, engine)
    assert full.is_final and full.seen.promoted
    assert world.registry.aliases(MODEL) == {"stable": 2}
    with pytest.raises(InvalidTransition, match="already promoted"):
        engine.step(Command("rollback"))
    assert _reasons(world)[-4:] == ["Paused", "Resumed", "StepAdvanced", "Promoted"]


def test_start_refuses_what_it_cannot_do(world: World) -> None:
    from registry import NotFound as RegistryNotFound

    with pytest.raises(RegistryNotFound):
        start_rollout(world.backend(), world.registry, model=MODEL, ref="9", plan=PLAN,
                      clock=world.clock)
    with pytest.raises(InvalidTransition, match="already serves"):
        start_rollout(world.backend(), world.registry, model=MODEL, ref="stable", plan=PLAN,
                      clock=world.clock)
    _start(world)
    with pytest.raises(InvalidTransition, match="already Progressing"):
        start_rollout(world.backend(), world.registry, model=MODEL, ref="3", plan=PLAN,
                      clock=world.clock)


def test_run_loop_exits_promoted_or_rolled_back(knative: World) -> None:
    world = knative
    clock = world.clock
    assert isinstance(clock, FakeClock)

    def sleep(seconds: float) -> None:
        clock.advance(seconds)
        world.sim.reconcile()

    _start(world)
    seen: list[str] = []
    result = run(_engine(world, [P]), poll_s=30.0, sleep=sleep,
                 progress=lambda r: seen.extend(d.kind for d in r.decisions))
    assert result.outcome == "promoted" and seen.count("StepAdvanced") == 2
    assert _state(world)["holder"] is None  # released at the end
    start_rollout(world.backend(), world.registry, model=MODEL, ref="3", plan=PLAN, clock=clock)
    result = run(_engine(world, [F]), poll_s=30.0, sleep=sleep)
    assert result.outcome == "rolled-back"
    assert world.registry.aliases(MODEL) == {"stable": 2}


def test_run_loop_stops_at_the_deadline(knative: World) -> None:
    world = knative
    clock = world.clock
    assert isinstance(clock, FakeClock)
    _start(world)
    def sleep(seconds: float) -> None:
        clock.advance(seconds)
        world.sim.reconcile()

    result = run(_engine(world, [N]), poll_s=30.0, deadline_s=600.0, sleep=sleep)
    assert result.outcome == "deadline" and result.last.state.phase is Phase.PROGRESSING
    assert _state(world)["inconclusive"] >= 8


def test_registry_aliases_already_moved_by_someone_else(knative: World) -> None:
    world = knative
    _start(world)
    world.sim.reconcile()
    no_registry = Engine(world.backend(), clock=world.clock)
    no_registry.step(Command("promote-full"))
    _until_final(world, no_registry)
    assert _state(world)["phase"] == "Promoted" and not _state(world)["aliases_synced"]
    world.registry.set_alias(MODEL, "stable", 2)  # another process got there first
    world.registry.remove_alias(MODEL, "canary")
    result = _engine(world, [P]).step()
    assert result.is_final and world.registry.aliases(MODEL) == {"stable": 2}


def test_run_loop_rides_out_an_api_outage(knative: World,
                                          caplog: pytest.LogCaptureFixture) -> None:
    world = knative
    clock = world.clock
    assert isinstance(clock, FakeClock)
    _start(world)
    ticks = 0

    def sleep(seconds: float) -> None:
        nonlocal ticks
        ticks += 1
        clock.advance(seconds)
        with contextlib.suppress(ApiException):  # the controller fails too, and retries
            world.sim.reconcile()
        if ticks == 3:
            world.api.fail_next(4)  # the next ticks fail: retried, not fatal

    result = run(_engine(world, [P]), poll_s=30.0, sleep=sleep)
    assert result.outcome == "promoted"
    assert "tick failed (1 in a row)" in caplog.text and "503" in caplog.text
