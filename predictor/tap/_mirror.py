"""Shadow mirroring in the predictor: answered requests, sampled, copied to a shadow URL.

Fire-and-forget by construction: ``offer`` runs after the client has its answer and
only puts the request on a bounded asyncio queue (or drops it, counted, when the
queue is full); a few worker tasks send from the queue through one small
``httpx.AsyncClient`` pool, each send bounded by ``--shadow_timeout_ms``. A slow,
failing or absent shadow fills the queue and gets requests dropped; it never
holds a request of the primary. Every sampled request ends in exactly one of
``modelctl_shadow_mirrors_total{code}`` (the shadow answered) or
``modelctl_shadow_mirrors_dropped_total{reason}``.

A mirrored copy keeps the path, the query, the body, the content type and the
``x-request-id``, and carries ``x-shadow: true``: the shadow captures it with role
``shadow`` and never mirrors it again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import zlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from predictor.tap._exchange import SHADOW_HEADER, Exchange

if TYPE_CHECKING:
    from predictor._config import ServerConfig
    from predictor._metrics import TapMetrics

logger = logging.getLogger("predictor")

# Concurrent mirrored requests (and pooled connections) per predictor process: enough
# to keep up with a healthy shadow, few enough that a stuck one costs little.
MIRROR_CONCURRENCY = 8


@dataclass(frozen=True)
class MirrorConfig:
    """Where and how much to mirror."""

    url: str
    sample_rate: float = 1.0
    timeout_s: float = 10.0
    max_pending: int = 256
    concurrency: int = MIRROR_CONCURRENCY

    def __post_init__(self) -> None:
        if not self.url.startswith(("http://", "https://")):
            raise ValueError("shadow url must be http(s)://...")
        if not 0.0 <= self.sample_rate <= 1.0:
            raise ValueError(f"sample_rate must be in [0, 1], got {self.sample_rate}")
        if self.timeout_s <= 0 or self.max_pending < 1 or self.concurrency < 1:
            raise ValueError("timeout_s must be > 0, max_pending and concurrency >= 1")

    @classmethod
    def from_server(cls, config: ServerConfig) -> MirrorConfig:
        return cls(url=config.shadow_url.rstrip("/"), sample_rate=config.shadow_sample_rate,
                   timeout_s=config.shadow_timeout_ms / 1000.0,
                   max_pending=config.shadow_max_pending)


def is_sampled(request_id: str, rate: float) -> bool:
    """Whether a request is mirrored: decided by its ID, so every replica (and a retry
    with the same ID) decides the same way."""
    if rate >= 1.0:
        return True
    return zlib.crc32(request_id.encode("utf-8", "replace")) < rate * 2**32


class Mirror:
    """Sends sampled copies of answered requests to the shadow, off the request path."""

    def __init__(self, config: MirrorConfig, metrics: TapMetrics) -> None:
        self.config = config
        self._metrics = metrics
        self._queue: asyncio.Queue[Exchange] | None = None
        self._workers: list[asyncio.Task[None]] = []
        self._client: Any = None
        self._closed = False
        self._sent: dict[int, Any] = {}

    def offer(self, exchange: Exchange) -> None:
        """Queue a copy if it is sampled; a request that is itself a mirror is never sent on."""
        if exchange.is_shadow or not is_sampled(exchange.request_id, self.config.sample_rate):
            return
        if self._closed:
            self._drop("shutdown")
            return
        queue = self._queue if self._queue is not None else self._start()
        try:
            queue.put_nowait(exchange)
        except asyncio.QueueFull:
            self._drop("queue_full")

    def _start(self) -> asyncio.Queue[Exchange]:
        # Built on first use, on the serving event loop (the client binds to it).
        import httpx

        limits = httpx.Limits(max_connections=self.config.concurrency,
                              max_keepalive_connections=self.config.concurrency)
        self._client = httpx.AsyncClient(timeout=self.config.timeout_s, limits=limits,
                                         follow_redirects=False)
        self._queue = asyncio.Queue(maxsize=self.config.max_pending)
        self._workers = [asyncio.get_running_loop().create_task(self._work())
                         for _ in range(self.config.concurrency)]
        return self._queue

    async def _work(self) -> None:
        assert self._queue is not None
        while True:
            exchange = await self._queue.get()
            try:
                await self._send(exchange)
            finally:
                self._queue.task_done()

    async def _send(self, exchange: Exchange) -> None:
        import httpx

        url = self.config.url + exchange.path + (f"?{exchange.query}" if exchange.query else "")
        headers = dict(exchange.headers)
        headers["x-request-id"] = exchange.request_id
        headers[SHADOW_HEADER] = "true"
        try:
            response = await self._client.post(url, content=exchange.body, headers=headers)
        except asyncio.CancelledError:  # close() gave up waiting for this one
            self._drop("shutdown")
            raise
        except httpx.TimeoutException:
            self._drop("timeout")
        except httpx.TransportError as exc:
            reason = "unreachable" if isinstance(exc, httpx.ConnectError) else "error"
            self._drop(reason)
            logger.debug("mirror of %s failed: %s", exchange.request_id, type(exc).__name__)
        except Exception:  # never let one bad send stop a worker
            logger.exception("mirror of %s failed", exchange.request_id)
            self._drop("error")
        else:
            self._count_sent(response.status_code)

    def _count_sent(self, status: int) -> None:
        child = self._sent.get(status)
        if child is None:
            child = self._metrics.mirrors.labels(**self._metrics.labels, code=str(status))
            self._sent[status] = child
        child.inc()

    def _drop(self, reason: str) -> None:
        self._metrics.mirrors_dropped.labels(**self._metrics.labels, reason=reason).inc()

    async def close(self, timeout_s: float) -> None:
        """Stop taking requests; let queued ones go for ``timeout_s``, drop the rest."""
        self._closed = True
        if self._queue is None:
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._queue.join(), timeout=timeout_s)
        for task in self._workers:
            task.cancel()
        await asyncio.gather(*self._workers, return_exceptions=True)
        left = self._queue.qsize()
        if left:
            self._metrics.mirrors_dropped.labels(**self._metrics.labels,
                                                 reason="shutdown").inc(left)
        await self._client.aclose()
