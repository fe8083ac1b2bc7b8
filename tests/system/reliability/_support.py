"""What the promise tests share: how long they run, real predictors, raw HTTP, RSS, probes.

``scaled(ci, soak)`` picks the CI figure, or the soak figure when ``MODELCTL_SOAK=1``
(``make soak``): the same tests, run longer. Predictors are real processes started
from a real local registry; raw HTTP speaks bytes over a socket so that tests can
send what no well-behaved client would; the probe load opens one connection per
request, so that every request ends in exactly one observable outcome.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import socket
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import httpx
import psutil

from tests.support import ManagedProcess, free_port, wait_http_ok

T = TypeVar("T")
SOAK_ENV = "MODELCTL_SOAK"
ROOT = Path(__file__).resolve().parents[3]


def is_soak() -> bool:
    return os.environ.get(SOAK_ENV, "") not in ("", "0")


def scaled(ci: T, soak: T) -> T:
    """The CI figure, or the soak figure under ``MODELCTL_SOAK=1``."""
    return soak if is_soak() else ci


# -- predictors ---------------------------------------------------------------------------
def push_fixed(registry_root: Path, name: str, **options: object) -> int:
    """Push a fixed-latency version with these task options; returns its version."""
    from registry import Registry

    key = hashlib.sha1(json.dumps(options, sort_keys=True).encode()).hexdigest()[:12]
    src = registry_root.parent / f"src-{name}-{key}"
    src.mkdir(exist_ok=True)
    (src / "task.json").write_text(json.dumps(options))
    return Registry.open(str(registry_root)).push(src, name, "fixed-latency").version


@dataclass
class Predictor:
    """A predictor process on loopback."""

    name: str
    port: int
    proc: ManagedProcess
    model_dir: Path
    argv: list[str]
    env: dict[str, str] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def v1_path(self) -> str:
        return f"/v1/models/{self.name}:predict"

    @property
    def v2_path(self) -> str:
        return f"/v2/models/{self.name}/infer"

    def v1(self, instances: list[Any], timeout_s: float = 10.0,
           **kwargs: Any) -> httpx.Response:
        return httpx.post(self.url + self.v1_path, json={"instances": instances},
                          timeout=timeout_s, **kwargs)

    def metrics(self) -> str:
        return httpx.get(f"{self.url}/metrics", timeout=10).text

    def log(self) -> str:
        return self.proc.log_path.read_text(errors="replace")

    def wait_ready(self, timeout_s: float = 60.0) -> Predictor:
        wait_http_ok(f"{self.url}/v2/health/ready", timeout_s=timeout_s, proc=self.proc)
        return self

    def relaunch(self, log_dir: Path, tag: str) -> Predictor:
        """The same command again, on the same port (after the process died)."""
        proc = ManagedProcess(f"{self.name}-{self.port}-{tag}", self.argv, log_dir=log_dir,
                              env=self.env)
        return Predictor(self.name, self.port, proc, self.model_dir, self.argv, self.env)


def launch_predictor(registry_root: Path, name: str, log_dir: Path, *args: str,
                     ref: str = "latest", env: dict[str, str] | None = None,
                     port: int | None = None) -> Predictor:
    """Fetch ``name@ref`` and start a predictor on it; returns at once (not yet ready)."""
    from registry import Registry

    reg = Registry.open(str(registry_root))
    version = reg.resolve(name, ref)
    port = port or free_port()
    model_dir = log_dir / f"{name}-{version}-{port}"
    if not model_dir.exists():
        reg.fetch(name, version, model_dir)
    argv = [sys.executable, "-m", "predictor", "--model_name", name,
            "--model_dir", str(model_dir), "--http_host", "127.0.0.1",
            "--http_port", str(port), "--enable_grpc", "false", *args]
    proc = ManagedProcess(f"{name}-{port}", argv, log_dir=log_dir, env=env, cwd=ROOT)
    return Predictor(name, port, proc, model_dir, argv, env)


# -- memory -------------------------------------------------------------------------------
class RssSampler:
    """Samples a process's resident memory every ``interval_s`` in a thread."""

    def __init__(self, pid: int, interval_s: float = 0.05) -> None:
        self._process = psutil.Process(pid)
        self._interval_s = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rss", daemon=True)
        self.baseline = self._rss()
        self.peak = self.baseline

    def _rss(self) -> int:
        try:
            return int(self._process.memory_info().rss)
        except psutil.Error:
            return 0

    def _run(self) -> None:
        while not self._stop.wait(self._interval_s):
            self.peak = max(self.peak, self._rss())

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self.peak = max(self.peak, self._rss())

    @property
    def growth_mib(self) -> float:
        return (self.peak - self.baseline) / 2**20


# -- raw HTTP -----------------------------------------------------------------------------
@dataclass
class RawResult:
    """What came back on one raw connection."""

    outcome: str  # answered, closed (no bytes), partial, timeout
    status: int | None
    headers: dict[str, str]
    body: bytes
    elapsed_s: float

    def json(self) -> Any:
        return json.loads(self.body)


def _parse_head(data: bytes) -> tuple[int, dict[str, str], int] | None:
    """(status, headers, head length) once the head is complete, else None."""
    end = data.find(b"\r\n\r\n")
    if end < 0:
        return None
    lines = data[:end].decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ", 2)[1])
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return status, headers, end + 4


def raw_exchange(port: int, parts: Sequence[bytes], *, gap_s: float = 0.0,
                 timeout_s: float = 15.0) -> RawResult:
    """Send ``parts`` (``gap_s`` apart, from a thread) and read one response.

    Reading starts at once, so an answer that comes before the client has sent
    everything (a 408 to a slow drip, a 413 to a huge Content-Length) is seen when
    the server sends it, not when the client finishes.
    """
    started = time.monotonic()
    sock = socket.create_connection(("127.0.0.1", port), timeout=timeout_s)
    stop = threading.Event()

    def send() -> None:
        for i, part in enumerate(parts):
            if stop.is_set():
                return
            try:
                sock.sendall(part)
            except OSError:
                return
            if gap_s and i < len(parts) - 1:
                stop.wait(gap_s)

    sender = threading.Thread(target=send, name="raw-send", daemon=True)
    sender.start()
    data = b""
    outcome = "closed"
    try:
        while True:
            remaining = timeout_s - (time.monotonic() - started)
            if remaining <= 0:
                outcome = "timeout"
                break
            sock.settimeout(remaining)
            try:
                chunk = sock.recv(65536)
            except TimeoutError:
                outcome = "timeout"
                break
            except ConnectionResetError:
                chunk = b""
            if not chunk:
                outcome = "closed" if not data else "partial"
                break
            data += chunk
            head = _parse_head(data)
            if head is not None:
                length = int(head[1].get("content-length", "-1"))
                if length >= 0 and len(data) - head[2] >= length:
                    outcome = "answered"
                    break
    finally:
        elapsed = time.monotonic() - started
        stop.set()
        sock.close()
        sender.join(timeout=5)
    head = _parse_head(data)
    if head is None:
        return RawResult(outcome if outcome != "answered" else "partial", None, {}, data,
                         elapsed)
    status, headers, start = head
    return RawResult(outcome, status, headers, data[start:], elapsed)


def http_request(method: str, path: str, body: bytes = b"", *, headers: Sequence[str] = (),
                 content_length: bool = True) -> bytes:
    """The bytes of one HTTP/1.1 request (``headers`` as ``Name: value`` lines)."""
    lines = [f"{method} {path} HTTP/1.1", "Host: 127.0.0.1", *headers]
    if content_length:
        lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


# -- probe load: one connection per request -----------------------------------------------
@dataclass
class Outcome:
    """How one probe request ended (times are ``time.monotonic()``)."""

    index: int
    due: float
    kind: str = "pending"  # answered, refused, reset, partial, timeout
    status: int | None = None
    body: bytes = b""
    ended: float = 0.0

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class ProbeRun:
    outcomes: list[Outcome]
    marks: dict[str, float] = field(default_factory=dict)


async def _probe_one(port: int, request: bytes, outcome: Outcome, timeout_s: float) -> None:
    data = b""
    try:
        async with asyncio.timeout(timeout_s):
            try:
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
            except OSError:
                outcome.kind = "refused"
                return
            try:
                writer.write(request)
                await writer.drain()
                while chunk := await reader.read(65536):
                    data += chunk
            except OSError:
                pass  # reset: judged by what arrived
            finally:
                writer.close()
    except TimeoutError:
        outcome.kind = "timeout"
        return
    finally:
        outcome.ended = time.monotonic()
    head = _parse_head(data)
    if head is None:
        outcome.kind = "reset" if not data else "partial"
        return
    status, headers, start = head
    body = data[start:]
    if len(body) != int(headers.get("content-length", "-1")):
        outcome.kind = "partial"
        return
    outcome.kind, outcome.status, outcome.body = "answered", status, body


def probe_load(port: int, requests: Sequence[bytes], rate: float, *,
               timeout_s: float = 10.0,
               actions: Sequence[tuple[float, str, Any]] = ()) -> ProbeRun:
    """Send ``requests`` open-loop at ``rate`` per second, each on its own connection
    (``Connection: close``); ``actions`` are ``(at_s, mark, callable)`` run on schedule
    (e.g. a signal), their times recorded in ``marks``."""
    run = ProbeRun([])

    async def main() -> None:
        loop = asyncio.get_running_loop()
        t0 = time.monotonic() + 0.05
        for at_s, mark, action in actions:
            def fire(mark: str = mark, action: Any = action) -> None:
                run.marks[mark] = time.monotonic()
                action()
            loop.call_at(loop.time() + (t0 - time.monotonic()) + at_s, fire)
        tasks = []
        for i, request in enumerate(requests):
            due = t0 + i / rate
            delay = due - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            outcome = Outcome(i, due)
            run.outcomes.append(outcome)
            tasks.append(asyncio.create_task(_probe_one(port, request, outcome, timeout_s)))
        await asyncio.gather(*tasks)

    asyncio.run(main())
    return run


def echo_request(path: str, tag: str) -> bytes:
    """A V1 request whose one instance is ``tag`` (fixed-latency echoes it back)."""
    body = json.dumps({"instances": [tag]}).encode()
    return http_request("POST", path, body, headers=("Content-Type: application/json",
                                                     "Connection: close"))


# -- figures for docs/RELIABILITY.md ------------------------------------------------------
FIGURES: dict[str, object] = {}


def record(name: str, value: object) -> None:
    """Keep a measured figure; the session prints them all at the end (conftest)."""
    FIGURES[name] = value


def add(name: str, amount: int = 1) -> None:
    current = FIGURES.get(name, 0)
    FIGURES[name] = (current if isinstance(current, int) else 0) + amount
