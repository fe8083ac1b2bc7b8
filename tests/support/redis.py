"""A real redis-server (Debian's) on 127.0.0.1 for the session: its own directory, AOF on,
stopped by PID. ``make setup`` installs it.

Nothing here stands in for Redis: the tests talk to the server itself. The flags are
redis.conf directives given on the command line (redis.conf: ``bind``, ``port``,
``dir``, ``appendonly``, ``appendfsync``, ``save ""`` to turn RDB snapshots off,
``protected-mode``, ``daemonize``). A missing server fails the run instead of skipping
it: ``make test`` installs one, so its absence is a broken set-up, not a choice.
"""

from __future__ import annotations

import shutil
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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

    def client(self) -> Any:
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
        pytest.fail("redis-server is not installed: run `make setup`")
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
