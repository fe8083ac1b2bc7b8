"""``wait_final``: a promotion or rollback repeated until it is in effect, tick by tick.

The clock is fake and ``sleep`` moves it (and lets the KServe stand-in act), so each
wait is a known number of steps, with no real time spent.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from rollout import Command, Engine, Phase, Plan, start_rollout, wait_final
from tests.fakes.clock import FakeClock
from tests.support.rollout_world import MODEL, World, make_world

PLAN = Plan(steps_pct=(10, 50), interval_s=60.0, failure_limit=1)


@pytest.fixture(params=["Knative", "Standard"])
def world(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[World]:
    w = make_world(tmp_path, FakeClock(1_800_000_000.0), mode=request.param)
    start_rollout(w.backend(), w.registry, model=MODEL, ref="2", plan=PLAN, clock=w.clock)
    w.sim.reconcile()
    Engine(w.backend(), clock=w.clock).step()  # Standard mode: the weight, once grown
    w.sim.reconcile()
    yield w
    w.api.stop()


class Sleeper:
    """``sleep`` for ``wait_final``: moves the fake clock and lets KServe act, and counts."""

    def __init__(self, world: World) -> None:
        self.world = world
        self.slept: list[float] = []

    def __call__(self, seconds: float) -> None:
        assert isinstance(self.world.clock, FakeClock)
        self.slept.append(seconds)
        self.world.clock.advance(seconds)
        self.world.sim.reconcile()


def _engine(world: World) -> Engine:
    return Engine(world.backend(), clock=world.clock, registry=world.registry)


def test_a_rollback_is_repeated_until_stable_is_restored(world: World) -> None:
    engine = _engine(world)
    first = engine.step(Command("rollback", "bad answers"))
    assert first.state.phase is Phase.ROLLING_BACK and not first.is_final
    sleep = Sleeper(world)
    result = wait_final(engine, first, "rollback", timeout_s=60.0, sleep=sleep,
                        monotonic=world.clock)
    assert result.is_final and result.state.phase is Phase.ROLLED_BACK
    kinds = [d.kind for d in result.decisions]
    assert kinds == ["RollbackStarted", "RolledBack"]  # the first step's decisions first
    assert result.decisions[0].message.startswith("bad answers")
    assert sleep.slept and set(sleep.slept) == {0.5} and len(sleep.slept) < 10
    assert world.registry.aliases(MODEL) == {"stable": 1}


def test_a_promotion_is_repeated_until_it_is_in_effect(world: World) -> None:
    engine = _engine(world)
    first = engine.step(Command("promote-full"))
    assert first.state.phase is Phase.PROMOTED
    result = wait_final(engine, first, "promote-full", timeout_s=60.0, sleep=Sleeper(world),
                        monotonic=world.clock)
    assert result.is_final and result.seen.promoted
    assert [d.kind for d in result.decisions] == ["Promoted"]
    assert world.registry.aliases(MODEL) == {"stable": 2}


def test_it_gives_up_at_the_timeout_with_what_it_has(world: World) -> None:
    engine = _engine(world)
    first = engine.step(Command("rollback"))
    world.sim.paused = True  # KServe does nothing: stable is never restored
    sleep = Sleeper(world)
    result = wait_final(engine, first, "rollback", timeout_s=3.0, poll_s=1.0, sleep=sleep,
                        monotonic=world.clock)
    assert not result.is_final and result.state.phase is Phase.ROLLING_BACK
    assert sleep.slept == [1.0, 1.0, 1.0]
    assert [d.kind for d in result.decisions] == ["RollbackStarted"]


def test_a_final_result_is_returned_as_it_is(world: World) -> None:
    engine = _engine(world)
    done = wait_final(engine, engine.step(Command("rollback")), "rollback", timeout_s=60.0,
                      sleep=Sleeper(world), monotonic=world.clock)
    assert done.is_final
    sleep = Sleeper(world)
    again = wait_final(engine, done, "rollback", timeout_s=60.0, sleep=sleep,
                       monotonic=world.clock)
    assert again == done and sleep.slept == []
