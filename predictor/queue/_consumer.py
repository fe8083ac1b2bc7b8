"""What every queue worker does with the version's stream, whatever it serves: read new
entries while it has room, claim entries whose worker stopped, and dead-letter an entry
delivered too often. ``QueueWorker`` (batches) and ``LLMQueueWorker`` (generations) say
what serving one entry means, and how a dead-lettered request is answered.

Redis facts (Redis's command documentation; the worker module cites the rest):

- ``XREADGROUP GROUP workers <consumer> ... STREAMS key >`` delivers entries never
  delivered to the group and records them as pending for this consumer until ``XACK``;
  with ``BLOCK`` it returns on the first entry.
- ``XGROUP CREATE key workers 0 MKSTREAM`` creates the group reading from the start (and
  the stream if missing); it fails with BUSYGROUP when the group exists.
- ``XAUTOCLAIM key group consumer min-idle-time start COUNT n`` transfers pending
  entries idle longer than min-idle-time, returns a cursor for the next call, and (not
  being JUSTID) increments each claimed entry's delivery counter.
- ``XPENDING key group IDLE t start end count`` (the extended form) reports an entry's
  delivery count.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from predictor._config import ServerConfig
from predictor._errors import DeadLettered
from predictor.queue._client import redis_errors
from predictor.queue._codec import request_id_of
from predictor.queue._keys import QueueKeys

logger = logging.getLogger("predictor.queue")

READ_BLOCK_MS = 500


class StreamConsumer:
    """Consumer ``consumer`` of group ``workers`` on one version's stream, holding at most
    ``room`` entries at once."""

    def __init__(self, config: ServerConfig, client: Any, keys: QueueKeys, consumer: str,
                 *, room: int) -> None:
        self.config = config
        self._client = client
        self.keys = keys
        self.consumer = consumer
        self._room = room
        self._in_hand: dict[str, asyncio.Task[None]] = {}
        self._freed = asyncio.Event()
        self._stopping = False

    # -- what a worker says ----------------------------------------------------------------
    async def _serve(self, entry_id: str, fields: Any, alone: bool) -> None:
        """Serve one entry (``alone``: a claimed one) and acknowledge it once answered."""
        raise NotImplementedError

    async def _claimed(self, entry_id: str, fields: Any, deliveries: int) -> None:
        """An entry claimed from a stopped worker, under the delivery limit."""
        raise NotImplementedError

    async def _answer_dead(self, request_id: str, fields: Any, entry_id: str,
                           error: DeadLettered) -> None:
        """Answer a dead-lettered request with ``error`` and acknowledge its entry."""
        raise NotImplementedError

    def _dead_lettered(self) -> None:
        """Counted, where the worker counts it."""

    # -- the group -------------------------------------------------------------------------
    async def _create_group(self) -> None:
        import redis.exceptions as rex

        try:
            await self._client.xgroup_create(self.keys.stream, QueueKeys.GROUP, id="0",
                                             mkstream=True)
        except rex.ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise

    async def _read_loop(self) -> None:
        while not self._stopping:
            room = self._room - len(self._in_hand)
            if room <= 0:
                self._freed.clear()
                await self._freed.wait()
                continue
            try:
                reply = await self._client.xreadgroup(
                    QueueKeys.GROUP, self.consumer, {self.keys.stream: ">"}, count=room,
                    block=READ_BLOCK_MS)
            except redis_errors() as exc:
                logger.warning("XREADGROUP failed (%s); retrying", type(exc).__name__)
                await asyncio.sleep(0.5)
                continue
            for _stream, entries in reply or []:
                for entry_id, fields in entries:  # taken even when stopping: they are ours
                    self._take(_text(entry_id), fields, alone=False)

    def _take(self, entry_id: str, fields: Any, *, alone: bool) -> asyncio.Task[None]:
        task = asyncio.get_running_loop().create_task(self._serve(entry_id, fields, alone))
        self._in_hand[entry_id] = task

        def done(_: Any) -> None:
            self._in_hand.pop(entry_id, None)
            self._freed.set()

        task.add_done_callback(done)
        return task

    async def _claim_loop(self) -> None:
        idle_ms = self.config.queue_claim_timeout_ms
        poll_s = min(1.0, max(0.05, idle_ms / 4000.0))
        cursor: Any = "0-0"
        while not self._stopping:
            try:
                cursor, claimed, *_deleted = await self._client.xautoclaim(
                    self.keys.stream, QueueKeys.GROUP, self.consumer, idle_ms,
                    start_id=cursor, count=1)
            except redis_errors() as exc:
                logger.warning("XAUTOCLAIM failed (%s)", type(exc).__name__)
                await asyncio.sleep(poll_s)
                continue
            if not claimed:
                if _text(cursor) == "0-0":
                    await asyncio.sleep(poll_s)
                continue
            entry_id, fields = _text(claimed[0][0]), claimed[0][1]
            if entry_id in self._in_hand:
                continue  # our own, still queued here: claim timeout too short for the load
            deliveries = await self._deliveries(entry_id)
            if deliveries > self.config.queue_max_deliveries:
                await self._dead_letter(entry_id, fields, deliveries)
                continue
            await self._claimed(entry_id, fields, deliveries)

    async def _deliveries(self, entry_id: str) -> int:
        try:
            rows = await self._client.xpending_range(self.keys.stream, QueueKeys.GROUP,
                                                     entry_id, entry_id, 1)
        except redis_errors():
            return 0
        return int(rows[0]["times_delivered"]) if rows else 0

    async def _dead_letter(self, entry_id: str, fields: Any, deliveries: int) -> None:
        request_id = request_id_of(fields)
        dead = {**fields, "original_id": entry_id, "deliveries": str(deliveries),
                "dead_lettered_by": self.consumer}
        try:
            await self._client.xadd(self.keys.dead, dead)
            if request_id is not None:
                message = (f"request {request_id} was dead-lettered after {deliveries} "
                           f"deliveries (the limit is {self.config.queue_max_deliveries}): "
                           "each worker that ran it stopped before answering")
                await self._answer_dead(request_id, fields, entry_id, DeadLettered(message))
            else:
                await self._client.xack(self.keys.stream, QueueKeys.GROUP, entry_id)
        except redis_errors() as exc:
            logger.warning("could not dead-letter %s (%s)", entry_id, type(exc).__name__)
            return
        self._dead_lettered()
        logger.warning("dead-lettered %s (request %s) after %d deliveries", entry_id,
                       request_id, deliveries)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
