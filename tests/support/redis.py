"""A real redis-server (Debian's) on 127.0.0.1: its own directory, AOF on, stopped by PID.
``make setup`` installs it.

Nothing here stands in for Redis: the tests talk to the server itself. The flags are
directives of redis/redis's annotated ``redis.conf`` given on the command line (``bind``, ``port``,
``dir``, ``appendonly``, ``appendfsync``, ``save ""`` to turn RDB snapshots off,
``protected-mode``, ``daemonize``), each defined in the ``static_configs[]`` table of
github.com/redis/redis ``src/config.c``, which takes them as ``--name value``
arguments too. A missing server fails the run instead of skipping it: ``make test``
installs one, so its absence is a broken set-up, not a choice.

``redis_server`` is the session's shared server. ``RedisServer.restart``-able servers of
their own (``own_redis_server``) are for the fault tests that stop Redis and start it
again on the same port and directory, so the AOF there is what the new process loads.
"""

from __future__ import annotations

import contextlib
import shutil
import signal
import socket
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.support.procs import ManagedProcess, free_port, wait_for


def _binary() -> str:
    binary = shutil.which("redis-server") or "/usr/bin/redis-server"
    if not Path(binary).exists():
        pytest.fail("redis-server is not installed: run `make setup`")
    return binary


@dataclass
class RedisServer:
    port: int
    proc: ManagedProcess
    directory: Path
    appendfsync: str = "everysec"
    starts: int = field(default=1)

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def client(self, **kwargs: Any) -> Any:
        import redis

        return redis.Redis(host="127.0.0.1", port=self.port, db=0, **kwargs)

    @property
    def is_running(self) -> bool:
        return self.proc.poll() is None

    def stop(self, sig: int = signal.SIGTERM, timeout_s: float = 15.0) -> int:
        """Stop the server with ``sig`` (SIGTERM: Redis's clean shutdown, which flushes
        and fsyncs the AOF; SIGKILL: a crash, which keeps only what was fsynced)."""
        self.proc.signal(sig)
        code = self.proc.wait(timeout_s)
        self.proc.stop()  # closes its log
        return code

    def start(self, timeout_s: float = 30.0) -> None:
        """Start it again on the same port and directory (it loads the AOF there)."""
        if self.is_running:
            raise RuntimeError(f"redis-server on {self.port} is still running")
        self.starts += 1
        self.proc = _spawn(self.port, self.directory, self.appendfsync,
                           name=f"redis-{self.port}-{self.starts}", timeout_s=timeout_s)


def _answers(port: int) -> bool:
    """PONG, not an error: while it loads its AOF Redis answers -LOADING."""
    with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
        s.sendall(b"PING\r\n")
        return s.recv(16).startswith(b"+PONG")


def _spawn(port: int, directory: Path, appendfsync: str, *, name: str,
           timeout_s: float = 20.0) -> ManagedProcess:
    argv = [_binary(), "--bind", "127.0.0.1", "--port", str(port), "--dir", str(directory),
            "--appendonly", "yes", "--appendfsync", appendfsync, "--save", "",
            "--protected-mode", "yes", "--daemonize", "no"]
    proc = ManagedProcess(name, argv, log_dir=directory)
    try:
        wait_for(lambda: proc.poll() is None and _answers(port), timeout_s=timeout_s,
                 what=f"redis-server on {port} to answer PING")
    except BaseException:
        proc.stop()
        raise
    return proc


@contextlib.contextmanager
def own_redis_server(directory: Path, *, appendfsync: str = "everysec") -> Iterator[RedisServer]:
    """A redis-server of the caller's own in ``directory``, stopped (by PID) at the end."""
    port = free_port()
    server = RedisServer(port, _spawn(port, directory, appendfsync, name=f"redis-{port}"),
                         directory, appendfsync)
    try:
        yield server
    finally:
        server.proc.stop()


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    with own_redis_server(tmp_path_factory.mktemp("redis")) as server:
        yield server
