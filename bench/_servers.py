"""Start what a benchmark runs: predictors (one or a fleet) from a throwaway registry, a
redis-server, each stopped by PID; and read the CPU time of processes and the machine."""

from __future__ import annotations

import contextlib
import json
import re
import socket
import sys
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import psutil

from tests.support.procs import ManagedProcess, free_port, wait_for, wait_http_ok


@dataclass
class Server:
    url: str
    predict_url: str
    proc: ManagedProcess

    def cpu_s(self) -> float:
        """User+system CPU seconds the server process has used so far."""
        times = psutil.Process(self.proc.pid).cpu_times()
        return float(times.user + times.system)

    def counters(self) -> dict[str, float]:
        """Requests refused at the door (all reasons) and items expired in the queue."""
        text = httpx.get(f"{self.url}/metrics", timeout=10).text
        out = {"rejections": 0.0, "expired": 0.0}
        for line in text.splitlines():
            if m := re.match(r"modelctl_(rejections|items_expired)_total\{.*\} (\S+)$", line):
                out["rejections" if m.group(1) == "rejections" else "expired"] += float(m.group(2))
        return out

    def batch_totals(self) -> tuple[float, float]:
        """(sum of batch sizes, number of batches) from /metrics."""
        items, batches, _ = self.batch_sums()
        return items, batches

    def batch_sums(self) -> tuple[float, float, float]:
        """(sum of batch sizes, number of batches, device seconds) from /metrics."""
        from capacity._edge import batch_sums

        return batch_sums(self.url)


def push_fixed_latency(registry: Path, latency_ms: float, max_batch_size: int,
                       name: str = "bench-fixed") -> None:
    from registry import Registry

    src = registry.parent / f"{name}-src"
    src.mkdir(parents=True, exist_ok=True)
    (src / "task.json").write_text(json.dumps({"latency_ms": latency_ms,
                                               "max_batch_size": max_batch_size}))
    Registry.open(str(registry)).push(src, name, "fixed-latency", alias="stable")


@contextmanager
def predictor(model: str, registry: Path, *flags: str,
              log_level: str = "WARNING") -> Iterator[Server]:
    """Serve ``model@stable`` from ``registry`` with ``flags`` (logging at ``log_level``,
    ``MODELCTL_LOG_LEVEL``); stop it afterwards."""
    from registry import Registry

    with tempfile.TemporaryDirectory(prefix="bench-pred-") as tmp:
        model_dir = Path(tmp) / "model"
        Registry.open(str(registry)).fetch(model, "stable", model_dir)
        port = free_port()
        argv = [sys.executable, "-m", "predictor", "--model_name", model, "--model_dir",
                str(model_dir), "--http_host", "127.0.0.1", "--http_port", str(port),
                "--enable_grpc", "false", *flags]
        proc = ManagedProcess(f"bench-{model}", argv, log_dir=Path(tmp),
                              env={"MODELCTL_LOG_LEVEL": log_level})
        try:
            url = f"http://127.0.0.1:{port}"
            wait_http_ok(f"{url}/v2/health/ready", timeout_s=120, proc=proc)
            yield Server(url, f"{url}/v1/models/{model}:predict", proc)
        finally:
            proc.stop()


def process_cpu_s(pid: int) -> float:
    """User+system CPU seconds used so far by ``pid`` and its live children; 0.0 once gone."""
    try:
        proc = psutil.Process(pid)
        total = sum(proc.cpu_times()[:2])
        for child in proc.children(recursive=True):
            with contextlib.suppress(psutil.Error):
                total += sum(child.cpu_times()[:2])
        return float(total)
    except psutil.Error:
        return 0.0


def machine_busy_s() -> float:
    """CPU seconds every core of the machine has spent not idle since boot (all processes)."""
    times = psutil.cpu_times()
    not_busy = ("idle", "iowait", "guest", "guest_nice")  # guest time is counted in user too
    return float(sum(times) - sum(getattr(times, name, 0.0) for name in not_busy))


@dataclass
class RedisProcess:
    """A redis-server on 127.0.0.1 with its own directory."""

    port: int
    proc: ManagedProcess
    directory: Path

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def client(self) -> Any:
        import redis

        return redis.Redis(host="127.0.0.1", port=self.port, db=0)


def _redis_answers(port: int) -> bool:
    with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
        s.sendall(b"PING\r\n")
        return s.recv(16).startswith(b"+PONG")


@contextmanager
def redis_server(binary: str = "/usr/bin/redis-server") -> Iterator[RedisProcess]:
    """Debian's redis-server on loopback: its own temp directory, AOF fsync'd every
    second, no RDB snapshots; stopped by PID afterwards."""
    with tempfile.TemporaryDirectory(prefix="bench-redis-") as tmp:
        port = free_port()
        argv = [binary, "--bind", "127.0.0.1", "--port", str(port), "--dir", tmp,
                "--appendonly", "yes", "--appendfsync", "everysec", "--save", "",
                "--protected-mode", "yes", "--daemonize", "no"]
        proc = ManagedProcess(f"redis-{port}", argv, log_dir=Path(tmp))
        try:
            wait_for(lambda: proc.poll() is None and _redis_answers(port), timeout_s=20,
                     what="redis-server to answer PING")
            yield RedisProcess(port, proc, Path(tmp))
        finally:
            proc.stop()


def spawn_predictor(model: str, model_dir: Path, log_dir: Path, *flags: str) -> Server:
    """Start ``python -m predictor`` serving ``model_dir`` without waiting for it; the
    caller waits (:func:`wait_ready`) and stops it (``server.proc.stop()``)."""
    port = free_port()
    argv = [sys.executable, "-m", "predictor", "--model_name", model, "--model_dir",
            str(model_dir), "--http_host", "127.0.0.1", "--http_port", str(port),
            "--enable_grpc", "false", *flags]
    proc = ManagedProcess(f"bench-{model}-{port}", argv, log_dir=log_dir,
                          env={"MODELCTL_LOG_LEVEL": "WARNING"})
    url = f"http://127.0.0.1:{port}"
    return Server(url, f"{url}/v1/models/{model}:predict", proc)


def wait_ready(server: Server, timeout_s: float = 120.0) -> None:
    """Poll the server's readiness until it answers 200 (fail fast if it exited)."""
    wait_http_ok(f"{server.url}/v2/health/ready", timeout_s=timeout_s, proc=server.proc)


@dataclass
class Predictors:
    """Predictors of one model sharing one fetched model directory and log directory."""

    model: str
    model_dir: Path
    log_dir: Path
    servers: list[Server]

    def spawn(self, *flags: str) -> Server:
        """Start one more (not waited for); it is stopped with the others."""
        server = spawn_predictor(self.model, self.model_dir, self.log_dir, *flags)
        self.servers.append(server)
        return server


@contextmanager
def predictors(model: str, registry: Path,
               flag_sets: Sequence[Sequence[str]]) -> Iterator[Predictors]:
    """One predictor per entry of ``flag_sets`` on ``model@stable``, all started before any
    is waited for (they load in parallel); every one, and any spawned later, stopped by
    PID afterwards."""
    from registry import Registry

    with tempfile.TemporaryDirectory(prefix="bench-preds-") as tmp:
        model_dir = Path(tmp) / "model"
        Registry.open(str(registry)).fetch(model, "stable", model_dir)
        group = Predictors(model, model_dir, Path(tmp), [])
        try:
            for flags in flag_sets:
                group.spawn(*flags)
            for server in list(group.servers):
                wait_ready(server)
            yield group
        finally:
            for server in group.servers:
                server.proc.stop()
