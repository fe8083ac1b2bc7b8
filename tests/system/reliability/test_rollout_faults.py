"""Promises: with Prometheus down or without data a rollout holds and never promotes; the
Kubernetes API answering 409, 500, 503 or timing out is retried with backoff and the
state stays consistent; ``modelctl rollout run`` killed at random points and resumed
ends promoted or rolled back, never half-way with wrong aliases.

The Kubernetes API is the emulator of tests/support/kube_api.py (the official client
talks HTTP to it) with its fault hooks; KServe is the stand-in that writes status;
the registry is a real local directory; Prometheus is the real Debian binary.
"""

from __future__ import annotations

import contextlib
import http.server
import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from rollout import Engine, Phase, Plan, start_rollout
from rollout._engine import run
from rollout.analysis import Analysis, PrometheusSource, load_analysis
from rollout.analysis._results import Verdict
from rollout.backends import KServeBackend, KubeClient
from tests.fakes.analyzer import ScriptedAnalyzer
from tests.fakes.clock import FakeClock
from tests.support import ManagedProcess, free_port, wait_for
from tests.support.prom import Exporter, PrometheusServer, scraped
from tests.support.rollout_world import ISVC, MODEL, NAMESPACE, World, make_world
from tests.system.reliability._support import ROOT, add, record, scaled

pytestmark = pytest.mark.soak

PLAN = Plan(steps_pct=(10, 50), interval_s=60.0, failure_limit=2)


def state_of(world: World) -> dict[str, Any]:
    return world.state() or {}


def _one_change_behind(state: dict[str, Any], uri: str, percent: int | None) -> bool:
    """The spec is where the state's last decision found it: the state is stored
    first, the spec follows, and a run killed in between leaves this for the next
    run to redo (``decide`` writes the spec again when it lags the state)."""
    last = state["history"][-1]
    if last["kind"] == "RolloutStarted":
        return uri == state["stable"]["uri"] and percent is None
    if last["kind"] == "StepAdvanced":
        return uri == state["canary"]["uri"] and percent == last["numbers"]["from_pct"]
    if last["kind"] in ("Promoted", "RollbackStarted"):
        return uri == state["canary"]["uri"] and percent == last["weight_pct"]
    return False


def assert_consistent(world: World, *, after_kill: bool = False) -> dict[str, Any]:
    """What is served, what the state says and what the registry aliases say agree
    (``after_kill``: or the spec is one change behind the state, as a kill can leave it)."""
    obj = world.isvc()
    state = state_of(world)
    predictor = obj["spec"]["predictor"]
    uri, percent = predictor["model"]["storageUri"], predictor.get("canaryTrafficPercent")
    if after_kill and _one_change_behind(state, uri, percent):
        return state
    stable, canary = state["stable"], state["canary"]
    aliases = world.registry.aliases(MODEL)
    phase = state["phase"]
    if phase == "Progressing":
        assert uri == canary["uri"] and percent == state["weight_pct"], (uri, percent, state)
        assert aliases == {"stable": stable["version"], "canary": canary["version"]}, aliases
    elif phase == "Promoted":
        assert uri == canary["uri"] and percent is None, (uri, percent)
        if state["aliases_synced"]:
            assert aliases == {"stable": canary["version"]}, aliases
        else:  # the promotion landed; the registry follows on the next step
            assert aliases.get("stable") in (stable["version"], canary["version"]), aliases
    elif phase == "RollingBack":
        assert percent in (0, None) or uri == stable["uri"], (uri, percent)
    else:
        assert phase == "RolledBack", phase
        assert uri == stable["uri"] and percent is None, (uri, percent)
        if state["aliases_synced"]:
            assert aliases == {"stable": stable["version"]}, aliases
    served = world.backend().observe().served.version
    assert served == (canary["version"] if phase == "Promoted" else stable["version"])
    return state


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(start_s=1_800_000_000.0)


@pytest.fixture
def world(tmp_path: Path, clock: FakeClock) -> Iterator[World]:
    w = make_world(tmp_path, clock, mode="Knative", versions=5)
    yield w
    w.sim.stop()
    w.api.stop()


# -- Prometheus down or without data ------------------------------------------------------
class FailingHTTP:
    """A real HTTP server on loopback that answers every request with ``status`` and a
    body that is not Prometheus' JSON (a proxy in front of a dead Prometheus)."""

    def __init__(self, status: int) -> None:
        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                body = b"<html>upstream connect error</html>"
                self.send_response(status)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_POST = do_GET

            def log_message(self, *args: object) -> None:
                pass

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


@pytest.mark.parametrize("outage", ["unreachable", "no-data", "killed-mid-rollout", "http-500",
                                    "http-200-not-json"])
def test_prometheus_down_or_silent_holds_and_never_promotes(
    world: World, clock: FakeClock, tmp_path: Path, outage: str
) -> None:
    stop: Callable[[], None] = lambda: None  # noqa: E731
    prometheus: PrometheusServer | None = None
    if outage == "unreachable":
        url = f"http://127.0.0.1:{free_port()}"
    elif outage in ("no-data", "killed-mid-rollout"):
        prometheus = PrometheusServer([], tmp_path).start()
        url, stop = prometheus.url, prometheus.stop
    else:
        failing = FailingHTTP(500 if outage == "http-500" else 200)
        url, stop = failing.url, failing.stop
    source = PrometheusSource(url, timeout_s=2.0)
    try:
        start_rollout(world.backend(), world.registry, model=MODEL, ref="2", plan=PLAN,
                      clock=clock)
        engine = Engine(world.backend(), clock=clock, analyzer=Analysis(load_analysis(), source),
                        registry=world.registry, holder="run", lease_s=600.0)
        ticks = scaled(6, 30)
        for tick in range(ticks):
            if outage == "killed-mid-rollout" and tick == 2 and prometheus is not None:
                prometheus.stop()
            clock.advance(PLAN.interval_s)
            world.sim.reconcile()
            engine.step()
            state = assert_consistent(world)
            assert state["phase"] == "Progressing" and state["weight_pct"] == 10, state
        assert state["inconclusive"] >= ticks - 1 and state["failures"] == 0
        kinds = Counter(d["kind"] for d in state["history"])
        assert "Promoted" not in kinds and "StepAdvanced" not in kinds, kinds
        add("rollout.prometheus_outage_analyses", state["inconclusive"])
        # The loop itself holds until its deadline, and says so.
        def sleep(seconds: float) -> None:
            clock.advance(seconds)
            world.sim.reconcile()

        result = run(engine, poll_s=PLAN.interval_s, deadline_s=5 * PLAN.interval_s,
                     sleep=sleep)
        assert result.outcome == "deadline" and result.last.state.phase is Phase.PROGRESSING
        assert_consistent(world)
    finally:
        source.close()
        stop()


# -- Kubernetes API faults ----------------------------------------------------------------
FAULTS = ("conflict", "http-500", "http-503", "timeout-before", "timeout-after")
CLIENT_TIMEOUT_S = 0.3


def inject(world: World, rng: random.Random, tally: Counter[str]) -> None:
    fault = rng.choice(FAULTS)
    tally[fault] += 1
    if fault == "conflict":  # another writer lands between our read and our write
        world.api.race_next_patch(NAMESPACE, ISVC, {"metadata": {"labels": {
            "touched": str(sum(tally.values()))}}})
    elif fault.startswith("http-"):
        world.api.fail_next(rng.randint(1, 3), status=int(fault[5:]))
    else:
        world.api.delay_next(1, CLIENT_TIMEOUT_S * 3, after=fault == "timeout-after")


def test_kubernetes_api_faults_are_retried_with_backoff_and_state_stays_consistent(
    tmp_path: Path, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    seed = random.randrange(2**32)
    rng = random.Random(seed)
    tally: Counter[str] = Counter()
    outcomes: Counter[str] = Counter()
    rollouts = scaled(4, 25)
    for number in range(rollouts):
        (tmp_path / f"w{number}").mkdir()
        world = make_world(tmp_path / f"w{number}", clock, mode="Knative", versions=2)
        caplog.clear()
        try:
            outcome, waits = drive_through_faults(world, clock, rng, tally)
        finally:
            world.sim.stop()
            world.api.stop()
        outcomes[outcome] += 1
        failed = [r.getMessage() for r in caplog.records if "tick failed" in r.getMessage()]
        outcomes["ticks retried"] += len(failed)
        if any("(2 in a row)" in m for m in failed):  # backoff: the wait doubled
            assert 2 * PLAN.interval_s in waits, waits
    record("rollout.api_faults_seed", seed)
    record("rollout.api_faults_injected", dict(tally))
    record("rollout.api_faults_outcomes", dict(outcomes))
    assert sum(tally.values()) >= rollouts * 3


def drive_through_faults(world: World, clock: FakeClock, rng: random.Random,
                         tally: Counter[str]) -> tuple[str, list[float]]:
    kube = KubeClient.from_host(world.api.host, namespace=NAMESPACE, timeout_s=CLIENT_TIMEOUT_S)
    backend = KServeBackend(kube, NAMESPACE, ISVC)
    start_rollout(backend, world.registry, model=MODEL, ref="2", plan=PLAN, clock=clock)
    verdicts = [rng.choice([Verdict.PASS, Verdict.PASS, Verdict.FAIL, Verdict.INCONCLUSIVE])
                for _ in range(8)]
    engine = Engine(backend, clock=clock, analyzer=ScriptedAnalyzer(verdicts, clock=clock),
                    registry=world.registry, holder="chaos", lease_s=600.0)
    waits: list[float] = []

    def sleep(seconds: float) -> None:
        waits.append(seconds)
        clock.advance(seconds)
        world.api.clear_faults()  # the last tick's faults are over; checks read cleanly
        with contextlib.suppress(ApiException):  # the controller fails too, and retries
            world.sim.reconcile()
        assert_consistent(world)  # between any two ticks, whatever failed
        if rng.random() < 0.6:
            inject(world, rng, tally)

    result = run(engine, poll_s=PLAN.interval_s, sleep=sleep)
    final = assert_consistent(world)
    assert result.outcome in ("promoted", "rolled-back"), result.outcome
    assert final["phase"] in ("Promoted", "RolledBack") and final["aliases_synced"]
    assert final["holder"] is None
    assert all(w <= engine.lease_s / 3 for w in waits)  # backoff never outlives the lease
    return result.outcome, waits


# -- rollout run killed at random points --------------------------------------------------
SELECTOR = 'namespace="{namespace}", isvc="{isvc}", version="{version}"'
ANALYSIS = f"""
metrics:
  - name: error-rate
    query: >-
      (sum(rate(modelctl_requests_total{{{SELECTOR}, code=~"5.."}}[{{interval}}]))
      or vector(0))
      / sum(rate(modelctl_requests_total{{{SELECTOR}}}[{{interval}}]))
    count_query: >-
      sum(increase(modelctl_requests_total{{{SELECTOR}}}[{{interval}}]))
    min_requests: 20
    max: 0.1
"""
GOOD, BAD = 0, 2  # error_every: none, or every 2nd request a 500


@pytest.fixture(scope="module")
def metrics_world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrometheusServer]:
    """Exporters for versions 1..3 (1..5 in soaks; 3 and 5 fail half their requests)
    behind a real Prometheus, labelled as the InferenceService of the rollout world."""
    workdir = tmp_path_factory.mktemp("kill-prometheus")
    exporters = [Exporter(workdir, model=MODEL, version=str(v), role="canary", latency_ms=20,
                          error_every=BAD if v in (3, 5) else GOOD, rps=100)
                 for v in range(1, scaled(4, 6))]
    with scraped(exporters, workdir, [{"namespace": NAMESPACE, "isvc": ISVC}], 3) as server:
        yield server


def test_rollout_run_killed_at_random_points_resumes_to_a_consistent_end(
    metrics_world: PrometheusServer, tmp_path: Path
) -> None:
    world = make_world(tmp_path, time.time, mode="Knative", versions=5)
    world.sim.start(interval_s=0.02)
    kubeconfig = world.api.write_kubeconfig(tmp_path / "kubeconfig", namespace=NAMESPACE)
    analysis = tmp_path / "analysis.yaml"
    analysis.write_text(ANALYSIS)
    seed = random.randrange(2**32)
    rng = random.Random(seed)
    # 1 -> 2 promotes, 2 -> 3 rolls back (3 fails half its requests), and on for soaks.
    soak_more = scaled([], [(4, "promoted"), (5, "rolled-back")])
    plan = [(2, "promoted"), (3, "rolled-back"), *soak_more]
    kills_each = scaled([3, 2], [5, 5, 5, 5])
    kills = 0
    try:
        for (target, expected), kills_here in zip(plan, kills_each, strict=True):
            stable = world.registry.aliases(MODEL)["stable"]
            rollout_cli(["start", ISVC, "--to", f"{MODEL}@{target}", "--steps", "20,60",
                         "--interval", "3s", "--failure-limit", "1",
                         "--analysis", str(analysis)], kubeconfig, world)
            for _ in range(kills_here):
                kill_run_at_random(world, kubeconfig, metrics_world, tmp_path, rng)
                assert_consistent(world, after_kill=True)
                kills += 1
            code = run_to_the_end(world, kubeconfig, metrics_world, tmp_path)
            final = assert_consistent(world)
            assert final["phase"] in ("Promoted", "RolledBack") and final["aliases_synced"]
            outcome = "promoted" if final["phase"] == "Promoted" else "rolled-back"
            assert outcome == expected and code == (0 if outcome == "promoted" else 1)
            assert world.registry.aliases(MODEL) == {
                "stable": target if outcome == "promoted" else stable}
    finally:
        world.sim.stop()
        world.api.stop()
    record("rollout.kill_seed", seed)
    record("rollout.run_kills", kills)
    record("rollout.kill_rollouts", len(plan))


def run_argv(kubeconfig: Path, world: World, prometheus: PrometheusServer) -> list[str]:
    return [sys.executable, "-m", "cli", "rollout", "run", ISVC, "--poll", "0.3s",
            "--lease", "1s", "--prometheus-url", prometheus.url, "--kubeconfig",
            str(kubeconfig), "--registry", world.registry.url]


def rollout_cli(args: list[str], kubeconfig: Path, world: World) -> None:
    done = subprocess.run([sys.executable, "-m", "cli", "rollout", *args, "--kubeconfig",
                           str(kubeconfig), "--registry", world.registry.url],
                          capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert done.returncode == 0, done.stderr


def lease_free(world: World) -> bool:
    state = state_of(world)
    return not state.get("holder") or float(state.get("lease_expires_at") or 0) < time.time()


def kill_run_at_random(world: World, kubeconfig: Path, prometheus: PrometheusServer,
                       tmp_path: Path, rng: random.Random) -> None:
    wait_for(lambda: lease_free(world), timeout_s=30, what="the killed run's lease to expire")
    before = state_of(world).get("holder")
    proc = ManagedProcess(f"run-{time.monotonic_ns()}", run_argv(kubeconfig, world, prometheus),
                          log_dir=tmp_path, cwd=ROOT)
    try:
        wait_for(lambda: proc.poll() is not None or state_of(world).get("holder") not in (
            None, before), timeout_s=60, what="the run to take the lease")
        # The fault: SIGKILL at a random moment of its work (a timer by design).
        time.sleep(rng.uniform(0.0, 1.5))
        proc.signal(signal.SIGKILL)
        proc.wait(timeout_s=10)
    finally:
        proc.stop()


def run_to_the_end(world: World, kubeconfig: Path, prometheus: PrometheusServer,
                   tmp_path: Path) -> int:
    """A last run, however far the killed ones got (on a finished rollout it only
    reports the outcome): its exit code."""
    wait_for(lambda: lease_free(world), timeout_s=30, what="the killed run's lease to expire")
    proc = ManagedProcess(f"run-final-{time.monotonic_ns()}",
                          run_argv(kubeconfig, world, prometheus), log_dir=tmp_path, cwd=ROOT)
    try:
        return proc.wait(timeout_s=120)
    finally:
        proc.stop()
