"""The worker role for task ``llm``: take requests from the version's stream, generate
each in the shared continuous batch, and write its pieces to its token stream as they
come (``_tokens``).

Reading, claiming and dead-lettering are every queue worker's
(``predictor.queue._consumer.StreamConsumer``, which cites the Redis commands), with two
differences a generation needs:

- **Heartbeats.** A generation outlives ``--queue_claim_timeout_ms``, and ``XAUTOCLAIM``
  takes any entry idle that long. So the worker re-claims its own entries every third of
  the timeout with ``XCLAIM ... JUSTID``, which resets their idle time and, with JUSTID,
  "does not increment the attempt counter" (Redis's XCLAIM documentation). Another
  worker claims an entry only when its worker stopped (SIGKILL, a lost node, a hang).
- **No result key.** The answer is the token stream: pieces in order, each marked with
  this delivery's attempt, the last with its finish reason (or an error). The entry is
  acknowledged once the last piece stands. A claimed request starts again from its first
  token under a new attempt; the frontend never splices two attempts.

Each piece is written with the stream's expiry and a look at the request's cancel key in
one pipeline: a client that went away stops its sequence within a token.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from typing import Any

from predictor._errors import DeadLettered, DeadlineExpired, PredictorError
from predictor.llm._model import LLMModel, Piece
from predictor.llm.queue._tokens import error_fields, piece_fields, request_of
from predictor.queue._client import execute_pipeline, redis_errors
from predictor.queue._codec import Entry, decode_entry, error_record
from predictor.queue._consumer import StreamConsumer
from predictor.queue._keys import QueueKeys
from predictor.queue._trim import trim_acknowledged

logger = logging.getLogger("predictor.llm")

TRIM_EVERY_S = 10.0


class LLMQueueWorker(StreamConsumer):
    """Serves one LLM version's stream as consumer ``consumer`` of group ``workers``."""

    def __init__(self, llm: LLMModel, client: Any, keys: QueueKeys, consumer: str) -> None:
        # As many sequences in hand as the engine batches; more wait in the stream.
        super().__init__(llm.config, client, keys, consumer,
                         room=max(1, llm.config.max_batch_size))
        self.llm = llm
        self._ttl_s = self.config.queue_result_ttl_s
        self._loops: list[asyncio.Task[None]] = []
        self.is_ready = False

    async def start(self) -> None:
        await self._create_group()
        loop = asyncio.get_running_loop()
        self._loops = [loop.create_task(self._read_loop(), name="llm-read"),
                       loop.create_task(self._claim_loop(), name="llm-claim"),
                       loop.create_task(self._heartbeat_loop(), name="llm-heartbeat")]
        self.is_ready = True
        logger.info("llm worker %s reading %s", self.consumer, self.keys.stream)

    async def stop(self, timeout_s: float) -> None:
        """SIGTERM: stop reading and claiming; the sequences in hand finish, for up to
        ``timeout_s``; any still running then is left pending for another worker."""
        self.is_ready = False
        self._stopping = True
        self._freed.set()
        in_hand = list(self._in_hand.values())
        if in_hand:
            logger.info("SIGTERM: finishing %d sequences in hand", len(in_hand))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.gather(*in_hand, return_exceptions=True),
                                       timeout_s)
        for task in self._loops:
            task.cancel()
        await asyncio.gather(*self._loops, return_exceptions=True)
        await self.llm.drain(0.0)
        self.llm.engine.stop()

    # -- serving ---------------------------------------------------------------------------
    async def _serve(self, entry_id: str, fields: Any, alone: bool) -> None:
        try:
            entry = decode_entry(fields)
            request = request_of(entry.instances[0] if entry.instances else None)
        except (ValueError, KeyError) as exc:
            logger.error("entry %s is not an LLM request (%s): dead-lettered", entry_id, exc)
            await self._dead_letter(entry_id, fields, 0)
            return
        attempt = f"{self.consumer}-{uuid.uuid4().hex[:8]}"
        try:
            await self._generate(entry, request, attempt)
        except PredictorError as exc:
            await self._write(entry.request_id, error_fields(attempt, error_record(
                entry.request_id, exc)))
        except redis_errors() as exc:  # left pending: claimed and run again elsewhere
            logger.warning("lost Redis while answering %s (%s)", entry.request_id,
                           type(exc).__name__)
            return
        except Exception as exc:
            logger.exception("request %s failed on the worker", entry.request_id)
            await self._write(entry.request_id, error_fields(attempt, error_record(
                entry.request_id, PredictorError(f"the worker failed: {type(exc).__name__}"))))
        with contextlib.suppress(*redis_errors()):
            await self._client.xack(self.keys.stream, QueueKeys.GROUP, entry_id)

    async def _generate(self, entry: Entry, request: Any, attempt: str) -> None:
        waited_ms = max(0.0, time.time() * 1000.0 - entry.enqueued_ms)
        if entry.deadline_ms <= time.time() * 1000.0:  # nobody waits for it any more
            raise DeadlineExpired(entry.timeout_ms, waited_ms)
        # The deadline covers the first token from the frontend's arrival: TTFT as the
        # client sees it, the time in the queue included.
        arrived = time.monotonic() - waited_ms / 1000.0
        pieces = self.llm.generate(request, timeout_ms=entry.timeout_ms, arrived=arrived)
        try:
            async for piece in pieces:
                if await self._emit(entry.request_id, attempt, piece):
                    logger.info("request %s: its client went away; cancelled",
                                entry.request_id)
                    return
        finally:
            await pieces.aclose()  # a cancelled sequence frees its cache

    async def _emit(self, request_id: str, attempt: str, piece: Piece) -> bool:
        """Write one piece; whether the client has gone away."""
        pipe = self._appending(request_id, piece_fields(attempt, piece))
        pipe.exists(self.keys.cancel(request_id))
        _, _, cancelled = await execute_pipeline(pipe)
        return bool(cancelled)

    async def _write(self, request_id: str, fields: dict[str, Any]) -> None:
        with contextlib.suppress(*redis_errors()):
            await execute_pipeline(self._appending(request_id, fields))

    def _appending(self, request_id: str, fields: dict[str, Any]) -> Any:
        """A pipeline that adds ``fields`` to the request's token stream and renews its
        expiry (a stream nobody reads goes with --queue_result_ttl_s)."""
        pipe = self._client.pipeline(transaction=False)
        pipe.xadd(self.keys.tokens(request_id), fields)
        pipe.expire(self.keys.tokens(request_id), self._ttl_s)
        return pipe

    # -- claiming and heartbeats -----------------------------------------------------------
    async def _heartbeat_loop(self) -> None:
        every_s = self.config.queue_claim_timeout_ms / 3000.0
        trimmed = time.monotonic()
        while True:
            await asyncio.sleep(every_s)
            ids = list(self._in_hand)
            with contextlib.suppress(*redis_errors()):
                if ids:
                    await self._client.xclaim(self.keys.stream, QueueKeys.GROUP,
                                              self.consumer, 0, ids, justid=True)
                if time.monotonic() - trimmed > TRIM_EVERY_S:
                    trimmed = time.monotonic()
                    await trim_acknowledged(self._client, self.keys.stream)

    async def _claimed(self, entry_id: str, fields: Any, deliveries: int) -> None:
        logger.info("claimed %s (delivery %d): generating it again from the start",
                    entry_id, deliveries)
        self._take(entry_id, fields, alone=True)

    async def _answer_dead(self, request_id: str, fields: Any, entry_id: str,
                           error: DeadLettered) -> None:
        await self._write(request_id, error_fields(f"{self.consumer}-dead",
                                                   error_record(request_id, error)))
        await self._client.xack(self.keys.stream, QueueKeys.GROUP, entry_id)
