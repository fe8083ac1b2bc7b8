"""Shared helpers for the shadow tests: predictor processes started together, captures
written by the real record builder, and the CLI run in-process."""

from __future__ import annotations

import json
import signal
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support import ManagedProcess, free_port, wait_for, wait_http_ok
from tests.support.cli import run_cli  # noqa: F401 - re-exported for the shadow tests


@dataclass
class Predictor:
    """A running predictor process on loopback (one keep-alive client per predictor)."""

    name: str
    url: str
    proc: ManagedProcess
    client: httpx.Client = field(default_factory=lambda: httpx.Client(timeout=60))

    def predict(self, instances: list[Any], request_id: str | None = None,
                shadow: bool = False, **kwargs: Any) -> httpx.Response:
        headers = {}
        if request_id:
            headers["x-request-id"] = request_id
        if shadow:
            headers["x-shadow"] = "true"
        return self.client.post(f"{self.url}/v1/models/{self.name}:predict",
                                json={"instances": instances}, headers=headers, **kwargs)

    def metric(self, name: str, **labels: str) -> float:
        """The sum of a metric's samples whose labels include ``labels`` (0 if none)."""
        total = 0.0
        for line in self.client.get(f"{self.url}/metrics").text.splitlines():
            if not line.startswith(name + "{") and not line.startswith(name + " "):
                continue
            if all(f'{k}="{v}"' in line for k, v in labels.items()):
                total += float(line.rsplit(" ", 1)[1])
        return total


class Fleet:
    """Predictor processes started at once (start-up overlaps), stopped by PID."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self.procs: list[ManagedProcess] = []

    def spawn(self, model_dir: Path, name: str, *args: str, port: int | None = None
              ) -> Predictor:
        port = port or free_port()
        argv = [sys.executable, "-m", "predictor", "--model_name", name, "--model_dir",
                str(model_dir), "--http_host", "127.0.0.1", "--http_port", str(port),
                "--enable_grpc", "false", "--device", "cpu", *args]
        proc = ManagedProcess(f"{name}-{port}", argv, log_dir=self.log_dir,
                              env={"MODELCTL_LOG_LEVEL": "WARNING"})
        self.procs.append(proc)
        return Predictor(name, f"http://127.0.0.1:{port}", proc)

    def wait_ready(self, predictors: Sequence[Predictor], timeout_s: float = 150) -> None:
        for predictor in predictors:
            wait_http_ok(f"{predictor.url}/v2/health/ready", timeout_s=timeout_s,
                         proc=predictor.proc)

    def stop(self) -> None:
        for proc in self.procs:  # all drain at once, then each is waited for
            proc.signal(signal.SIGTERM)
        for proc in self.procs:
            proc.stop()


@pytest.fixture(scope="session")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    group = Fleet(tmp_path_factory.mktemp("predictor-logs"))
    yield group
    group.stop()


@pytest.fixture(scope="session")
def spawned(fleet: Fleet, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Every end-to-end world's processes, spawned together so their start-ups overlap
    (the classification ones take ~30 s of CPU to import torch); each test module waits
    for its own."""
    from tests.support import fleet_worlds as _worlds

    return {
        "classify": _worlds.spawn_classify(fleet, tmp_path_factory.mktemp("shadow-classify")),
        "fixed": _worlds.spawn_fixed(fleet, tmp_path_factory.mktemp("shadow-fixed")),
    }


def fetch(registry: Path, model: str, version: int, dest: Path) -> Path:
    from registry import Registry

    Registry.open(str(registry)).fetch(model, version, dest)
    return dest


def push_fixed(registry: Path, work: Path, options: dict[str, Any]) -> int:
    """Push a fixed-latency version of ``demo-fixed`` with these task options."""
    from registry import Registry

    src = work / f"src-{len(list(work.glob('src-*')))}"
    src.mkdir(parents=True)
    (src / "task.json").write_text(json.dumps(options))
    return Registry.open(str(registry)).push(src, "demo-fixed", "fixed-latency").version


def records(capture: Path, **where: str) -> list[dict[str, Any]]:
    """Every capture record under ``capture`` matching ``where`` (column = value)."""
    import pyarrow.parquet as pq

    rows: list[dict[str, Any]] = []
    for path in sorted(capture.rglob("*.parquet")):
        rows += pq.read_table(path).to_pylist()
    return [r for r in rows if all(str(r[k]) == v for k, v in where.items())]


def wait_records(capture: Path, count: int, timeout_s: float = 30, **where: str
                 ) -> list[dict[str, Any]]:
    """Poll until at least ``count`` matching records are readable."""
    found: list[dict[str, Any]] = []

    def enough() -> bool:
        nonlocal found
        found = records(capture, **where)
        return len(found) >= count

    wait_for(enough, timeout_s=timeout_s, interval_s=0.1, what=f"{count} records {where}")
    return found


def timed(call: Any) -> tuple[float, Any]:
    started = time.perf_counter()
    result = call()
    return time.perf_counter() - started, result
