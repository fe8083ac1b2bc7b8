"""``modelctl rollout``: the commands end to end, with a kubeconfig pointing at the
emulated Kubernetes API, a real local registry, and (for ``run`` and ``analyze``) a
real Prometheus. ``run`` is also driven as a real process that is killed mid-way.
"""

from __future__ import annotations

import json
import os
import re
import signal
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from rollout import Engine
from tests.support import ManagedProcess, free_port, wait_for
from tests.support.prom import PrometheusServer
from tests.support.rollout_world import ISVC, MODEL, NAMESPACE, World, make_world

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Cli:
    world: World
    kubeconfig: Path
    registry: str
    monkeypatch: pytest.MonkeyPatch
    capsys: pytest.CaptureFixture[str]

    def __call__(self, *args: str, kube: bool = True) -> tuple[int, str, str]:
        """Run ``modelctl rollout ARGS`` in this process through the CLI's own main()."""
        from cli._app import main

        extra = ["--kubeconfig", str(self.kubeconfig)] if kube else []
        self.monkeypatch.setattr(sys, "argv", ["modelctl", "rollout", *args, *extra])
        self.monkeypatch.setenv("MODELCTL_REGISTRY", self.registry)
        code: int = 0
        try:
            main()
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else int(exc.code is not None)
        out = self.capsys.readouterr()
        return code, out.out, out.err

    def json(self, *args: str) -> Any:
        code, out, err = self(*args, "--json")
        assert code == 0, err
        return json.loads(out)

    def argv(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "cli", "rollout", *args,
                "--kubeconfig", str(self.kubeconfig), "--registry", self.registry]


def _state(world: World) -> dict[str, Any]:
    return world.state() or {}


@pytest.fixture(params=["Knative", "Standard"])
def cli(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> Iterator[Cli]:
    world = make_world(tmp_path, time.time, mode=request.param)
    kubeconfig = world.api.write_kubeconfig(tmp_path / "kubeconfig", namespace=NAMESPACE)
    yield Cli(world, kubeconfig, str(tmp_path / "registry"), monkeypatch, capsys)
    world.sim.stop()
    world.api.stop()


@pytest.fixture
def knative_cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                capsys: pytest.CaptureFixture[str]) -> Iterator[Cli]:
    world = make_world(tmp_path, time.time, mode="Knative")
    kubeconfig = world.api.write_kubeconfig(tmp_path / "kubeconfig", namespace=NAMESPACE)
    yield Cli(world, kubeconfig, str(tmp_path / "registry"), monkeypatch, capsys)
    world.sim.stop()
    world.api.stop()


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrometheusServer]:
    """A real Prometheus with nothing to scrape: every analysis is Inconclusive (no data)."""
    with PrometheusServer([], tmp_path_factory.mktemp("prometheus")) as server:
        yield server


def test_start_status_verbs_and_history(cli: Cli) -> None:
    doc = cli.json("start", ISVC, "--to", f"{MODEL}@2", "--steps", "10,50", "--interval", "1m")
    assert [d["kind"] for d in doc["decisions"]] == ["RolloutStarted"] and doc["wrote"]
    assert cli.world.registry.aliases(MODEL) == {"stable": 1, "canary": 2}
    cli.world.sim.reconcile()
    if cli.world.isvc()["status"]["deploymentMode"] == "Standard":
        # Capacity first: the canary came up at its size; the next tick moves the weight.
        Engine(cli.world.backend(), clock=cli.world.clock).step()
        cli.world.sim.reconcile()
    status = cli.json("status", ISVC)
    assert status["state"]["canary"]["version"] == 2 and status["state"]["weight_pct"] == 10
    assert status["observed"]["canary_ready"] is True
    assert status["observed"]["canary_weight_pct"] == 10
    code, out, _ = cli("status", ISVC)
    assert code == 0 and "demo-fixed@2" in out and "10% asked, 10% in the spec, 10% routed" in out
    assert cli.json("pause", ISVC, "--reason", "dashboards")["paused"] is True
    assert cli.json("resume", ISVC)["paused"] is False
    promoted = cli.json("promote", ISVC)
    assert promoted["weight_pct"] == 50 and promoted["decisions"][0]["kind"] == "StepAdvanced"
    cli.world.sim.start(interval_s=0.02)  # promote waits until KServe has carried it out
    final = cli.json("promote", ISVC, "--full", "--reason", "load test passed",
                     "--timeout", "20s")
    assert final["phase"] == "Promoted" and final["decisions"][0]["message"].startswith(
        "load test passed")
    assert cli.world.registry.aliases(MODEL) == {"stable": 2}
    history = cli.json("history", ISVC)
    assert [h["kind"] for h in history] == ["RolloutStarted", "Paused", "Resumed",
                                            "StepAdvanced", "Promoted"]
    events = cli.json("history", ISVC, "--events")
    assert [e["reason"] for e in events] == [h["kind"] for h in history]
    assert events[0]["involvedObject"]["name"] == ISVC
    code, out, _ = cli("history", ISVC)
    assert code == 0 and "Promoted" in out


def test_rollback_restores_stable_and_records_the_reason(cli: Cli) -> None:
    assert cli("start", ISVC, "--to", f"{MODEL}@3")[0] == 0
    cli.world.sim.start(interval_s=0.02)
    code, out, err = cli("rollback", ISVC, "--reason", "bad answers on Swedish input",
                         "--timeout", "20s")
    assert code == 0, err
    assert "RollbackStarted: bad answers on Swedish input" in out and "RolledBack" in out
    obj = cli.world.isvc()
    assert obj["spec"]["predictor"]["model"]["storageUri"] == cli.world.uri(1)
    assert "canaryTrafficPercent" not in obj["spec"]["predictor"] and not obj["spec"].get("canary")
    assert _state(cli.world)["phase"] == "RolledBack"
    assert cli.world.registry.aliases(MODEL) == {"stable": 1}


def test_dry_run_writes_nothing(cli: Cli) -> None:
    api = cli.world.api
    before = len(api.log)
    code, out, err = cli("start", ISVC, "--to", f"{MODEL}@2", "--dry-run")
    assert code == 0, err and "dry run" in out
    assert api.writes(before) == [] and _state(cli.world) == {}
    assert cli.world.registry.aliases(MODEL) == {"stable": 1}
    assert cli("start", ISVC, "--to", f"{MODEL}@2")[0] == 0
    cli.world.sim.reconcile()
    before = len(api.log)
    for verb in (["promote"], ["promote", "--full"], ["rollback"], ["pause"]):
        code, out, err = cli(*verb, ISVC, "--dry-run")
        assert code == 0, err
        assert "would send" in out
    assert api.writes(before) == []
    assert cli.world.registry.aliases(MODEL) == {"stable": 1, "canary": 2}


@pytest.mark.parametrize(("args", "says"), [
    (["start", "nope", "--to", f"{MODEL}@2"], "InferenceService models/nope not found"),
    (["start", ISVC, "--to", f"{MODEL}@9"], "9"),
    (["start", ISVC, "--to", "no-such-model@1"], "no-such-model"),
    (["start", ISVC, "--to", f"{MODEL}@2", "--steps", "50,25"], "not strictly increasing"),
    (["start", ISVC, "--to", f"{MODEL}@2", "--steps", "5,150"], "outside 1-100"),
    (["start", ISVC, "--to", f"{MODEL}@2", "--interval", "soon"], "duration"),
    (["status", ISVC], "no rollout on models/demo"),
    (["promote", "nope"], "not found"),
])
def test_bad_input_is_one_line_and_exit_2(knative_cli: Cli, args: list[str], says: str) -> None:
    before = len(knative_cli.world.api.log)
    code, out, err = knative_cli(*args)
    assert code == 2 and out == ""
    assert err.startswith("error: ") and err.count("\n") == 1 and says in err, err
    assert knative_cli.world.api.writes(before) == []
    assert knative_cli.world.registry.aliases(MODEL) == {"stable": 1}


def test_bad_analysis_files_are_refused_before_anything_is_written(
        knative_cli: Cli, tmp_path: Path) -> None:
    unknown = tmp_path / "unknown.yaml"
    unknown.write_text("metrics:\n  - name: errors\n    query: up\n    max: 1\n    maxx: 2\n")
    brackets = tmp_path / "brackets.yaml"
    brackets.write_text("metrics:\n  - name: p99\n    query: sum(rate(x[1m])\n    max: 1\n")
    before = len(knative_cli.world.api.log)
    for path, says in ((unknown, "maxx"), (brackets, "p99")):
        code, _, err = knative_cli("start", ISVC, "--to", f"{MODEL}@2", "--analysis", str(path))
        assert code == 2 and err.startswith("error: ") and says in err, err
    assert knative_cli.world.api.writes(before) == []


def test_no_kubeconfig_is_exit_2(knative_cli: Cli, tmp_path: Path,
                                 monkeypatch: pytest.MonkeyPatch) -> None:
    code, _, err = knative_cli("status", ISVC, "--kubeconfig", str(tmp_path / "missing"),
                               kube=False)
    assert code == 2 and "no kubeconfig" in err
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    code, _, err = knative_cli("start", ISVC, "--to", f"{MODEL}@2", kube=False)
    assert code == 2 and err.startswith("error: no kubeconfig") and err.count("\n") == 1
    code, _, err = knative_cli("status", ISVC, "--context", "elsewhere")
    assert code == 2 and "elsewhere" in err


def test_unreachable_prometheus_is_exit_2_and_nothing_written(knative_cli: Cli) -> None:
    assert knative_cli("start", ISVC, "--to", f"{MODEL}@2")[0] == 0
    before = len(knative_cli.world.api.log)
    nowhere = f"http://127.0.0.1:{free_port()}"
    for verb in ("analyze", "run"):
        code, _, err = knative_cli(verb, ISVC, "--prometheus-url", nowhere)
        assert code == 2 and err.startswith("error: ") and err.count("\n") == 1, err
    assert knative_cli.world.api.writes(before) == []


def test_analyze_and_run_until_the_deadline(knative_cli: Cli,
                                            prometheus: PrometheusServer) -> None:
    cli = knative_cli
    assert cli("start", ISVC, "--to", f"{MODEL}@2", "--interval", "1s")[0] == 0
    cli.world.sim.start(interval_s=0.02)
    before = len(cli.world.api.log)
    doc = cli.json("analyze", ISVC, "--prometheus-url", prometheus.url)
    assert doc["verdict"] == "Inconclusive" and {m["name"] for m in doc["metrics"]} >= {
        "error-rate", "p99-latency"}
    assert cli.world.api.writes(before) == []
    wait_for(lambda: _state(cli.world) and cli.world.isvc()["status"]["components"][
        "predictor"]["latestReadyRevision"] == "demo-predictor-00002", timeout_s=10,
        what="the canary revision")
    code, out, err = cli("run", ISVC, "--prometheus-url", prometheus.url, "--dry-run")
    assert code == 0 and "CanaryReady" in out and "would send" in out, err
    assert cli.world.api.writes(before) == []
    code, out, err = cli("run", ISVC, "--prometheus-url", prometheus.url, "--poll", "0.2s",
                         "--deadline", "3s")
    assert code == 3, err
    assert "AnalysisInconclusive" in out and "not finished by the deadline" in err
    state = _state(cli.world)
    assert state["phase"] == "Progressing" and state["weight_pct"] == 5
    assert state["inconclusive"] >= 1 and state["holder"] is None


def test_start_says_when_the_traffic_can_never_promote(knative_cli: Cli,
                                                       prometheus: PrometheusServer) -> None:
    # This Prometheus scrapes nothing: stable serves no requests, so no step can ever
    # gather the minimum sample, and start says so (the rollout still starts).
    doc = knative_cli.json("start", ISVC, "--to", f"{MODEL}@2", "--prometheus-url",
                           prometheus.url)
    notes = "\n".join(doc["notes"])
    assert "at 5% the canary gets 0 requests an interval, under min_requests 50" in notes
    assert "stable served 0 requests in the last interval: at that traffic this rollout " \
        "will hold and never promote; it needs at least 1000 an interval" in notes
    assert doc["phase"] == "Progressing"


def test_killed_run_is_resumed_and_a_second_run_refuses(
        knative_cli: Cli, prometheus: PrometheusServer, tmp_path: Path) -> None:
    cli = knative_cli
    assert cli("start", ISVC, "--to", f"{MODEL}@2", "--interval", "1s")[0] == 0
    cli.world.sim.start(interval_s=0.02)
    run_args = cli.argv("run", ISVC, "--prometheus-url", prometheus.url, "--poll", "0.2s",
                        "--lease", "3s")
    env = {"PYTHONPATH": str(ROOT)}
    first = ManagedProcess("run-1", run_args, log_dir=tmp_path, env=env, cwd=ROOT)
    try:
        holder = wait_for(lambda: _state(cli.world).get("holder"), timeout_s=60,
                          what="the first run to take the lease")
        assert str(first.pid) in holder
        code, _, err = cli("run", ISVC, "--prometheus-url", prometheus.url)
        assert code == 2 and "is being run by" in err
        wait_for(lambda: _state(cli.world)["inconclusive"] >= 1, timeout_s=30,
                 what="an analysis by the first run")
        first.signal(signal.SIGKILL)
        first.wait(timeout_s=10)
    finally:
        first.stop()
    killed = _state(cli.world)
    assert killed["holder"] == holder  # a killed run cannot release its lease
    # A run started while the lease is still valid refuses (checked above); one started
    # after it expired takes over. Start it after, whatever this machine's load does to
    # the time between the kill and the start.
    wait_for(lambda: time.time() > killed["lease_expires_at"], timeout_s=10,
             what="the killed run's lease to expire")
    second = ManagedProcess("run-2", run_args, log_dir=tmp_path, env=env, cwd=ROOT)
    try:
        taken = wait_for(lambda: (_state(cli.world).get("holder") or holder) != holder,
                         timeout_s=60, what="the second run to take over after the lease")
        assert taken
        wait_for(lambda: _state(cli.world)["inconclusive"] > killed["inconclusive"],
                 timeout_s=30, what="the second run to analyse again")
        assert _state(cli.world)["weight_pct"] == killed["weight_pct"]
        code, _, err = cli("rollback", ISVC, "--reason", "stop here", "--timeout", "20s")
        assert code == 0, err
        assert second.wait(timeout_s=30) == 1, second.output_tail()
    finally:
        second.stop()
    assert "RolledBack" in second.output_tail()
    assert _state(cli.world)["phase"] == "RolledBack"


def test_run_exits_0_when_promoted(knative_cli: Cli, prometheus: PrometheusServer,
                                   tmp_path: Path) -> None:
    cli = knative_cli
    assert cli("start", ISVC, "--to", f"{MODEL}@2", "--steps", "20", "--interval", "1s")[0] == 0
    cli.world.sim.start(interval_s=0.02)
    proc = ManagedProcess("run", cli.argv("run", ISVC, "--prometheus-url", prometheus.url,
                                          "--poll", "0.2s", "--json"),
                          log_dir=tmp_path, env={"PYTHONPATH": str(ROOT)}, cwd=ROOT)
    try:
        wait_for(lambda: _state(cli.world).get("holder"), timeout_s=60, what="the run")
        wait_for(lambda: _state(cli.world).get("interval_started_at"), timeout_s=30,
                 what="the canary to be Ready")
        code, _, err = cli("promote", ISVC, "--full")
        assert code == 0, err
        assert proc.wait(timeout_s=30) == 0, proc.output_tail()
    finally:
        proc.stop()
    assert '"outcome": "promoted"' in proc.output_tail()
    assert cli.world.registry.aliases(MODEL) == {"stable": 2}
    assert os.environ.get("KUBECONFIG") != str(cli.kubeconfig)  # nothing leaked


def test_a_query_prometheus_rejects_is_refused_naming_the_metric(
        knative_cli: Cli, prometheus: PrometheusServer, tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("metrics:\n  - name: odd-latency\n    query: sum(up) by\n    max: 1\n")
    before = len(knative_cli.world.api.log)
    code, _, err = knative_cli("start", ISVC, "--to", f"{MODEL}@2", "--analysis", str(bad),
                               "--prometheus-url", prometheus.url)
    assert code == 2 and err.startswith("error: ") and "odd-latency" in err, err
    assert knative_cli.world.api.writes(before) == []
    assert knative_cli.world.registry.aliases(MODEL) == {"stable": 1}


def test_report_of_a_cluster_rollout(knative_cli: Cli, prometheus: PrometheusServer,
                                     tmp_path: Path) -> None:
    """`rollout report` against a cluster (the API emulator) and a real Prometheus that
    has no series for it: the page has the decisions and says each metric had none."""
    knative_cli.json("start", ISVC, "--to", f"{MODEL}@2", "--steps", "10,50")
    page = tmp_path / "report.html"
    doc = knative_cli.json("report", ISVC, "--prometheus-url", prometheus.url, "--out",
                           str(page))
    assert doc["phase"] == "Progressing" and doc["outcome"].startswith("in progress")
    assert [d["kind"] for d in doc["decisions"]] == ["RolloutStarted"]
    assert doc["weights"][0][1] == 10 and doc["windows"] == []
    assert {m["name"] for m in doc["metrics"]} == {"error-rate", "throttle-rate", "p99-latency"}
    assert all(m["error"] is None and m["series"] == {"canary": [], "stable": []}
               for m in doc["metrics"])
    queries = doc["metrics"][0]["queries"]
    assert f'namespace="{NAMESPACE}"' in queries["canary"] and 'version="2"' in queries["canary"]
    assert 'version="1"' in queries["stable"]
    text = page.read_text()
    assert text.count("<svg") == 4 and "no series in Prometheus" in text
    assert "<script" not in text and not re.search(r'(src|href)="(https?:)?//', text)

    # Prometheus unreachable: still a page, with the decisions; each metric says why.
    code, out, err = knative_cli("report", ISVC, "--prometheus-url", "http://127.0.0.1:9",
                                 "--out", str(page))
    assert code == 0 and out.strip() == str(page)
    assert err.count("warning: ") == 3 and "127.0.0.1:9" in err
    assert "RolloutStarted" in page.read_text()


def test_report_without_a_rollout_is_exit_2(knative_cli: Cli, tmp_path: Path) -> None:
    code, _, err = knative_cli("report", ISVC, "--out", str(tmp_path / "r.html"))
    assert code == 2 and err.startswith("error: ") and "no rollout" in err
    assert not (tmp_path / "r.html").exists()
