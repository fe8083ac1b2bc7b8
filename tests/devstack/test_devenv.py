"""The dev environment's parts without a running environment: process identity, the state
file (and one written before queue mode), the local backend's concurrency, and the CLI's
one-line errors."""

from __future__ import annotations

import json
import socket
import sys
from pathlib import Path

import pytest

from devstack import DevEnv, DevEnvError, QueueSpec
from devstack._env import EnvState
from devstack._gateway import Routes
from devstack._predictor import Member, Predictor, predictor_args
from devstack._processes import (
    ProcessRecord,
    is_alive,
    log_tail,
    send_signal,
    spawn,
    stop,
    stop_all,
)
from rollout import Conflict, Plan, RolloutState
from rollout.backends import LocalNginxBackend, make_backend
from rollout.backends._interface import SaveState
from tests.support.cli import run_cli
from tests.support.devstack import MODEL


def test_predictor_args_take_three_spellings_and_refuse_what_dev_sets() -> None:
    assert predictor_args(["inject_latency_ms=100", "--max_batch_size=8",
                           "--inject_error_rate", "0.05"]) == (
        "--inject_latency_ms=100", "--max_batch_size=8", "--inject_error_rate", "0.05")
    with pytest.raises(DevEnvError, match="--http_port is set by modelctl dev itself"):
        predictor_args(["http_port=1"])
    with pytest.raises(DevEnvError, match="write flag=value"):
        predictor_args(["oops"])
    with pytest.raises(DevEnvError, match=r"--queue_role is set by .* `modelctl dev up --queue`"):
        predictor_args(["--queue_role", "worker"])
    with pytest.raises(DevEnvError, match="--workers must be within 1-16, got 0"):
        QueueSpec(workers=0)


def _sleeper(tmp_path: Path, name: str = "sleeper") -> ProcessRecord:
    marker = str(tmp_path / name)
    return spawn(name, [sys.executable, "-c", "import time; time.sleep(60)", marker],
                 log_path=tmp_path / f"{name}.log", marker=marker)


def test_a_process_is_signalled_only_while_it_is_still_the_one_recorded(tmp_path: Path) -> None:
    record = _sleeper(tmp_path)
    try:
        assert is_alive(record)
        reused = ProcessRecord(record.name, record.pid, record.create_time + 5, record.marker,
                               record.log)  # same PID, another start time: a reused PID
        other = ProcessRecord(record.name, record.pid, record.create_time, "/not/ours",
                              record.log)  # same PID, not our command line
        assert not is_alive(reused) and not send_signal(reused, 15)
        assert not is_alive(other) and not stop(other, timeout_s=1)
        assert is_alive(record)  # neither touched it
    finally:
        assert stop(record, timeout_s=5)
    assert not is_alive(record) and not stop(record)
    assert log_tail(tmp_path / "missing.log") == ""


def test_stop_all_signals_together_and_returns_only_what_ran(tmp_path: Path) -> None:
    first, second = _sleeper(tmp_path, "first"), _sleeper(tmp_path, "second")
    stop(second, timeout_s=5)
    assert stop_all([first, second], timeout_s=5) == [first]
    assert not is_alive(first)


def _env_with_dead_processes(tmp_path: Path) -> DevEnv:
    """An environment whose recorded processes have all exited (a machine that rebooted)."""
    env = DevEnv(MODEL, tmp_path / "dev")
    gone = _sleeper(tmp_path, "gone")
    stop(gone, timeout_s=5)
    stable = Predictor("stable", 1, "file:///r/rehearse/1", (), (Member(1, gone),))
    state = EnvState(name=MODEL, registry=str(tmp_path / "registry"), port=1, admin_port=2,
                     prometheus_port=3, scrape_interval_s=1.0, routes=Routes(1, stable.addresses),
                     nginx=gone, prometheus=gone, predictors={"stable": stable})
    with env.locked():
        env.write(state)
    return env


def test_the_state_file_round_trips_and_counts_revisions(tmp_path: Path) -> None:
    env = _env_with_dead_processes(tmp_path)
    state = env.read()
    assert EnvState.from_dict(json.loads(json.dumps(state.to_dict()))) == state
    assert state.revision == 2 and DevEnv.names(env.state_dir) == [MODEL]
    env.state_path.write_text("{not json")
    with pytest.raises(DevEnvError, match="is damaged"):
        env.read()


def _record(name: str, pid: int) -> dict[str, object]:
    return {"name": name, "pid": pid, "create_time": 1.5, "marker": f"--http_port {pid}",
            "log": f"/l/{name}.log"}


# state.json as written before queue mode: one predictor per role, its port and process
# at the top level, each route one address, no queue fields.
OLD_STATE = {
    "schema": 1, "name": MODEL, "registry": "/r", "port": 8080, "admin_port": 8081,
    "prometheus_port": 9090, "scrape_interval_s": 1.0, "revision": 7, "created_at": 2.0,
    "routes": {"generation": 4, "stable": "127.0.0.1:4001", "canary": "127.0.0.1:4002",
               "canary_weight_pct": 20, "shadow": None},
    "nginx": _record("nginx", 10), "prometheus": _record("prometheus", 11),
    "predictors": {
        "stable": {"started_as": "stable", "version": 1, "uri": "file:///r/1", "port": 4001,
                   "args": [], "process": _record("predictor-stable", 4001)},
        "canary": {"started_as": "canary", "version": 2, "uri": "file:///r/2", "port": 4002,
                   "args": ["--inject_latency_ms=100"],
                   "process": _record("predictor-canary", 4002)},
    },
    "role_args": {}, "rollout": None,
}


def test_a_state_file_from_before_queue_mode_still_reads() -> None:
    state = EnvState.from_dict(OLD_STATE)
    assert state.queue is None and state.redis is None and state.queue_url is None
    canary = state.predictors["canary"]
    assert canary.servers == (Member(4002, ProcessRecord.from_dict(
        _record("predictor-canary", 4002))),) and canary.workers == ()
    assert not canary.is_queued and canary.args == ("--inject_latency_ms=100",)
    assert state.routes == Routes(4, ("127.0.0.1:4001",), ("127.0.0.1:4002",), 20)
    assert sorted(state.processes()) == ["nginx", "predictor-canary", "predictor-stable",
                                         "prometheus"]
    assert EnvState.from_dict(json.loads(json.dumps(state.to_dict()))) == state


def test_a_queue_mode_state_round_trips_and_names_every_process() -> None:
    def member(port: int, name: str) -> Member:
        return Member(port, ProcessRecord.from_dict(_record(name, port)))

    stable = Predictor("stable", 1, "file:///r/1", ("--max_batch_size=8",),
                       servers=(member(5001, "frontend-stable"), member(5002, "frontend-stable")),
                       workers=(member(5003, "worker-stable"),))
    state = EnvState.from_dict(OLD_STATE).evolve(
        predictors={"stable": stable}, routes=Routes(5, stable.addresses),
        queue=QueueSpec(frontends=2, workers=1), redis_port=6390,
        redis=ProcessRecord.from_dict(_record("redis", 12)))
    assert EnvState.from_dict(json.loads(json.dumps(state.to_dict()))) == state
    assert state.queue_url == "redis://127.0.0.1:6390/0" and stable.is_queued
    assert stable.addresses == ("127.0.0.1:5001", "127.0.0.1:5002")
    assert sorted(state.processes()) == ["frontend-stable-1", "frontend-stable-2", "nginx",
                                         "prometheus", "redis", "worker-stable-1"]


def test_the_local_backend_refuses_stale_writes_and_reports_what_blocks_a_start(
        tmp_path: Path) -> None:
    env = _env_with_dead_processes(tmp_path)
    backend = make_backend("local", isvc=MODEL, state_dir=env.state_dir)
    assert isinstance(backend, LocalNginxBackend)
    seen = backend.observe()
    assert seen.target == f"local/{MODEL}" and seen.state is None and seen.restored
    assert seen.served.version == 1 and seen.canary_weight_pct == 0
    assert any("gateway (nginx) is not running" in b for b in seen.start_blockers)
    assert any("stable predictor rehearse@1 is not ready" in b for b in seen.start_blockers)

    state = RolloutState(namespace="local", isvc=MODEL, model=MODEL, stable_version=1,
                         stable_uri="file:///r/rehearse/1", canary_version=2,
                         canary_uri="file:///r/rehearse/2", plan=Plan((20, 50), 4.0, 2),
                         backend="local")
    after = backend.apply(seen, SaveState(), state)  # only the state: no process needed
    assert after.state == state and int(after.version) == int(seen.version) + 1
    with pytest.raises(Conflict, match="changed since it was read"):
        backend.apply(seen, SaveState(), state.evolve(paused=True))
    assert backend.observe().state == state
    plan = backend.describe(after, SaveState(), state)
    assert plan["change"] == "SaveState" and plan["start"] == [] and plan["stop"] == []


# -- the CLI's errors: one line, exit 2 ------------------------------------------------
@pytest.fixture
def clean_env(tmp_path: Path, dev_registry: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    state_dir = tmp_path / "dev"
    monkeypatch.setenv("MODELCTL_DEV_DIR", str(state_dir))
    monkeypatch.setenv("MODELCTL_REGISTRY", str(dev_registry))
    return state_dir


@pytest.mark.parametrize(("args", "message"), [
    (("dev", "status"), "no dev environment is up; start one with `modelctl dev up NAME`"),
    (("dev", "down", MODEL), f"no dev environment '{MODEL}' is up"),
    (("dev", "up", MODEL, "--stable", "99"), "99"),
    (("dev", "up", MODEL, "--stable-arg", "model_dir=/x"),
     "--model_dir is set by modelctl dev itself"),
    (("dev", "up", "bad/name"), "invalid dev environment name"),
    (("dev", "up", MODEL, "--port", "0"), "--port must be within 1-65535"),
    (("dev", "up", MODEL, "--scrape-interval", "fast"),
     "duration 'fast': expected a number with ms, s, m or h, e.g. 60s"),
    (("dev", "up", MODEL, "--scrape-interval", "0s"), "duration '0s' must be greater than zero"),
    (("dev", "up", MODEL, "--scrape-interval", "10m"), "--scrape-interval must be within 100ms-5m"),
    (("dev", "up", MODEL, "--frontends", "3"), "--frontends and --workers need --queue"),
    (("dev", "up", MODEL, "--queue", "--workers", "0"), "--workers must be within 1-16, got 0"),
    (("dev", "up", MODEL, "--queue", "--stable-arg", "queue_url=redis://x:1/0"),
     "--queue_url is set by modelctl dev itself"),
    (("rollout", "status", MODEL, "--target", "local"), f"no dev environment '{MODEL}' is up"),
    (("rollout", "start", MODEL, "--to", f"{MODEL}@1", "--canary-arg", "a=1", "--kubeconfig",
      "/nonexistent"), "--canary-arg works only with --target local"),
])
def test_user_errors_are_one_line_and_exit_2(clean_env: Path, monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture[str],
                                             args: tuple[str, ...], message: str) -> None:
    code, out, err = run_cli(monkeypatch, capsys, *args)
    assert code == 2, (out, err)
    assert err.startswith("error: ") and message in err and err.count("\n") == 1, err
    assert not list(clean_env.glob("*/state.json"))  # nothing was left behind


def test_up_refuses_a_port_that_is_taken(clean_env: Path, monkeypatch: pytest.MonkeyPatch,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code, _, err = run_cli(monkeypatch, capsys, "dev", "up", MODEL, "--port", str(port))
    assert code == 2 and f"port {port} on 127.0.0.1 is in use" in err
    assert not (clean_env / MODEL / "state.json").exists()
