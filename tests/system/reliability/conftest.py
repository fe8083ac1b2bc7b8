"""Fixtures of the promise tests: a real local registry and predictors stopped by PID."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.support.seaweed import SeaweedS3, start_seaweed
from tests.system.reliability._support import Predictor, launch_predictor, push_fixed


@pytest.fixture(scope="session")
def registry_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A local registry (fixed-latency versions are pushed into it as tests need them)."""
    return tmp_path_factory.mktemp("reliability") / "registry"


@pytest.fixture(scope="module")
def launch(
    registry_root: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Callable[..., Predictor]]:
    """Factory: push a fixed-latency version with ``options`` and start a predictor on it
    (``wait=False`` returns before it is ready). Every process it started is stopped by
    PID when the module ends."""
    started: list[Predictor] = []
    log_dir = tmp_path_factory.mktemp("predictors")

    def start(name: str, *args: str, options: dict[str, object] | None = None,
              wait: bool = True, env: dict[str, str] | None = None) -> Predictor:
        push_fixed(registry_root, name, **(options or {"latency_ms": 1}))
        predictor = launch_predictor(registry_root, name, log_dir, *args, env=env)
        started.append(predictor)
        return predictor.wait_ready() if wait else predictor

    yield start
    for predictor in started:
        predictor.proc.stop()


@pytest.fixture(scope="session")
def seaweed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SeaweedS3]:
    """One SeaweedFS S3 server with a ``models`` bucket. The registry fault tests kill and
    restart it on the same data, ports and keys, so it is still the same server after."""
    server = start_seaweed(tmp_path_factory.mktemp("seaweed"))
    try:
        server.create_bucket("models")
        yield server
    finally:
        server.stop()


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """The figures the promise tests measured (copied into docs/RELIABILITY.md)."""
    from tests.system.reliability._support import FIGURES

    if FIGURES:
        terminalreporter.section("reliability figures")
        for name in sorted(FIGURES):
            terminalreporter.write_line(f"{name}: {FIGURES[name]}")
