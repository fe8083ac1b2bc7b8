"""The worker role's loop: read requests from the stream, batch them, answer, acknowledge.

Reading, claiming and dead-lettering are every worker's (``_consumer.StreamConsumer``,
which cites the Redis commands); this module batches and answers. Results are written
before ``XACK`` (``ResultStore``: SET NX GET, then PUBLISH and XACK): a worker that dies
in between leaves the entry pending, another claims it, and the second SET finds the
first result and publishes that (at-least-once, answered once). Claiming resets an
entry's idle time, so two workers never take the same entry in one claim round.

The requests of one batch finish in the same turn of the event loop; their answers are
queued and leave together (``_flush``): two pipelined round trips for the whole batch
instead of three round trips for each request.

A claimed entry (delivered before, its worker presumably dead) runs alone, never in a
batch: if it is a poison input that kills its worker, only it is charged the delivery,
so after ``--queue_max_deliveries`` it is dead-lettered while its batch-mates are
answered. Every 10 s the worker trims the entries every group has read and
acknowledged (``_trim``); an unread or pending entry is never trimmed.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from typing import Any

from predictor._errors import DeadLettered, DeadlineExpired, ItemFailed, PredictorError
from predictor._model import BatchingModel
from predictor.batching._device import device_executor
from predictor.batching._isolation import is_bad_input, is_out_of_memory, run_isolating
from predictor.handlers._base import RequestOptions
from predictor.queue._backpressure import WorkerInfo, depth_of
from predictor.queue._client import redis_errors
from predictor.queue._codec import Entry, decode_entry, error_record, ok_record
from predictor.queue._consumer import READ_BLOCK_MS, StreamConsumer
from predictor.queue._keys import QueueKeys
from predictor.queue._metrics import QueueMetrics
from predictor.queue._results import Answer, ResultStore
from predictor.queue._trim import trim_acknowledged

logger = logging.getLogger("predictor.queue")

INFO_INTERVAL_S = 1.0
TRIM_EVERY_TICKS = 10  # every 10 s: entries all groups acknowledged leave the stream
ANSWER_ATTEMPTS = 20  # backing off to 2 s: about half a minute of Redis away


class QueueWorker(StreamConsumer):
    """Serves one model version's stream as consumer ``consumer`` of group ``workers``."""

    def __init__(self, model: BatchingModel, client: Any, keys: QueueKeys, consumer: str,
                 *, startup_s: float) -> None:
        # One batch running, one forming: the rest stays in the stream for other workers.
        super().__init__(model.config, client, keys, consumer,
                         room=2 * model.batch_config.max_batch_size)
        self.model = model
        self.startup_s = startup_s
        self.metrics = QueueMetrics.create(self.config.model_name, model.version,
                                           self.config.role)
        self._results = ResultStore(client, keys, self.config.queue_result_ttl_s)
        self._device = device_executor()
        self._batcher = model.make_batcher(self._device)
        self._outbox: list[tuple[Answer, asyncio.Future[None]]] = []
        self._flusher: asyncio.Task[None] | None = None
        self._loops: list[asyncio.Task[None]] = []
        self.is_ready = False

    async def start(self) -> None:
        await self._create_group()
        await self._batcher.start()
        loop = asyncio.get_running_loop()
        self._loops = [loop.create_task(self._read_loop(), name="queue-read"),
                       loop.create_task(self._claim_loop(), name="queue-claim"),
                       loop.create_task(self._info_loop(), name="queue-info")]
        await self._publish_info()
        self.is_ready = True
        logger.info("worker %s reading %s", self.consumer, self.keys.stream)

    async def stop(self, timeout_s: float) -> None:
        """SIGTERM: stop reading and claiming, finish and acknowledge what is in hand."""
        self.is_ready = False
        self._stopping = True
        self._freed.set()
        reading = [t for t in self._loops if t.get_name() != "queue-info"]
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.gather(*reading, return_exceptions=True),
                                   READ_BLOCK_MS / 1000.0 + 2.0)
        in_hand = list(self._in_hand.values())
        if in_hand:
            logger.info("SIGTERM: finishing %d requests in hand", len(in_hand))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.gather(*in_hand, return_exceptions=True),
                                       timeout_s)
        for task in self._loops:
            task.cancel()
        await self._batcher.drain(1.0)
        with contextlib.suppress(*redis_errors()):
            await self._client.hdel(self.keys.workers, self.consumer)
        self._device.shutdown(wait=False)

    # -- serving ---------------------------------------------------------------------------
    async def _serve(self, entry_id: str, fields: Any, alone: bool) -> None:
        try:
            entry = decode_entry(fields)
        except (ValueError, KeyError) as exc:
            logger.error("entry %s is not a request (%s): dead-lettered", entry_id, exc)
            await self._dead_letter(entry_id, fields, 0)
            return
        now_ms = time.time() * 1000.0
        self.metrics.time_in_queue.labels(**self.metrics.labels).observe(
            max(0.0, now_ms - entry.enqueued_ms) / 1000.0)
        try:
            if entry.deadline_ms <= now_ms:  # not run: nobody waits for it any more
                raise DeadlineExpired(entry.timeout_ms, now_ms - entry.enqueued_ms)
            results = await self._run(entry, alone)
            record = ok_record(entry.request_id, results)
        except PredictorError as exc:
            record = error_record(entry.request_id, exc)
        except Exception as exc:
            logger.exception("request %s failed on the worker", entry.request_id)
            record = error_record(entry.request_id, PredictorError(
                f"the worker failed: {type(exc).__name__}"))
        await self._answer(entry_id, entry.request_id, entry.reply_to, record)

    async def _run(self, entry: Entry, alone: bool) -> list[Any]:
        prepared = await self.model.prepare(list(entry.instances),
                                            RequestOptions(entry.options))
        if not alone:
            deadline = time.monotonic() + (entry.deadline_ms - time.time() * 1000.0) / 1000.0
            return await self._batcher.submit(prepared, deadline, timeout_ms=entry.timeout_ms)
        outcome = await asyncio.get_running_loop().run_in_executor(
            self._device, functools.partial(run_isolating, self.model.run_batch, prepared,
                                            self._batcher.batch_cap, clock=time.monotonic,
                                            is_oom=is_out_of_memory))
        for index in sorted(outcome.failures):
            cause = outcome.failures[index]
            raise ItemFailed(index, cause, is_input_error=is_bad_input(cause))
        return list(outcome.results)

    async def _answer(self, entry_id: str, request_id: str, reply_to: str,
                      record: bytes) -> None:
        """Queued for the next flush; returns once it is answered (or left pending)."""
        loop = asyncio.get_running_loop()
        done: asyncio.Future[None] = loop.create_future()
        self._outbox.append((Answer(request_id, reply_to, record, entry_id), done))
        if self._flusher is None or self._flusher.done():
            # Runs after the tasks already woken in this turn: a batch's answers, together.
            self._flusher = loop.create_task(self._flush(), name="queue-answer")
        await done

    async def _flush(self) -> None:
        """Result first, then XACK; Redis away: retry while the result can still matter."""
        while self._outbox:
            group, self._outbox = self._outbox, []
            try:
                await self._deliver([answer for answer, _ in group])
            finally:
                for _, done in group:
                    if not done.done():
                        done.set_result(None)

    async def _deliver(self, answers: list[Answer]) -> None:
        for attempt in range(ANSWER_ATTEMPTS):
            try:
                await self._results.deliver_all(answers)
                return
            except redis_errors() as exc:
                logger.warning("could not answer %d requests (%s), attempt %d", len(answers),
                               type(exc).__name__, attempt + 1)
                await asyncio.sleep(min(2.0, 0.1 * 2 ** attempt))
            except Exception:  # Redis refused a command: retrying cannot change that
                logger.exception("could not answer %d requests", len(answers))
                return
        # Left pending: another worker claims them after the claim timeout.

    # -- claimed and dead-lettered entries ---------------------------------------------------
    async def _claimed(self, entry_id: str, fields: Any, deliveries: int) -> None:
        self.metrics.claims.labels(**self.metrics.labels).inc()
        self.metrics.redeliveries.labels(**self.metrics.labels).inc()
        logger.info("claimed %s (delivery %d): running it alone", entry_id, deliveries)
        # One suspect at a time. Shielded: stop() cancels the claim loop when it lingers,
        # and cancelling it must not cancel the request in hand (stop() waits for it).
        await asyncio.shield(self._take(entry_id, fields, alone=True))

    async def _answer_dead(self, request_id: str, fields: Any, entry_id: str,
                           error: DeadLettered) -> None:
        reply = fields.get(b"reply_to") or fields.get("reply_to") or b""
        reply_to = reply.decode() if isinstance(reply, bytes) else reply
        await self._results.deliver_all([Answer(request_id, reply_to,
                                                error_record(request_id, error), entry_id)])

    def _dead_lettered(self) -> None:
        self.metrics.dead_letters.labels(**self.metrics.labels).inc()

    # -- what the frontends read -----------------------------------------------------------
    async def _info_loop(self) -> None:
        ticks = 0
        while True:
            await asyncio.sleep(INFO_INTERVAL_S)
            ticks += 1
            with contextlib.suppress(*redis_errors()):
                await self._publish_info()
                if ticks % TRIM_EVERY_TICKS == 0:
                    await trim_acknowledged(self._client, self.keys.stream)

    async def _publish_info(self) -> None:
        cap = self._batcher.batch_cap
        line = self._batcher.policy.latency_model
        info = WorkerInfo(self.consumer, line.predict(cap), cap, self.startup_s, time.time(),
                          line.intercept_s, line.per_item_s)
        await self._client.hset(self.keys.workers, self.consumer, info.to_json())
        with contextlib.suppress(Exception):
            depth, lag, pending = depth_of(await self._client.xinfo_groups(self.keys.stream),
                                           QueueKeys.GROUP)
            labels = self.metrics.labels
            self.metrics.depth.labels(**labels).set(depth)
            self.metrics.lag.labels(**labels).set(lag)
            self.metrics.pending.labels(**labels).set(pending)
