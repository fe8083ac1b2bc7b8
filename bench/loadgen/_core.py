"""The open-loop engine: one event loop sends requests on schedule over a keep-alive pool.

No task per request: the scheduler writes pre-built request bytes straight to an idle
connection's transport, and each connection's protocol records its response when the
``httptools`` parser completes it. That keeps the per-request cost to a few tens of
microseconds, so the generator can share two cores with the server it measures.

A request is "due" at ``t0 + offset``; its latency counts from then, not from when it
went out, so a generator or a server that falls behind cannot hide queueing
(no coordinated omission). How late each request actually went out is its send lag.
"""

from __future__ import annotations

import asyncio
import time
from array import array
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import cast

import httptools

from bench.loadgen._spec import Target

PENDING = 0
TIMEOUT = -1
CONN_ERROR = -2
_BURST = 256  # due requests sent before yielding to read responses
_MAX_IDLE_S = 2.0  # reuse no connection idle longer: servers close idle ones (uvicorn: 5 s)
_MIN_SLEEP_S = 0.001  # the loop's timer resolution: a shorter sleep spins the CPU


@dataclass
class Records:
    """Raw per-request outcomes of one engine, indexed like its offsets."""

    send_lag_s: array[float]
    latency_s: array[float]
    status: array[int]
    max_in_flight: int
    connections_opened: int


class _Conn(asyncio.Protocol):
    """One keep-alive HTTP/1.1 connection carrying one request at a time."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.req = -1
        self.status_seen = 0
        self.is_idle = False
        self.idle_since = 0.0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement asyncio.Transport without subclassing it
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            self.engine.fail(self)

    def on_headers_complete(self) -> None:
        self.status_seen = self.parser.get_status_code()

    def on_message_complete(self) -> None:
        self.engine.complete(self, self.parser.get_status_code(), self.parser.should_keep_alive())

    def connection_lost(self, exc: Exception | None) -> None:
        self.engine.lost(self)


class Engine:
    """Send ``offsets[j]``-scheduled requests from ``t0`` and record each outcome.

    Request ``j`` of this engine is global request ``first + j * step`` (workers
    interleave one schedule) and its bytes come from ``request_for(global index)``.
    """

    def __init__(
        self,
        target: Target,
        offsets: Sequence[float],
        request_for: Callable[[int], bytes],
        *,
        timeout_s: float,
        max_connections: int,
        first: int = 0,
        step: int = 1,
    ) -> None:
        self.target = target
        self.offsets = list(offsets)
        self.request_for = request_for
        self.timeout_s = timeout_s
        self.max_connections = max_connections
        self.first, self.step = first, step
        n = len(self.offsets)
        self.send_lag = array("d", [float("nan")]) * n
        self.latency = array("d", [float("nan")]) * n
        self.status = array("h", [PENDING]) * n
        self.conn_of: list[_Conn | None] = [None] * n
        self.idle: list[_Conn] = []
        self.pending: deque[tuple[int, bytes]] = deque()  # waiting for the connection cap
        self.deadlines: deque[tuple[float, int]] = deque()
        self.connecting: set[asyncio.Task[None]] = set()
        self.conns: set[_Conn] = set()
        self.n_conns = 0  # open or opening
        self.opened = 0
        self.sent = self.done = self.max_in_flight = 0
        self.t0 = 0.0
        self.loop: asyncio.AbstractEventLoop | None = None
        self.all_done: asyncio.Future[None] | None = None
        self.sweeper: asyncio.TimerHandle | None = None

    async def run(self, t0: float) -> Records:
        """Run the schedule from monotonic time ``t0``; return when every request ended."""
        self.loop = asyncio.get_running_loop()
        self.t0 = t0
        self.all_done = self.loop.create_future()
        self.sweeper = self.loop.call_later(self._sweep_interval(), self._sweep)
        try:
            await self._schedule()
            if self.done < len(self.offsets):
                await self.all_done
        finally:
            self.sweeper.cancel()
            for task in list(self.connecting):
                task.cancel()
            for conn in list(self.conns):
                if conn.transport is not None:
                    conn.transport.close()
            await asyncio.sleep(0)  # let the transports report their close
        return Records(self.send_lag, self.latency, self.status, self.max_in_flight, self.opened)

    async def _schedule(self) -> None:
        offsets, n, t0, clock = self.offsets, len(self.offsets), self.t0, time.monotonic
        j = 0
        while j < n:
            due = clock() - t0
            burst_end = min(n, j + _BURST)
            while j < burst_end and offsets[j] <= due:
                self._dispatch(j)
                j += 1
            if j < n:
                delay = offsets[j] - (clock() - t0)
                await asyncio.sleep(max(delay, _MIN_SLEEP_S) if delay > 0 else 0)

    def _dispatch(self, j: int) -> None:
        # Built here, so a failing body_for stops the run instead of posing as a conn_error.
        data = self.request_for(self.first + j * self.step)
        now = time.monotonic()
        self.sent += 1
        in_flight = self.sent - self.done
        if in_flight > self.max_in_flight:
            self.max_in_flight = in_flight
        self.deadlines.append((now + self.timeout_s, j))
        idle = self.idle
        if idle and now - idle[-1].idle_since > _MAX_IDLE_S:
            # The server may be closing them right now; the stack is newest last.
            for conn in idle:
                conn.is_idle = False
                self._close(conn)
            idle.clear()
        if idle:
            conn = idle.pop()
            conn.is_idle = False
            self._send(conn, j, data)
        elif self.n_conns < self.max_connections:
            self._connect(j, data)
        else:
            self.pending.append((j, data))

    def _send(self, conn: _Conn, j: int, data: bytes) -> None:
        conn.req = j
        conn.status_seen = 0
        self.conn_of[j] = conn
        self.send_lag[j] = time.monotonic() - self.t0 - self.offsets[j]
        assert conn.transport is not None
        conn.transport.write(data)

    def _connect(self, j: int, data: bytes) -> None:
        assert self.loop is not None
        self.n_conns += 1
        # Overwritten once connected; kept if the connection fails.
        self.send_lag[j] = time.monotonic() - self.t0 - self.offsets[j]
        task = self.loop.create_task(self._open(j, data))
        self.connecting.add(task)
        task.add_done_callback(self._opened)

    def _opened(self, task: asyncio.Task[None]) -> None:
        self.connecting.discard(task)
        # A bug here must fail the run, not pass as a timeout.
        if task.cancelled() or self.all_done is None or self.all_done.done():
            return
        if task.exception() is not None:
            self.all_done.set_exception(cast(BaseException, task.exception()))

    async def _open(self, j: int, data: bytes) -> None:
        assert self.loop is not None
        target = self.target
        try:
            _, conn = await self.loop.create_connection(
                lambda: _Conn(self), target.host, target.port
            )
        except OSError:
            self.n_conns -= 1
            self._finish(j, CONN_ERROR)
            self._connect_for_pending()
            return
        self.opened += 1
        self.conns.add(conn)
        if self.status[j] == PENDING:
            self._send(conn, j, data)
        else:  # it timed out while the connection was being made
            self._release(conn)

    def _release(self, conn: _Conn) -> None:
        while self.pending:
            j, data = self.pending.popleft()
            if self.status[j] == PENDING:
                self._send(conn, j, data)
                return
        conn.is_idle = True
        conn.idle_since = time.monotonic()
        self.idle.append(conn)

    def _connect_for_pending(self) -> None:
        while self.pending and self.n_conns < self.max_connections:
            j, data = self.pending.popleft()
            if self.status[j] == PENDING:
                self._connect(j, data)

    def _finish(self, j: int, code: int) -> None:
        if self.status[j] != PENDING:
            return
        self.status[j] = code
        self.latency[j] = time.monotonic() - self.t0 - self.offsets[j]
        self.conn_of[j] = None
        self.done += 1
        if self.done == len(self.offsets) and self.all_done and not self.all_done.done():
            self.all_done.set_result(None)

    def complete(self, conn: _Conn, code: int, keep_alive: bool) -> None:
        """A whole response arrived on ``conn``."""
        j, conn.req = conn.req, -1
        if j < 0:  # an answer nobody asked for: the connection is out of step
            self._close(conn)
            return
        self._finish(j, code)
        if keep_alive:
            self._release(conn)
        else:
            self._close(conn)

    def fail(self, conn: _Conn) -> None:
        """The response on ``conn`` could not be parsed."""
        j, conn.req = conn.req, -1
        if j >= 0:
            self._finish(j, CONN_ERROR)
        self._close(conn)

    def lost(self, conn: _Conn) -> None:
        """``conn`` closed; its request (if any) ends with what was seen of the answer."""
        self.n_conns -= 1
        self.conns.discard(conn)
        if conn.is_idle:
            conn.is_idle = False
            self.idle.remove(conn)
        j, conn.req = conn.req, -1
        if j >= 0:
            # A close after the status line is an answer whose body ran to EOF.
            self._finish(j, conn.status_seen or CONN_ERROR)
        self._connect_for_pending()

    def _close(self, conn: _Conn) -> None:
        if conn.transport is not None:
            conn.transport.close()

    def _sweep(self) -> None:
        assert self.loop is not None
        now = time.monotonic()
        deadlines = self.deadlines
        while deadlines and deadlines[0][0] <= now:
            _, j = deadlines.popleft()
            if self.status[j] != PENDING:
                continue
            conn = self.conn_of[j]
            self._finish(j, TIMEOUT)
            if conn is not None:
                conn.req = -1  # nothing may land on it now
                if conn.transport is not None:
                    conn.transport.abort()
        self.sweeper = self.loop.call_later(self._sweep_interval(), self._sweep)

    def _sweep_interval(self) -> float:
        return min(0.01, self.timeout_s / 20)
