"""The rollout's acceptance scenarios, each in both KServe modes, end to end.

Each runs ``run`` (the loop ``modelctl rollout run`` is) with the real analysis
(the shipped ``default_analysis.yaml`` against a real Prometheus scraping one
synthetic exporter per version) on the emulated API server and the KServe port in
``tests/support/kserve_sim.py``, configured with KServe's shipped
inferenceservice-config (its annotation disallow-list: every annotation reaches
the revisions and pods; Standard mode with ``enableGatewayApi`` on, the one
setting its canaries need). The engine's clock is fake, so a step interval passes
at once; Prometheus answers over real time, where every exporter has been
serving since the module started.

Versions: 1 stable; 2 good; 3 slow (4x the latency); 4 failing 1 request in 8.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from rollout import Engine, Phase, Plan, run, start_rollout
from rollout._engine import RunResult
from rollout.analysis._analysis import Analysis, load_analysis
from rollout.analysis._prometheus import PrometheusSource
from tests.fakes.clock import FakeClock
from tests.support.prom import Exporter, PrometheusServer, ScrapeTarget
from tests.support.rollout_world import ISVC, MODEL, NAMESPACE, World, make_world

INTERVAL_S = 10.0
SHAPES = {1: (20.0, 0), 2: (20.0, 0), 3: (80.0, 0), 4: (20.0, 8)}  # latency ms, error every


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrometheusServer]:
    workdir = tmp_path_factory.mktemp("acceptance-prometheus")
    exporters = [Exporter(workdir, model=MODEL, version=str(v), role="canary",
                          latency_ms=latency, error_every=every)
                 for v, (latency, every) in SHAPES.items()]
    try:
        for exporter in exporters:
            exporter.wait_ready()
        labels = {"namespace": NAMESPACE, "isvc": ISVC}
        targets = [ScrapeTarget(e.address, labels) for e in exporters]
        with PrometheusServer(targets, workdir) as server:
            server.wait_for_history(INTERVAL_S + 2, targets=len(exporters))
            yield server
    finally:
        for exporter in exporters:
            exporter.stop()


@pytest.fixture(params=["Knative", "Standard"])
def world(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[World]:
    w = make_world(tmp_path, FakeClock(1_800_000_000.0), mode=request.param, versions=4)
    yield w
    w.api.stop()


@pytest.fixture
def source(prometheus: PrometheusServer) -> Iterator[PrometheusSource]:
    src = PrometheusSource(prometheus.url, timeout_s=5.0)
    yield src
    src.close()


def _engine(world: World, source: PrometheusSource, holder: str = "run-a",
            lease_s: float = 120.0) -> Engine:
    return Engine(world.backend(), clock=world.clock, registry=world.registry, holder=holder,
                  lease_s=lease_s, analyzer=Analysis(load_analysis(), source))


def _sleeper(world: World) -> Callable[[float], None]:
    clock = world.clock
    assert isinstance(clock, FakeClock)

    def sleep(seconds: float) -> None:
        clock.advance(seconds)
        world.sim.reconcile()

    return sleep


def _start(world: World, ref: int, steps: tuple[int, ...] = (5, 25, 50)) -> None:
    start_rollout(world.backend(), world.registry, model=MODEL, ref=str(ref),
                  plan=Plan(steps_pct=steps, interval_s=INTERVAL_S, failure_limit=1),
                  clock=world.clock)
    world.sim.reconcile()


def _run(world: World, source: PrometheusSource, deadline_s: float | None = None) -> RunResult:
    return run(_engine(world, source), poll_s=INTERVAL_S / 2, deadline_s=deadline_s,
               sleep=_sleeper(world))


def _mode(world: World) -> str:
    return str(world.isvc()["status"]["deploymentMode"])


def _routed(world: World) -> dict[str, int]:
    """Where the traffic system routes requests now, by the URI each target runs."""
    detail = world.backend().observe().detail
    if _mode(world) == "Knative":
        out: dict[str, int] = {}
        for target in detail["traffic"]:
            out[target["uri"]] = out.get(target["uri"], 0) + int(target["percent"] or 0)
        return {uri: pct for uri, pct in out.items() if pct}
    return {"canary": int(detail["routedPercent"])} if detail["canaryName"] else {}


def _assert_one_revision_per_model_change(world: World, changes: int) -> None:
    """KServe's default config copies annotations onto revisions and pods: a rollout
    whose state lived there would roll one per write. Here only model changes do."""
    if _mode(world) == "Knative":
        assert len(world.sim.revisions(ISVC)) == 1 + changes, world.sim.revisions(ISVC)
    else:
        rollouts = world.sim.rollouts(ISVC)
        assert all(count == 1 for count in rollouts.values()), rollouts


def test_a_good_canary_is_promoted(world: World, source: PrometheusSource) -> None:
    _start(world, 2)
    result = _run(world, source)
    assert result.outcome == "promoted", result.last.waiting
    kinds = [d["kind"] for d in world.state()["history"]]  # type: ignore[index]
    assert kinds.count("StepAdvanced") == 2 and kinds[-1] == "Promoted"
    seen = world.backend().observe()
    assert seen.promoted and seen.served.version == 2
    assert world.registry.aliases(MODEL) == {"stable": 2}
    _assert_one_revision_per_model_change(world, 1)
    if _mode(world) == "Standard":  # the canary became the stable; the old one is gone
        assert world.isvc()["spec"]["predictor"]["name"] == "v2"
        assert set(world.sim.rollouts(ISVC)) == {f"{ISVC}-v2-predictor"}


@pytest.mark.parametrize("bad", [3, 4], ids=["slow", "erroring"])
def test_a_bad_canary_is_rolled_back(world: World, source: PrometheusSource, bad: int) -> None:
    _start(world, bad)
    result = _run(world, source)
    assert result.outcome == "rolled-back", result.last.waiting
    state = world.state()
    assert state is not None
    failed = next(d for d in state["history"] if d["kind"] == "RollbackStarted")
    metric = "p99-latency" if bad == 3 else "error-rate"
    assert f"{metric} Fail" in failed["message"], failed["message"]
    seen = world.backend().observe()
    assert seen.restored and seen.served.version == 1
    assert world.registry.aliases(MODEL) == {"stable": 1}
    stable = world.uri(1)
    if _mode(world) == "Knative":
        assert _routed(world) == {stable: 100}
        _assert_one_revision_per_model_change(world, 2)  # the canary, then the stable again
    else:
        assert not world.isvc()["spec"].get("canary")
        assert set(world.sim.rollouts(ISVC)) == {f"{ISVC}-predictor"}
        _assert_one_revision_per_model_change(world, 1)


def test_a_promotion_after_a_step_of_100(world: World, source: PrometheusSource) -> None:
    _start(world, 2, steps=(50, 100))
    assert _run(world, source).outcome == "promoted"
    assert world.backend().observe().promoted
    # The next rollout starts and its canary is seen Ready: nothing was left behind.
    _start(world, 4, steps=(10,))
    engine = _engine(world, source)
    sleep = _sleeper(world)
    for _ in range(3):
        result = engine.step()
        if result.state.interval_started_at is not None:
            break
        sleep(1.0)
    assert result.state.interval_started_at is not None, result.waiting
    assert result.seen.canary_weight_pct == 10


def test_a_canary_that_never_becomes_ready(world: World, source: PrometheusSource) -> None:
    world.sim.failing_uris.add(world.uri(2))
    _start(world, 2)
    result = _run(world, source, deadline_s=10 * INTERVAL_S)
    assert result.outcome == "deadline" and "not Ready" in result.last.waiting
    state = world.state()
    assert state is not None and state["phase"] == "Progressing"
    assert state["interval_started_at"] is None and state["last_analysis"] is None
    assert result.last.seen.canary_weight_pct == 0
    if _mode(world) == "Knative":
        assert _routed(world) == {world.uri(1): 100}  # Knative routes to the Ready stable
    else:
        assert _routed(world) == {"canary": 0}  # KServe weights only Ready canaries


def test_a_killed_run_is_resumed(world: World, source: PrometheusSource) -> None:
    _start(world, 2)
    first = _engine(world, source, holder="run-a", lease_s=60.0)
    sleep = _sleeper(world)
    while world.state()["step_index"] < 1:  # type: ignore[index]
        first.step()
        sleep(INTERVAL_S / 2)
    # run-a dies here, holding its lease; run-b waits it out, then carries on.
    second = _engine(world, source, holder="run-b", lease_s=60.0)
    sleep(61.0)
    result = run(second, poll_s=INTERVAL_S / 2, sleep=sleep)
    assert result.outcome == "promoted"
    state = world.state()
    assert state is not None and state["holder"] is None and state["phase"] == Phase.PROMOTED
    assert [d["kind"] for d in state["history"]].count("RolloutStarted") == 1
    _assert_one_revision_per_model_change(world, 1)
