"""The queue of ``modelctl dev up --queue``: Debian's ``redis-server`` on 127.0.0.1.

One server per environment, in ``<env dir>/redis/`` (its AOF and its log), with AOF on
(``appendonly yes``, fsync every second), RDB snapshots off (``save ""``) and protected
mode on, listening on loopback only. It keeps its command line as started
(``set-proc-title no``), so the recorded marker (its ``--dir``) identifies it and it is
stopped by PID like every other process of the stack. The AOF stays after ``down``,
like the logs.
"""

from __future__ import annotations

import socket
import time
from pathlib import Path

from devstack._errors import DevEnvError
from devstack._processes import ProcessRecord, is_alive, log_tail, spawn, stop

REDIS_BIN = "/usr/bin/redis-server"


def redis_answers(port: int) -> bool:
    """True when the server on 127.0.0.1:``port`` answers PING with PONG."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1.0) as s:
            s.sendall(b"PING\r\n")
            return s.recv(16).startswith(b"+PONG")
    except OSError:
        return False


def start_redis(folder: Path, port: int, *, timeout_s: float = 20.0) -> ProcessRecord:
    """Start redis-server on 127.0.0.1:``port`` with its data in ``folder``; return once it
    answers PING (workers need it the moment they start)."""
    if not Path(REDIS_BIN).exists():
        raise DevEnvError(f"redis-server is not installed at {REDIS_BIN}: run `make setup` "
                          "(or apt-get install redis-server)")
    folder.mkdir(parents=True, exist_ok=True)
    argv = [REDIS_BIN, "--bind", "127.0.0.1", "--port", str(port), "--dir", str(folder),
            "--appendonly", "yes", "--appendfsync", "everysec", "--save", "",
            "--protected-mode", "yes", "--daemonize", "no", "--set-proc-title", "no"]
    record = spawn("redis", argv, log_path=folder / "redis.log", marker=f"--dir {folder}")
    deadline = time.monotonic() + timeout_s
    while not redis_answers(port):
        if not is_alive(record) or time.monotonic() >= deadline:
            stop(record, timeout_s=5.0)
            raise DevEnvError(f"redis-server did not answer PING on 127.0.0.1:{port}; the end "
                              f"of {record.log}:\n{log_tail(record.log, 1500).rstrip()}")
        time.sleep(0.05)
    return record
