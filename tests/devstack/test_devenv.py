"""The dev environment's parts without a running environment: process identity, the state
file, the local backend's concurrency, and the CLI's one-line errors."""

from __future__ import annotations

import json
import socket
import sys
from pathlib import Path

import pytest

from devstack import DevEnv, DevEnvError
from devstack._env import EnvState, Predictor, predictor_args
from devstack._gateway import Routes
from devstack._processes import (
    ProcessRecord,
    is_alive,
    log_tail,
    send_signal,
    spawn,
    stop,
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


def _env_with_dead_processes(tmp_path: Path) -> DevEnv:
    """An environment whose recorded processes have all exited (a machine that rebooted)."""
    env = DevEnv(MODEL, tmp_path / "dev")
    gone = _sleeper(tmp_path, "gone")
    stop(gone, timeout_s=5)
    stable = Predictor("stable", 1, "file:///r/rehearse/1", 1, (), gone)
    state = EnvState(name=MODEL, registry=str(tmp_path / "registry"), port=1, admin_port=2,
                     prometheus_port=3, scrape_interval_s=1.0, routes=Routes(1, stable.address),
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
