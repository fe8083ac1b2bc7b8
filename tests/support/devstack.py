"""``modelctl dev`` for real: a tmp registry of fixed-latency versions, the CLI as processes.

Every command runs as ``python -m cli ...`` (what a user runs), with the registry and
the dev state directory set through the environment. Environments are brought up
by the tests and taken down with ``modelctl dev down``; if that fails, the teardown
stops the recorded PIDs itself (after checking they are still the processes it
started) so nothing is ever left behind.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.support import wait_for

ROOT = Path(__file__).resolve().parents[2]
MODEL = "rehearse"
LATENCY_MS = 20  # per batch: fast, and +100 ms stands out clearly


def push_version(registry: Path, model: str = MODEL, **options: object) -> int:
    """Push one more fixed-latency version of ``model`` (same behaviour unless told)."""
    from registry import Registry

    src = registry.parent / f"src-{model}"
    src.mkdir(exist_ok=True)
    (src / "task.json").write_text(json.dumps({"latency_ms": LATENCY_MS, **options}))
    reg = Registry.open(str(registry))
    first = model not in reg.models()
    return reg.push(src, model, "fixed-latency", alias="stable" if first else None).version


_ACCESS = re.compile(r'^(\S+) (\d+) (\S+) "([^"]*)" "([^"]*)" (\S+) (\S+)$')


@dataclass(frozen=True)
class Access:
    """One line of the gateway's access log."""

    at: float
    status: int
    route: str  # stable or canary: which split the request fell in
    upstreams: tuple[str, ...]  # more than one: nginx retried it elsewhere
    upstream_status: str


def read_access(path: Path, offset: int = 0) -> list[Access]:
    with open(path, "rb") as f:
        f.seek(offset)
        text = f.read().decode()
    found = []
    for line in text.splitlines():
        match = _ACCESS.match(line)
        assert match, f"unexpected access log line: {line!r}"
        at, status, route, upstreams, upstream_status = match.groups()[:5]
        found.append(Access(float(at), int(status), route,
                            tuple(u.strip() for u in upstreams.split(",")), upstream_status))
    return found


@dataclass
class DevCli:
    """Runs ``modelctl`` as a process with this registry and dev state directory."""

    registry: Path
    state_dir: Path
    started: list[subprocess.Popen[str]] = field(default_factory=list)

    @property
    def env(self) -> dict[str, str]:
        return {**os.environ, "MODELCTL_REGISTRY": str(self.registry),
                "MODELCTL_DEV_DIR": str(self.state_dir), "COLUMNS": "200"}

    def argv(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "cli", *args]

    def run(self, *args: str, timeout_s: float = 180.0) -> subprocess.CompletedProcess[str]:
        return subprocess.run(self.argv(*args), cwd=ROOT, env=self.env, capture_output=True,
                              text=True, timeout=timeout_s, check=False)

    def ok(self, *args: str, timeout_s: float = 180.0) -> str:
        done = self.run(*args, timeout_s=timeout_s)
        assert done.returncode == 0, f"modelctl {' '.join(args)}: {done.stderr}{done.stdout}"
        return done.stdout

    def json(self, *args: str, timeout_s: float = 180.0) -> Any:
        return json.loads(self.ok(*args, "--json", timeout_s=timeout_s))

    def background(self, *args: str) -> subprocess.Popen[str]:
        proc = subprocess.Popen(self.argv(*args), cwd=ROOT, env=self.env, text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                start_new_session=True)
        self.started.append(proc)
        return proc

    def load(self, name: str, *, rate: float, duration_s: float) -> LoadRun:
        """Start ``modelctl dev load`` in the background; ``finish()`` collects it."""
        access = self.state_dir / name / "nginx" / "logs" / "access.log"
        offset = access.stat().st_size
        proc = self.background("dev", "load", name, "--rate", f"{rate:g}",
                               "--duration", f"{duration_s:g}s", "--json")
        wait_for(lambda: proc.poll() is not None or access.stat().st_size > offset,
                 timeout_s=30, what="the load to reach the gateway")
        return LoadRun(proc, access, offset, duration_s)

    def stop_started(self) -> None:
        for proc in self.started:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)


@dataclass
class LoadRun:
    """A ``modelctl dev load`` running in the background, and the access log it leaves."""

    proc: subprocess.Popen[str]
    access_log: Path
    offset: int
    duration_s: float

    def finish(self) -> tuple[dict[str, Any], list[Access]]:
        """Wait for the load's summary; return it with the access-log lines it caused."""
        out, err = self.proc.communicate(timeout=self.duration_s + 60)
        assert self.proc.returncode == 0, err
        return json.loads(out), read_access(self.access_log, self.offset)


def state_of(state_dir: Path, name: str) -> dict[str, Any]:
    return dict(json.loads((state_dir / name / "state.json").read_text()))


def stop_recorded(state_dir: Path, name: str) -> None:
    """Last resort after a failed test: stop the PIDs the state file records (checked)."""
    from devstack._env import EnvState
    from devstack._processes import stop

    path = state_dir / name / "state.json"
    if not path.exists():
        return
    state = EnvState.from_dict(json.loads(path.read_text()))
    for process in state.processes().values():
        stop(process, timeout_s=10)
    path.unlink()


@pytest.fixture(scope="session")
def dev_registry(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A local registry with version 1 of the fixed-latency model (alias stable)."""
    root = tmp_path_factory.mktemp("dev-registry") / "registry"
    push_version(root)
    return root


@pytest.fixture(scope="session")
def dev_cli(dev_registry: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevCli]:
    cli = DevCli(dev_registry, tmp_path_factory.mktemp("dev-state"))
    yield cli
    cli.stop_started()
