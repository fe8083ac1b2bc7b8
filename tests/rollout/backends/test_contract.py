"""One contract for every ``TrafficBackend``, run against each real backend.

The same test bodies for ``kserve`` on the emulated Kubernetes API with the KServe
stand-in (Knative and Standard mode) and for ``local`` on a real ``modelctl dev``
environment (predictors, nginx and Prometheus on loopback). Each backend is built the
one way there is, ``make_backend``. What a test asserts comes from ``observe()``, the
backend's own reading of the target: weights routed, readiness, what serves.

The local environment is one per module (bringing one up takes seconds); every test
starts from "no rollout in progress" and deploys a version the target does not serve
yet, so the tests do not depend on each other's order.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from registry import Registry
from rollout import Conflict, Decision, Phase, Plan, RolloutState
from rollout._start import initial_state
from rollout.backends import TrafficBackend, make_backend
from rollout.backends._interface import (
    Change,
    Deploy,
    Observation,
    Promote,
    Rollback,
    SaveState,
    SetWeight,
)
from tests.fakes.clock import FakeClock
from tests.support import free_port
from tests.support.devstack import push_version, stop_recorded
from tests.support.rollout_world import ISVC, MODEL, NAMESPACE, make_world

PLAN = Plan(steps_pct=(10, 50), interval_s=30.0, failure_limit=1)
LOCAL_MODEL = "contract"
ROUNDS = 8  # applies of one change before it must be in effect (Standard mode needs two)


@dataclass
class Target:
    """A backend under test and the handles a test needs around it."""

    backend: TrafficBackend
    model: str
    settle: Callable[[], None]  # let the system under the backend act on what was written
    new_version: Callable[[int], tuple[int, str]]  # after the one served: (version, URI)
    clock: Callable[[], float]
    defaults: tuple[str | None, str | None]  # (registry, Prometheus) it names itself

    def observe(self) -> Observation:
        self.settle()
        return self.backend.observe()


# -- the backends --------------------------------------------------------------------------
@pytest.fixture(scope="module")
def local_env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path]]:
    """One real dev environment for the module: (registry, state dir), stable = version 1."""
    import devstack
    from devstack import DevEnv, UpSpec

    root = tmp_path_factory.mktemp("contract")
    registry, state_dir = root / "registry", root / "dev"
    push_version(registry, LOCAL_MODEL)
    env = DevEnv(LOCAL_MODEL, state_dir)
    try:
        state = devstack.up(env, UpSpec(name=LOCAL_MODEL, registry=str(registry),
                                        port=free_port()))
        devstack.wait_ready(env, state, timeout_s=120)
        yield registry, state_dir
        devstack.down(env)
    finally:
        stop_recorded(state_dir, LOCAL_MODEL)


def _kserve(tmp_path: Path, mode: str) -> Iterator[Target]:
    clock = FakeClock(1_800_000_000.0)
    world = make_world(tmp_path, clock, mode=mode)

    def settle() -> None:
        clock.advance(1.0)
        world.sim.reconcile()

    def new_version(served: int) -> tuple[int, str]:
        return served + 1, world.uri(served + 1)

    try:
        yield Target(make_backend("kserve", kube=world.kube, namespace=NAMESPACE, isvc=ISVC),
                     MODEL, settle, new_version, clock, (None, None))
    finally:
        world.api.stop()


def _local(local_env: tuple[Path, Path]) -> Iterator[Target]:
    import time

    from devstack import DevEnv

    registry, state_dir = local_env
    reg = Registry.open(str(registry))
    current = DevEnv(LOCAL_MODEL, state_dir).read()

    def new_version(served: int) -> tuple[int, str]:
        version = push_version(registry, LOCAL_MODEL)
        assert version > served
        return version, reg.storage_uri(LOCAL_MODEL, version)

    backend = make_backend("local", isvc=LOCAL_MODEL, state_dir=state_dir)
    yield Target(backend, LOCAL_MODEL, lambda: None, new_version, time.time,
                 (current.registry, current.prometheus_url))


@pytest.fixture(params=["kserve-knative", "kserve-standard", "local"])
def target(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Target]:
    if request.param == "local":
        made = _local(request.getfixturevalue("local_env"))
    else:
        made = _kserve(tmp_path, "Knative" if request.param == "kserve-knative" else "Standard")
    found = next(made)
    try:
        yield found
        _finish(found)  # the shared local environment: leave no rollout in progress
    finally:
        made.close()


# -- helpers (the same for every backend) ----------------------------------------------------
def _until(target: Target, change: Change, state: RolloutState,
           done: Callable[[Observation], bool]) -> Observation:
    """Apply ``change`` with ``state`` until ``done(observe())``: a backend may need more
    than one write for one change (KServe's Standard mode promotes in two moves)."""
    seen = target.observe()
    for _ in range(ROUNDS):
        if done(seen):
            return seen
        target.backend.apply(seen, change, state)
        seen = target.observe()
    assert done(seen), f"{type(change).__name__} not in effect after {ROUNDS} writes: {seen}"
    return seen


def _finish(target: Target) -> None:
    seen = target.observe()
    if seen.state is None or seen.state.phase.is_final:
        return
    back = seen.state.evolve(phase=Phase.ROLLING_BACK, weight_pct=0)
    seen = _until(target, Rollback(), back, lambda s: s.restored)
    target.backend.apply(seen, SaveState(), back.evolve(phase=Phase.ROLLED_BACK))


def _deployed(target: Target) -> Observation:
    """A rollout from the version served now to a new one, at its first weight (10%),
    in effect: the canary Ready with its share routed."""
    seen = target.observe()
    assert seen.start_blockers == ()
    stable = seen.served.version
    assert stable is not None
    version, uri = target.new_version(stable)
    state = initial_state(seen, target.backend.name, model=target.model, stable=stable,
                          canary=version, canary_uri=uri, plan=PLAN, now=target.clock(),
                          analysis_yaml=None)
    target.backend.apply(seen, Deploy(uri=uri, version=version, weight_pct=10), state)
    for _ in range(ROUNDS):  # once started, a second Deploy is refused: only wait
        seen = target.observe()
        if seen.canary_ready and seen.canary_weight_pct == 10:
            return seen
        if seen.requested_weight_pct != 10:  # the engine's rule (_decide._tick): write the
            # state's weight again; a backend that grows capacity first asks for this
            target.backend.apply(seen, SetWeight(10), _state(seen))
    raise AssertionError(f"the canary is not Ready at 10%: {seen}")


def _state(seen: Observation) -> RolloutState:
    assert seen.state is not None
    return seen.state


# -- the contract ----------------------------------------------------------------------------
def test_deploy_sends_the_first_weight_to_a_ready_canary(target: Target) -> None:
    before = target.observe()
    stable = before.served.version
    assert before.state is None or before.state.phase.is_final
    assert before.restored and before.requested_weight_pct is None
    seen = _deployed(target)
    state = _state(seen)
    assert state.phase is Phase.PROGRESSING and state.stable_version == stable
    assert stable is not None and state.canary_version > stable
    assert (seen.canary_ready, seen.canary_weight_pct, seen.requested_weight_pct) == (
        True, 10, 10)
    assert seen.served.version == stable  # the stable stays the primary until promotion
    assert not seen.restored and not seen.promoted
    assert any("already Progressing" in b for b in seen.start_blockers)
    again = target.backend.observe()  # a second read says the same
    assert again.state == state and again.version == seen.version


def test_set_weight_moves_the_routed_share_and_is_idempotent(target: Target) -> None:
    seen = _deployed(target)
    state = _state(seen).evolve(step_index=1, weight_pct=50)
    after = _until(target, SetWeight(50), state, lambda s: s.canary_weight_pct == 50)
    assert after.requested_weight_pct == 50 and after.canary_ready
    assert _state(after).weight_pct == 50 and _state(after).step_index == 1
    target.backend.apply(after, SetWeight(50), _state(after))  # already in effect
    same = target.observe()
    assert (same.canary_weight_pct, same.requested_weight_pct, same.canary_ready) == (
        50, 50, True)
    assert same.served.version == state.stable_version


def test_promote_makes_the_canary_the_stable_version(target: Target) -> None:
    seen = _deployed(target)
    state = _state(seen)
    promoted = state.evolve(phase=Phase.PROMOTED, weight_pct=100, aliases_synced=False)
    after = _until(target, Promote(), promoted, lambda s: s.promoted)
    assert after.served.version == state.canary_version
    assert after.served.uri == state.canary_uri
    assert _state(after).phase is Phase.PROMOTED
    synced = target.backend.apply(after, SaveState(), _state(after).evolve(aliases_synced=True))
    assert synced.promoted and synced.start_blockers == ()  # the next rollout may start


def test_rollback_puts_all_traffic_and_the_spec_back_on_stable(target: Target) -> None:
    seen = _deployed(target)
    state = _state(seen)
    raised = _until(target, SetWeight(50), state.evolve(step_index=1, weight_pct=50),
                    lambda s: s.canary_weight_pct == 50)
    back = _state(raised).evolve(phase=Phase.ROLLING_BACK, weight_pct=0)
    after = _until(target, Rollback(), back, lambda s: s.restored)
    assert after.canary_weight_pct == 0 and after.requested_weight_pct is None
    assert after.served.version == state.stable_version
    assert after.served.uri == state.stable_uri and not after.promoted
    done = target.backend.apply(after, SaveState(), back.evolve(phase=Phase.ROLLED_BACK))
    assert _state(done).phase is Phase.ROLLED_BACK and done.start_blockers == ()


def test_a_write_on_a_stale_read_is_a_conflict(target: Target) -> None:
    seen = _deployed(target)
    state = _state(seen)
    fresh = target.backend.apply(seen, SaveState(), state.evolve(paused=True))
    assert fresh.version != seen.version and _state(fresh).paused
    with pytest.raises(Conflict):
        target.backend.apply(seen, SaveState(), state.evolve(failures=1))
    with pytest.raises(Conflict):
        target.backend.apply(seen, SetWeight(50), state.evolve(step_index=1, weight_pct=50))
    now = target.observe()
    assert now.state == fresh.state  # neither stale write reached the target
    assert (now.canary_weight_pct, now.requested_weight_pct) == (10, 10)


def test_describe_sends_nothing(target: Target) -> None:
    seen = _deployed(target)
    state = _state(seen)
    planned = target.backend.describe(seen, SetWeight(50), state.evolve(weight_pct=50))
    assert planned
    now = target.observe()
    assert now.version == seen.version and now.state == state
    assert (now.canary_weight_pct, now.requested_weight_pct) == (10, 10)


def test_recorded_decisions_are_listed_as_events(target: Target) -> None:
    seen = _deployed(target)
    decision = Decision(at=target.clock(), kind="Paused", message="contract: paused at 10%",
                        step_index=0, weight_pct=10)
    before = len(target.backend.list_events())
    target.backend.record(_state(seen), decision)
    events = target.backend.list_events()
    assert len(events) == before + 1
    last = events[-1]
    assert (last["reason"], last["message"], last["type"]) == (
        "Paused", "contract: paused at 10%", "Normal")
    assert last["lastTimestamp"]


def test_defaults_name_the_targets_own_registry_and_prometheus(target: Target) -> None:
    backend = target.backend
    assert (backend.default_registry_url(), backend.default_prometheus_url()) == target.defaults
