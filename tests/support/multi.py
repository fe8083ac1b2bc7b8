"""Multi-model predictors for the tests: a model directory laid out as KServe's model
agent lays out TrainedModels, and a real ``python -m predictor --multi_model`` process on
it. Nothing here stands in for KServe: the layout is the agent's (kserve/kserve
``pkg/agent/downloader.go`` ``DownloadModel``: each TrainedModel's files under
``<ModelDir>/<TrainedModel name>/``, then a ``SUCCESS.<sha256>`` marker), filled here by
the registry's own fetch (one verified version per subdirectory)."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.procs import ManagedProcess, free_port, wait_http_ok

TOKEN = "test-repository-token-0123456789"


def fill_models_dir(root: Path, fixed: dict[str, dict[str, Any]],
                    built: dict[str, Callable[[Path], None]] | None = None,
                    task: dict[str, str] | None = None) -> Path:
    """``root/models/<name>``: each a version pushed to and fetched from a real registry
    (``fixed``: fixed-latency task options; ``built``: a builder of an artifact from
    ``scripts.demo_models``, text-classification unless ``task`` names another)."""
    from registry import Registry

    registry = Registry.open(str(root / "registry"))
    models = root / "models"
    models.mkdir(parents=True, exist_ok=True)
    sources: list[tuple[str, str, Callable[[Path], None]]] = []
    for name, options in fixed.items():
        sources.append((name, "fixed-latency", lambda d, o=options: (d / "task.json").write_text(
            json.dumps(o))))
    for name, build in (built or {}).items():
        sources.append((name, (task or {}).get(name, "text-classification"), build))
    for name, task, build in sources:
        src = root / "src" / name
        src.mkdir(parents=True, exist_ok=True)
        build(src)
        version = registry.push(src, name, task).version
        registry.fetch(name, version, models / name)
    return models


@dataclass
class Multi:
    """A running multi-model predictor."""

    url: str
    grpc_port: int
    proc: ManagedProcess

    def v1(self, model: str, instances: list[Any], **kwargs: Any) -> httpx.Response:
        return httpx.post(f"{self.url}/v1/models/{model}:predict",
                          json={"instances": instances}, timeout=kwargs.pop("timeout", 60),
                          **kwargs)

    def index(self) -> dict[str, dict[str, Any]]:
        reply = httpx.post(f"{self.url}/v2/repository/index", timeout=30)
        assert reply.status_code == 200, reply.text
        return {row["name"]: row for row in reply.json()}

    def states(self) -> dict[str, str]:
        return {name: row["state"] for name, row in self.index().items()}

    def repository(self, model: str, action: str, token: str | None = TOKEN) -> httpx.Response:
        headers = {"authorization": f"Bearer {token}"} if token else {}
        return httpx.post(f"{self.url}/v2/repository/models/{model}/{action}", headers=headers,
                          timeout=60)

    def metric(self, name: str, **labels: str) -> float:
        """The value of one series on /metrics (0 when absent)."""
        text = httpx.get(f"{self.url}/metrics", timeout=10).text
        for line in text.splitlines():
            if not line.startswith(name + "{"):
                continue
            found = dict(part.split("=", 1) for part in line[len(name) + 1:line.index("}")]
                         .replace('"', "").split(","))
            if labels.items() <= found.items():
                return float(line.rsplit(" ", 1)[1])
        return 0.0


@pytest.fixture
def start_multi(tmp_path: Path) -> Iterator[Callable[..., Multi]]:
    """Factory: a multi-model predictor on a model directory, stopped after the test."""
    started: list[ManagedProcess] = []

    def start(models: Path, *flags: str, token: bool = True, grpc: bool = False,
              env: dict[str, str] | None = None) -> Multi:
        port, grpc_port = free_port(), free_port()
        argv = [sys.executable, "-m", "predictor", "--multi_model", "--model_dir", str(models),
                "--http_host", "127.0.0.1", "--http_port", str(port),
                "--grpc_port", str(grpc_port), "--enable_grpc", "true" if grpc else "false",
                *flags]
        if token:
            token_file = tmp_path / "token"
            token_file.write_text(TOKEN + "\n")
            argv += ["--repository_token_file", str(token_file)]
        proc = ManagedProcess(f"multi-{port}", argv, log_dir=tmp_path, env=env)
        started.append(proc)
        url = f"http://127.0.0.1:{port}"
        wait_http_ok(f"{url}/v2/health/ready", timeout_s=90, proc=proc)
        return Multi(url, grpc_port, proc)

    yield start
    for proc in started:
        proc.stop()
