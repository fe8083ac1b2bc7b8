"""The frontend's side of the results: one Pub/Sub subscription per process, a future per
waiting request, and a sweep of the result keys for notifications that were missed.

Pub/Sub is fire and forget: "messages are not stored and a client that is not connected
at that moment never sees them". So the router subscribes before the frontend enqueues
anything (``is_subscribed`` gates enqueueing), and every ``sweep_interval_s`` it reads
(MGET) the result keys of requests that have waited longer than that; after a lost
connection it resubscribes and sweeps every waiter at once.

The router counts as subscribed only once Redis has confirmed the subscription (the
``subscribe`` reply), not when the command was sent. On Redis Cluster it subscribes with
SSUBSCRIBE (sharded Pub/Sub, Redis 7.0+): the channel carries the version's hash tag, so
the subscription, the workers' SPUBLISH and the version's stream share one shard, where
classic PUBLISH is broadcast to every node of the cluster.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any

from predictor.queue._client import redis_errors, uses_sharded_pubsub
from predictor.queue._codec import decode_record
from predictor.queue._keys import QueueKeys
from predictor.queue._results import ResultStore

logger = logging.getLogger("predictor.queue")


class ReplyRouter:
    """Routes result notifications on ``channel`` to the requests waiting for them."""

    def __init__(self, client: Any, keys: QueueKeys, channel: str, results: ResultStore, *,
                 sweep_interval_s: float = 0.5, clock: Any = time.monotonic) -> None:
        self._client = client
        self._keys = keys
        self.channel = channel
        self._results = results
        self._sweep_interval_s = sweep_interval_s
        self._clock = clock
        self._waiters: dict[str, tuple[asyncio.Future[dict[str, Any]], float]] = {}
        self._subscribed = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._resweep = asyncio.Event()

    @property
    def is_subscribed(self) -> bool:
        return self._subscribed.is_set()

    @property
    def waiting(self) -> int:
        return len(self._waiters)

    async def start(self, timeout_s: float = 2.0) -> None:
        """Start listening; wait up to ``timeout_s`` for the first subscription."""
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self._listen(), name="queue-replies"),
                       loop.create_task(self._sweep(), name="queue-sweep")]
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._subscribed.wait(), timeout_s)

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    def expect(self, request_id: str) -> asyncio.Future[dict[str, Any]]:
        """Register a waiter (before the request is enqueued)."""
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._waiters[request_id] = (future, self._clock())
        return future

    def forget(self, request_id: str) -> None:
        self._waiters.pop(request_id, None)

    def _resolve(self, raw: bytes | str) -> None:
        try:
            record = decode_record(raw)
        except ValueError:
            logger.warning("ignoring a message on %s that is not a result record", self.channel)
            return
        waiter = self._waiters.get(str(record.get("request_id")))
        if waiter is not None and not waiter[0].done():
            waiter[0].set_result(record)  # the first answer wins; later ones are ignored

    async def _listen(self) -> None:
        backoff_s = 0.1
        sharded = uses_sharded_pubsub(self._client)
        while True:
            pubsub = self._client.pubsub(ignore_subscribe_messages=False)
            try:
                await self._subscribe(pubsub, sharded)
                self._subscribed.set()
                self._resweep.set()  # anything published while we were away
                backoff_s = 0.1
                while True:
                    if not pubsub.subscribed:  # the client dropped it (a shard that moved)
                        raise ConnectionError("the reply subscription was dropped")
                    self._handle(await self._next(pubsub, sharded, 1.0))
            except asyncio.CancelledError:
                raise
            except redis_errors() as exc:
                if self._subscribed.is_set():
                    logger.warning("lost the reply subscription (%s); resubscribing",
                                   type(exc).__name__)
                self._subscribed.clear()
            except Exception:
                logger.exception("reply listener failed; resubscribing")
                self._subscribed.clear()
            finally:
                with contextlib.suppress(Exception):
                    await pubsub.aclose()
            await asyncio.sleep(backoff_s)
            # Capped at 1 s: a Sentinel failover takes a few seconds, and every request
            # meanwhile is refused (503) until the subscription is back.
            backoff_s = min(1.0, backoff_s * 2)

    async def _subscribe(self, pubsub: Any, sharded: bool, timeout_s: float = 2.0) -> None:
        """Subscribe and wait for Redis's confirmation (TimeoutError without one)."""
        if sharded:
            await pubsub.ssubscribe(self.channel)
        else:
            await pubsub.subscribe(self.channel)
        deadline = self._clock() + timeout_s
        while (left := deadline - self._clock()) > 0:
            message = await self._next(pubsub, sharded, min(left, 0.5), confirmations=True)
            if message is not None and message.get("type") in ("subscribe", "ssubscribe"):
                return
            self._handle(message)
        raise TimeoutError("Redis did not confirm the reply subscription")

    @staticmethod
    async def _next(pubsub: Any, sharded: bool, timeout_s: float, *,
                    confirmations: bool = False) -> dict[str, Any] | None:
        read = pubsub.get_sharded_message if sharded else pubsub.get_message
        message: dict[str, Any] | None = await read(
            ignore_subscribe_messages=not confirmations, timeout=timeout_s)
        return message

    def _handle(self, message: dict[str, Any] | None) -> None:
        if message is not None and message.get("type") in ("message", "smessage"):
            self._resolve(message["data"])

    async def _sweep(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._resweep.wait(), self._sweep_interval_s)
            everyone = self._resweep.is_set()
            self._resweep.clear()
            now = self._clock()
            due = [rid for rid, (future, since) in list(self._waiters.items())
                   if not future.done() and (everyone or now - since >= self._sweep_interval_s)]
            for start in range(0, len(due), 256):
                try:
                    found = await self._results.fetch(due[start:start + 256])
                except redis_errors():
                    break
                for raw in found.values():
                    self._resolve(raw)
