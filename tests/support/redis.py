"""A real redis-server (Debian's) on 127.0.0.1 for the session: its own directory, AOF on,
stopped by PID. ``make setup`` installs it."""

from __future__ import annotations

import shutil
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.procs import ManagedProcess, free_port, wait_for


@dataclass
class RedisServer:
    port: int
    proc: ManagedProcess
    directory: Path

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def client(self):  # type: ignore[no-untyped-def]
        import redis

        return redis.Redis(host="127.0.0.1", port=self.port, db=0)


def _answers(port: int) -> bool:
    with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
        s.sendall(b"PING\r\n")
        return s.recv(16).startswith(b"+PONG")


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    binary = shutil.which("redis-server") or "/usr/bin/redis-server"
    if not Path(binary).exists():
        pytest.skip("redis-server is not installed (make setup)")
    directory = tmp_path_factory.mktemp("redis")
    port = free_port()
    argv = [binary, "--bind", "127.0.0.1", "--port", str(port), "--dir", str(directory),
            "--appendonly", "yes", "--appendfsync", "everysec", "--save", "",
            "--protected-mode", "yes", "--daemonize", "no"]
    proc = ManagedProcess(f"redis-{port}", argv, log_dir=directory)
    try:
        wait_for(lambda: proc.poll() is None and _answers(port), timeout_s=20,
                 what="redis-server to answer PING")
        yield RedisServer(port, proc, directory)
    finally:
        proc.stop()
