"""The frontend role: KServe's endpoints and validation as in-process, then the queue.

``QueueFrontend`` is a ``BatchingModel`` whose ``_infer`` enqueues instead of batching:
decoding, validation (``handler.parse``: the same 4xx, before anything is enqueued),
request IDs, error mapping and V1/V2/gRPC encoding are the in-process code, unchanged.
The handler is constructed but never loaded: no weights. Readiness follows Redis
(and the reply subscription), never the workers, who may be scaled to zero.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from typing import Any

from predictor._config import ServerConfig
from predictor._errors import DeadlineExpired, Overloaded, QueueUnavailable
from predictor._http import request_timeout_ms
from predictor._model import BatchingModel
from predictor._protocol import DecodedRequest
from predictor.handlers._base import Handler
from predictor.queue._backpressure import admit, depth_of, parse_workers, predicted_wait_s
from predictor.queue._client import connect, redis_errors, shown
from predictor.queue._codec import Entry, encode_entry, results_of
from predictor.queue._keys import QueueKeys
from predictor.queue._metrics import QueueMetrics
from predictor.queue._replies import ReplyRouter
from predictor.queue._results import ResultStore

logger = logging.getLogger("predictor.queue")

# How long one reading of the queue's depth and the workers' info serves admission.
DEPTH_CACHE_S = 0.1
RETRY_AFTER_UNAVAILABLE_S = 2.0


class QueueFrontend(BatchingModel):
    """A KServe model that answers from the queue's workers."""

    def __init__(self, config: ServerConfig, handler: Handler, version: str) -> None:
        super().__init__(config, handler, version)
        self.keys = QueueKeys(config.model_name, version)
        self.frontend_id = uuid.uuid4().hex[:16]
        self.queue_metrics = QueueMetrics.create(config.model_name, version, config.role)
        self._client: Any = None
        self._router: ReplyRouter | None = None
        self._start_lock: asyncio.Lock | None = None
        self._depth: tuple[float, int, list[Any]] | None = None  # (read at, depth, workers)
        self._depth_lock: asyncio.Lock | None = None
        self._enqueued_since_read = 0
        self._pinged: tuple[float, bool] = (0.0, False)

    def load(self) -> bool:
        """No weights: the frontend only validates. Connecting waits for the event loop."""
        self.ready = True
        return True

    async def _link(self) -> ReplyRouter:
        if self._router is None:
            if self._start_lock is None:
                self._start_lock = asyncio.Lock()
            async with self._start_lock:
                if self._router is None:
                    self._client = connect(self.config.queue_url, socket_timeout_s=2.0)
                    results = ResultStore(self._client, self.keys, self.config.queue_result_ttl_s)
                    router = ReplyRouter(self._client, self.keys,
                                         self.keys.reply(self.frontend_id), results)
                    await router.start()
                    logger.info("frontend %s on %s, stream %s", self.frontend_id,
                                shown(self.config.queue_url), self.keys.stream)
                    self._router = router
        return self._router

    async def healthy(self) -> bool:
        """Ready when Redis answers a PING (at most once a second) and replies can arrive."""
        if not self.ready:
            return False
        router = await self._link()
        now = time.monotonic()
        if now - self._pinged[0] > 1.0:
            try:
                ok = bool(await self._client.ping())
            except redis_errors():
                ok = False
            self._pinged = (now, ok)
        return self._pinged[1] and router.is_subscribed

    async def drain(self) -> None:
        """SIGTERM: readiness false; the requests in hand are answered, then the link closes."""
        self.ready = False
        if self._router is None:
            return
        deadline = time.monotonic() + self.config.drain_timeout_s
        while self._router.waiting and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        await self._router.close()
        with contextlib.suppress(Exception):
            await self._client.aclose()

    async def _infer(self, request: DecodedRequest, headers: dict[str, str],
                     started: float) -> list[Any]:
        timeout_ms = request_timeout_ms(headers, self.config.request_timeout_ms)
        deadline = started + timeout_ms / 1000.0
        for instance in request.instances:  # the in-process validation: 4xx, never enqueued
            self.handler.parse(instance, request.options)
        router = await self._link()
        if not router.is_subscribed:
            self._unavailable("the queue's reply channel is not subscribed (Redis unreachable)")
        await self._admit(len(request.instances), deadline)
        request_id = uuid.uuid4().hex
        now_ms = time.time() * 1000.0
        entry = Entry(request_id, headers.get("x-request-id") or request.request_id or "",
                      list(request.instances), dict(request.options.values),
                      deadline_ms=now_ms + (deadline - time.monotonic()) * 1000.0,
                      timeout_ms=timeout_ms, enqueued_ms=now_ms, reply_to=router.channel)
        future = router.expect(request_id)  # before XADD: a fast answer is never missed
        try:
            try:
                # XADD with no MAXLEN: unread entries are never trimmed.
                await self._client.xadd(self.keys.stream, encode_entry(entry))
            except redis_errors():
                self._unavailable("Redis did not take the request")
            self._enqueued_since_read += 1
            try:
                record = await asyncio.wait_for(future, max(0.0, deadline - time.monotonic()))
            except TimeoutError:
                waited_ms = (time.monotonic() - started) * 1000.0
                raise DeadlineExpired(timeout_ms, waited_ms) from None
            self.queue_metrics.end_to_end.labels(**self.queue_metrics.labels).observe(
                time.time() - now_ms / 1000.0)
        finally:
            router.forget(request_id)
        return results_of(record)

    def _unavailable(self, message: str) -> None:
        self.queue_metrics.unavailable.labels(**self.queue_metrics.labels).inc()
        raise QueueUnavailable(message, RETRY_AFTER_UNAVAILABLE_S)

    async def _admit(self, items: int, deadline: float) -> None:
        now = time.monotonic()
        if self._depth is None or now - self._depth[0] > DEPTH_CACHE_S:
            if self._depth_lock is None:
                self._depth_lock = asyncio.Lock()
            async with self._depth_lock:  # one reading at a time; the others share it
                if self._depth is None or time.monotonic() - self._depth[0] > DEPTH_CACHE_S:
                    await self._read_depth(now)
        assert self._depth is not None
        _, depth, workers = self._depth
        depth += self._enqueued_since_read
        wait_s = predicted_wait_s(depth, items, workers, time.time())
        verdict = admit(depth, items, self.config.max_queue_size, wait_s, deadline - now)
        if verdict.reason == "queue_full":
            raise Overloaded("queue_full", verdict.retry_after_s,
                             f"the queue is full ({depth} requests waiting, the limit is "
                             f"{self.config.max_queue_size})")
        if verdict.reason == "deadline":
            raise Overloaded("deadline", verdict.retry_after_s,
                             f"the request cannot finish within its deadline: predicted "
                             f"{(verdict.predicted_wait_s or 0) * 1000:.0f} ms, allowed "
                             f"{max(0.0, deadline - now) * 1000:.0f} ms")

    async def _read_depth(self, now: float) -> None:
        """Depth (lag + pending, XINFO GROUPS) and the workers' info, cached briefly."""
        try:
            groups = await self._client.xinfo_groups(self.keys.stream)
        except redis_errors():
            self._unavailable("Redis did not answer XINFO GROUPS")
        except Exception:  # no stream yet (no worker has ever started): depth 0
            groups = []
        try:
            workers = parse_workers(await self._client.hgetall(self.keys.workers))
        except redis_errors():
            self._unavailable("Redis did not answer HGETALL")
        depth, lag, pending = depth_of(groups, QueueKeys.GROUP)
        labels = self.queue_metrics.labels
        self.queue_metrics.depth.labels(**labels).set(depth)
        self.queue_metrics.lag.labels(**labels).set(lag)
        self.queue_metrics.pending.labels(**labels).set(pending)
        self._depth = (now, depth, workers)
        self._enqueued_since_read = 0
