"""Processes of the dev environment: started detached, recorded, and stopped by PID only.

Each process is recorded with its PID, its start time and a marker (a string its
command line must contain, such as our nginx config path). Before anything is
signalled the three must still match, so a PID the kernel has since given to
another program is never touched, and nothing is ever stopped by name.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

# psutil adds the boot time (whole seconds, recomputed by each process from the wall
# clock) to the start time in clock ticks, so two processes may see a second apart.
_START_TIME_SLACK_S = 2.0
_POLL_S = 0.05


@dataclass(frozen=True)
class ProcessRecord:
    """One started process: who it is (PID, start time, marker) and where it logs."""

    name: str
    pid: int
    create_time: float
    marker: str
    log: str

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "pid": self.pid, "create_time": self.create_time,
                "marker": self.marker, "log": self.log}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ProcessRecord:
        return cls(name=str(data["name"]), pid=int(data["pid"]),
                   create_time=float(data["create_time"]), marker=str(data["marker"]),
                   log=str(data["log"]))


def spawn(name: str, argv: Sequence[str], *, log_path: Path, marker: str,
          env: Mapping[str, str] | None = None) -> ProcessRecord:
    """Start ``argv`` in its own session, output appended to ``log_path``; never waits.

    ``argv[0]`` must be a path. The process outlives the caller (``modelctl dev up``
    returns while it runs); ``stop`` ends it later, from any process.
    """
    if marker not in " ".join(argv):
        raise ValueError(f"marker {marker!r} is not in the command line of {name}")
    log_path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        # posix_spawn rather than Popen: no Popen object to reap or warn about later.
        pid = os.posix_spawn(
            argv[0], list(argv), dict(os.environ if env is None else env),
            file_actions=[(os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
                          (os.POSIX_SPAWN_DUP2, fd, 1), (os.POSIX_SPAWN_DUP2, fd, 2)],
            setsid=True,
        )
    finally:
        os.close(fd)
    try:
        created = psutil.Process(pid).create_time()
    except psutil.Error:
        created = time.time()  # it is already gone and reaped: is_alive says so
    return ProcessRecord(name=name, pid=pid, create_time=created, marker=marker,
                         log=str(log_path))


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def port_is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _reap(pid: int) -> None:
    """Collect the exit status if ``pid`` is our child (a zombie otherwise lingers)."""
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


def _process(record: ProcessRecord) -> psutil.Process | None:
    """The live process ``record`` describes, or None (gone, a zombie, or someone else)."""
    try:
        proc = psutil.Process(record.pid)
        if abs(proc.create_time() - record.create_time) > _START_TIME_SLACK_S:
            return None  # the PID was reused
        if proc.status() == psutil.STATUS_ZOMBIE:
            _reap(record.pid)
            return None
        cmdline = proc.cmdline()
        # Empty for an instant while our spawn is still inside execve (the start time
        # already matched); any other process has one.
        if cmdline and record.marker not in " ".join(cmdline):
            return None
        return proc
    except (psutil.NoSuchProcess, psutil.ZombieProcess):
        _reap(record.pid)
        return None
    except psutil.AccessDenied:
        return None


def is_alive(record: ProcessRecord) -> bool:
    """True while the recorded process itself (not a PID reuse) is running."""
    return _process(record) is not None


def send_signal(record: ProcessRecord, sig: int) -> bool:
    """Signal the recorded process if it is still the one we started; False if gone."""
    if _process(record) is None:
        return False
    try:
        os.kill(record.pid, sig)
    except ProcessLookupError:
        return False
    return True


def children(record: ProcessRecord) -> list[int]:
    """PIDs of the recorded process's children (nginx's workers); empty if it is gone."""
    proc = _process(record)
    if proc is None:
        return []
    try:
        return [c.pid for c in proc.children() if c.status() != psutil.STATUS_ZOMBIE]
    except psutil.Error:
        return []


def pid_running(pid: int) -> bool:
    """True while ``pid`` runs and is not a zombie (for children we did not record)."""
    try:
        return bool(psutil.Process(pid).status() != psutil.STATUS_ZOMBIE)
    except psutil.Error:
        return False


def wait_gone(record: ProcessRecord, timeout_s: float) -> bool:
    """Wait until the recorded process has exited; False if it still runs at the deadline."""
    deadline = time.monotonic() + timeout_s
    while is_alive(record):
        if time.monotonic() >= deadline:
            return False
        time.sleep(_POLL_S)
    return True


def stop_all(records: Sequence[ProcessRecord], *, sig: int = signal.SIGTERM,
             timeout_s: float = 30.0) -> list[ProcessRecord]:
    """Send ``sig`` to each recorded process still ours, then wait for all of them together;
    SIGKILL any still running after ``timeout_s``. Returns the ones that were running.

    Only the recorded PIDs are signalled, and only after their start time and command
    line are checked.
    """
    signalled = [record for record in records if send_signal(record, sig)]
    deadline = time.monotonic() + timeout_s
    for record in signalled:
        if not wait_gone(record, max(0.0, deadline - time.monotonic())):
            send_signal(record, signal.SIGKILL)
            wait_gone(record, 10.0)
    return signalled


def stop(record: ProcessRecord, *, sig: int = signal.SIGTERM, timeout_s: float = 30.0) -> bool:
    """``stop_all`` for one process: True if it was running."""
    return bool(stop_all([record], sig=sig, timeout_s=timeout_s))


def log_tail(path: str | Path, chars: int = 2000) -> str:
    """The end of a log file, for error messages ('' when it cannot be read)."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - chars))
            return f.read().decode("utf-8", errors="replace")
    except OSError:
        return ""
