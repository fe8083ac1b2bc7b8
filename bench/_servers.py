"""Start the predictor for a benchmark: a throwaway registry, one process, stopped by PID."""

from __future__ import annotations

import json
import re
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import psutil

from tests.support.procs import ManagedProcess, free_port, wait_http_ok


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
        text = httpx.get(f"{self.url}/metrics", timeout=10).text
        total = count = 0.0
        for line in text.splitlines():
            if m := re.match(r"modelctl_batch_size_(sum|count)\{.*\} (\S+)$", line):
                if m.group(1) == "sum":
                    total = float(m.group(2))
                else:
                    count = float(m.group(2))
        return total, count


def push_fixed_latency(registry: Path, latency_ms: float, max_batch_size: int) -> None:
    from registry import Registry

    src = registry.parent / "fixed-src"
    src.mkdir(parents=True, exist_ok=True)
    (src / "task.json").write_text(json.dumps({"latency_ms": latency_ms,
                                               "max_batch_size": max_batch_size}))
    Registry.open(str(registry)).push(src, "bench-fixed", "fixed-latency", alias="stable")


@contextmanager
def predictor(model: str, registry: Path, *flags: str) -> Iterator[Server]:
    """Serve ``model@stable`` from ``registry`` with ``flags``; stop it afterwards."""
    from registry import Registry

    with tempfile.TemporaryDirectory(prefix="bench-pred-") as tmp:
        model_dir = Path(tmp) / "model"
        Registry.open(str(registry)).fetch(model, "stable", model_dir)
        port = free_port()
        argv = [sys.executable, "-m", "predictor", "--model_name", model, "--model_dir",
                str(model_dir), "--http_host", "127.0.0.1", "--http_port", str(port),
                "--enable_grpc", "false", *flags]
        proc = ManagedProcess(f"bench-{model}", argv, log_dir=Path(tmp),
                              env={"MODELCTL_LOG_LEVEL": "WARNING"})
        try:
            url = f"http://127.0.0.1:{port}"
            wait_http_ok(f"{url}/v2/health/ready", timeout_s=120, proc=proc)
            yield Server(url, f"{url}/v1/models/{model}:predict", proc)
        finally:
            proc.stop()
