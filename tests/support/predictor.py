"""Real predictor processes on loopback, serving versions from a real local registry."""

from __future__ import annotations

import hashlib
import json
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.support import ManagedProcess, free_port, wait_http_ok


@dataclass
class RunningPredictor:
    name: str
    url: str
    grpc_port: int | None
    proc: ManagedProcess
    model_dir: Path

    def v1(self, instances: list[object], **kwargs: object) -> httpx.Response:
        return httpx.post(f"{self.url}/v1/models/{self.name}:predict",
                          json={"instances": instances}, timeout=30, **kwargs)  # type: ignore[arg-type]

    def metrics(self) -> str:
        return httpx.get(f"{self.url}/metrics", timeout=10).text


@pytest.fixture(scope="session")
def registry_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A local registry holding the demo models (built once per session)."""
    from scripts.demo_models import ensure_demo

    root = tmp_path_factory.mktemp("registry")
    for name in ("demo-embed", "demo-classify", "demo-generate"):
        ensure_demo(str(root), name)
    return root


def push_fixed_latency(registry_dir: Path, name: str, **options: object) -> int:
    """Push a fixed-latency version with these task options; returns its version."""
    from registry import Registry

    key = hashlib.sha1(json.dumps(options, sort_keys=True).encode()).hexdigest()[:12]
    src = registry_dir.parent / f"src-{name}-{key}"
    src.mkdir(exist_ok=True)
    (src / "task.json").write_text(json.dumps(options))
    return Registry.open(str(registry_dir)).push(src, name, "fixed-latency").version


@pytest.fixture(scope="session")
def start_predictor(
    registry_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Callable[..., RunningPredictor]]:
    """Factory: fetch NAME@REF from the registry and start a predictor process on it."""
    from registry import Registry

    started: list[ManagedProcess] = []
    logs = tmp_path_factory.mktemp("predictor-logs")

    def start(name: str, ref: str = "latest", *args: str, grpc: bool = False,
              env: dict[str, str] | None = None, ready_timeout_s: float = 90) -> RunningPredictor:
        reg = Registry.open(str(registry_dir))
        version = reg.resolve(name, ref)
        model_dir = tmp_path_factory.mktemp(f"{name}-{version}")
        reg.fetch(name, version, model_dir / "m")
        port = free_port()
        grpc_port = free_port()
        argv = [sys.executable, "-m", "predictor", "--model_name", name,
                "--model_dir", str(model_dir / "m"), "--http_host", "127.0.0.1",
                "--http_port", str(port), "--grpc_port", str(grpc_port),
                "--enable_grpc", "true" if grpc else "false", *args]
        proc = ManagedProcess(f"{name}-{port}", argv, log_dir=logs, env=env)
        started.append(proc)
        url = f"http://127.0.0.1:{port}"
        wait_http_ok(f"{url}/v2/health/ready", timeout_s=ready_timeout_s, proc=proc)
        return RunningPredictor(name, url, grpc_port if grpc else None, proc, model_dir / "m")

    yield start
    for proc in started:
        proc.stop()
