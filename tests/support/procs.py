"""Start real processes on loopback, poll them with deadlines, stop them by PID."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import ssl
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import httpx

T = TypeVar("T")


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for(
    check: Callable[[], T | None],
    *,
    timeout_s: float,
    interval_s: float = 0.05,
    what: str = "condition",
) -> T:
    """Poll ``check`` until it returns something truthy, or fail after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    last_exc: BaseException | None = None
    while time.monotonic() < deadline:
        try:
            value = check()
        except Exception as exc:
            last_exc = exc
            value = None
        if value:
            return value
        time.sleep(interval_s)
    raise TimeoutError(f"timed out after {timeout_s}s waiting for {what}: {last_exc!r}")


def tls_context(ca_file: str, cert: tuple[str, str]) -> ssl.SSLContext:
    """A client's TLS: trust ``ca_file``, present ``cert`` (certificate, key). One context
    for both: httpx ignores ``cert=`` when ``verify`` is a path (its create_ssl_context
    returns early), and the client would go anonymous."""
    context = ssl.create_default_context(cafile=ca_file)
    context.load_cert_chain(*cert)
    return context


def wait_http_ok(url: str, *, timeout_s: float = 60.0, proc: ManagedProcess | None = None,
                 verify: Any = True, cert: tuple[str, str] | None = None) -> None:
    """Poll ``url`` until it answers 200 (and fail fast if ``proc`` died); ``verify`` is
    httpx's (a CA file or False), ``cert`` a client certificate and key."""
    if isinstance(verify, str) and cert is not None:
        verify, cert = tls_context(verify, cert), None

    def check() -> bool:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"{proc.name} exited with {proc.poll()}:\n{proc.output_tail()}")
        with httpx.Client(verify=verify, cert=cert, timeout=2.0) as http:
            return http.get(url).status_code == 200

    deadline = time.monotonic() + timeout_s
    while True:
        try:
            if check():
                return
        except RuntimeError:
            raise
        except Exception:
            pass
        if time.monotonic() > deadline:
            tail = proc.output_tail() if proc else ""
            raise TimeoutError(f"{url} not ready after {timeout_s}s\n{tail}")
        time.sleep(0.1)


class ManagedProcess:
    """A child process started for a test and stopped by its own PID (and group)."""

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        *,
        log_dir: Path,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
    ) -> None:
        self.name = name
        self.argv = list(argv)
        self.log_path = log_dir / f"{name}.log"
        full_env = dict(os.environ)
        full_env.update(env or {})
        self._log = open(self.log_path, "wb")  # noqa: SIM115 - closed in stop()
        self.popen = subprocess.Popen(
            self.argv,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env=full_env,
            cwd=cwd,
            start_new_session=True,
        )
        self.pid = self.popen.pid

    def poll(self) -> int | None:
        return self.popen.poll()

    def output_tail(self, chars: int = 4000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def signal(self, sig: int) -> None:
        if self.popen.poll() is None:
            os.kill(self.pid, sig)

    def wait(self, timeout_s: float) -> int:
        return self.popen.wait(timeout=timeout_s)

    def stop(self, timeout_s: float = 15.0) -> int | None:
        """SIGTERM, wait, then SIGKILL the process group it leads; never anything else."""
        if self.popen.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.pid, signal.SIGTERM)
            try:
                self.popen.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.pid, signal.SIGKILL)
                self.popen.wait(timeout=10)
        self._log.close()
        return self.popen.returncode
