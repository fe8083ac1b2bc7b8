"""The batcher: an asyncio loop that carries out the policy's decisions.

Requests of k items enter one bounded queue together; one loop task asks the
policy (``_policy.py``) what to do at each arrival, batch completion or timer,
and runs at most one batch at a time in a dedicated single-thread executor, so
the model never blocks the event loop and the next batch forms while one runs.
Each request awaits its own future; results fan out by position.

The queue is in fair order across flows (a tenant's requests), ``_fair``: plain
FIFO with one flow.

A batch that raises is bisected until the failing items are isolated; only
their requests fail. An out-of-memory error also halves the batch and lowers
the batch cap for good. Every outcome is counted on the batcher and reported
per batch through ``on_batch``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import logging
import time
from collections import Counter, deque
from collections.abc import Callable, Mapping, Sequence
from typing import Generic, TypeVar

from predictor._errors import (
    BadInput,
    DeadlineExpired,
    ItemFailed,
    Overloaded,
    OverloadReason,
    PredictorError,
)
from predictor.batching._device import DeviceLane, OwnDevice
from predictor.batching._fair import FairOrder, position
from predictor.batching._isolation import (
    Outcome,
    is_bad_input,
    is_out_of_memory,
    run_isolating,
)
from predictor.batching._items import BatchStats, Item, Request
from predictor.batching._policy import BatchConfig, BatchPolicy, Dispatch

T = TypeVar("T")
R = TypeVar("R")

logger = logging.getLogger(__name__)


class Batcher(Generic[T, R]):
    """Batches items from concurrent requests onto one synchronous ``run_batch``.

    ``run_batch`` takes a list of items and returns one result per item, in
    order; it runs on one dedicated thread (or ``executor``), one batch at a
    time. ``clock`` is a monotonic clock in seconds; deadlines use it too.
    ``on_batch`` is called on the event loop after every dispatched batch.
    ``is_input_error`` decides 400 versus 500 for an isolated failing item;
    ``is_oom`` recognises out-of-memory errors. ``device`` (a multi-model predictor's
    lane onto its shared device) replaces the thread: a wait for it is queue wait.
    """

    def __init__(
        self,
        run_batch: Callable[[list[T]], list[R]],
        config: BatchConfig,
        *,
        clock: Callable[[], float] = time.monotonic,
        on_batch: Callable[[BatchStats], None] | None = None,
        executor: concurrent.futures.Executor | None = None,
        is_input_error: Callable[[BaseException], bool] = is_bad_input,
        is_oom: Callable[[BaseException], bool] = is_out_of_memory,
        device: DeviceLane | None = None,
    ) -> None:
        self._run_batch = run_batch
        self._device = device if device is not None else OwnDevice(executor, clock=clock)
        self.config = config
        self.policy = BatchPolicy(config)
        self._clock = clock
        self._on_batch = on_batch
        self._is_input_error = is_input_error
        self._is_oom = is_oom

        self._queue: deque[Item[T, R]] = deque()
        self._cap = config.max_batch_size
        self._in_flight = 0
        self._busy_until: float | None = None
        self._is_draining = False
        self._wake: asyncio.Event | None = None
        self._idle: asyncio.Event | None = None
        self._loop_task: asyncio.Task[None] | None = None
        self._batch_task: asyncio.Task[None] | None = None
        self._running: list[Item[T, R]] = []
        self._broken: BaseException | None = None

        # Every item ends in exactly one of these (or is still queued or running).
        self.items_succeeded = 0
        self.items_failed = 0  # isolated items that raised
        self.items_expired = 0  # dropped in the queue: their request's deadline
        self.items_abandoned = 0  # dropped in the queue: request cancelled or failed
        self.batches = 0
        self._rejected: Counter[str] = Counter()
        self._expired_since_batch = 0
        self._fair = FairOrder()
        self.items_pushed_out = 0  # dropped from the queue's tail for a fairer request

    # -- state --------------------------------------------------------------------------------
    @property
    def queue_depth(self) -> int:
        """Items waiting in the queue."""
        return len(self._queue)

    @property
    def in_flight(self) -> int:
        """Items in the batch that is running now."""
        return self._in_flight

    @property
    def batch_cap(self) -> int:
        """The largest batch the batcher will run now (lowered after OOM)."""
        return self._cap

    @property
    def is_draining(self) -> bool:
        return self._is_draining

    @property
    def rejected(self) -> Mapping[str, int]:
        """Requests refused at admission, by reason (queue_full, deadline, draining)."""
        return dict(self._rejected)

    # -- lifecycle ----------------------------------------------------------------------------
    async def start(self) -> None:
        """Start the loop on the running event loop."""
        if self._loop_task is not None:
            raise RuntimeError("the batcher is already started")
        self._wake = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self._loop_task = asyncio.get_running_loop().create_task(self._run(), name="batcher")

    async def drain(self, timeout_s: float) -> bool:
        """Stop admitting, wait for the queue and the running batch to finish,
        then stop. Returns False if that took longer than ``timeout_s``; the
        requests still waiting then get ``Overloaded("draining")``."""
        wake, idle = self._events()
        self._is_draining = True
        wake.set()
        drained = True
        try:
            await asyncio.wait_for(idle.wait(), timeout_s)
        except TimeoutError:
            drained = False
            logger.warning("drain timed out after %.1f s with %d items left",
                           timeout_s, len(self._queue) + self._in_flight)
        await self._stop()
        return drained

    async def _stop(self) -> None:
        tasks = [t for t in (self._loop_task, self._batch_task) if t is not None]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        leftover = {id(item.request): item.request for item in [*self._queue, *self._running]}
        self._queue.clear()
        for request in leftover.values():
            self._fail(request, Overloaded("draining", 0.0, "the server is shutting down"))
        self._device.close()

    # -- the request path ---------------------------------------------------------------------
    async def submit(self, items: Sequence[T], deadline: float, *,
                     timeout_ms: float | None = None, flow: str | None = None,
                     weight: float = 1.0) -> list[R]:
        """Queue the items of one request and wait for their results, in order.

        ``deadline`` is on the batcher's clock. ``timeout_ms`` is the request's
        whole timeout, for error messages (by default, the time it has left
        now). ``flow`` and ``weight``: whose request it is (a tenant) and its share
        under contention, for the fair order. Raises ``Overloaded`` if refused (or
        pushed out later by a fairer request), ``DeadlineExpired`` if dropped in the
        queue, ``ItemFailed`` if an item raised, ``BadInput`` for an empty request.
        """
        wake, idle = self._events()
        if self._broken is not None:
            raise PredictorError("the batcher stopped after an internal error") from self._broken
        if self._is_draining:
            self._reject("draining", 0.0, "the server is shutting down; retry on another replica")
        if not items:
            raise BadInput("a request needs at least one item")
        now = self._clock()
        start = self._fair.start(flow)
        ahead = position(self._queue, start)
        admission = self.policy.admit(now, ahead, len(items), deadline,
                                      self._busy_until, cap=self._cap)
        if admission.accepted and len(self._queue) + len(items) > self.config.max_queue_size:
            self._push_out(start, len(items), admission.retry_after_s)
            ahead = position(self._queue, start)
            if len(self._queue) + len(items) > self.config.max_queue_size:
                admission = self.policy.admit(now, len(self._queue), len(items), deadline,
                                              self._busy_until, cap=self._cap)
        if admission.reason == "queue_full":
            self._reject("queue_full", admission.retry_after_s,
                         f"the queue is full ({len(self._queue)} items waiting, "
                         f"{len(items)} more do not fit in {self.config.max_queue_size})")
        elif admission.reason == "deadline":
            self._reject("deadline", admission.retry_after_s,
                         f"the request cannot finish within its deadline: predicted "
                         f"{(admission.predicted_finish - now) * 1000:.0f} ms, allowed "
                         f"{max(0.0, deadline - now) * 1000:.0f} ms")
        future: asyncio.Future[list[R]] = asyncio.get_running_loop().create_future()
        if timeout_ms is None:
            timeout_ms = (deadline - now) * 1000.0
        request: Request[R] = Request(future, now, deadline, timeout_ms, [None] * len(items),
                                        len(items))
        tags = self._fair.tags(flow, len(items), weight)
        new = [Item(v, now, deadline, request, i, tag)
               for i, (v, tag) in enumerate(zip(items, tags, strict=True))]
        if ahead == len(self._queue):
            self._queue.extend(new)
        else:  # ahead of another flow's backlog
            for offset, item in enumerate(new):
                self._queue.insert(ahead + offset, item)
        self.policy.record_arrivals(now, len(items))
        idle.clear()
        wake.set()
        try:
            return await future
        except asyncio.CancelledError:
            self._abandon(request)
            self._update_idle()
            raise

    def _push_out(self, tag: float, room: int, retry_after_s: float) -> None:
        """Make room for ``room`` items tagged ``tag`` in a full queue by refusing the
        requests whose items are last in fair order (tagged after ``tag``)."""
        while (len(self._queue) + room > self.config.max_queue_size and self._queue
               and self._queue[-1].tag > tag):
            request = self._queue[-1].request
            before = len(self._queue)
            self._queue = deque(item for item in self._queue if item.request is not request)
            self.items_pushed_out += before - len(self._queue)
            self._rejected["queue_full"] += 1
            self._fail(request, Overloaded("queue_full", retry_after_s,
                                           "the queue is full and this request was last "
                                           "in fair order: its tenant sends more than its "
                                           "share"))

    def _reject(self, reason: OverloadReason, retry_after_s: float, message: str) -> None:
        self._rejected[reason] += 1
        raise Overloaded(reason, retry_after_s, message)

    def _events(self) -> tuple[asyncio.Event, asyncio.Event]:
        if self._wake is None or self._idle is None:
            raise RuntimeError("the batcher is not started: await start() first")
        return self._wake, self._idle

    # -- the loop -----------------------------------------------------------------------------
    async def _run(self) -> None:
        try:
            await self._decide_forever()
        except Exception as exc:  # a bug here must not leave callers hanging
            logger.exception("the batcher loop failed; failing every queued request")
            self._broken = exc
            for request in {id(i.request): i.request for i in self._queue}.values():
                self._fail(request, PredictorError("the batcher stopped after an internal error"))
            self._queue.clear()
            self._update_idle()

    async def _decide_forever(self) -> None:
        wake, _ = self._events()
        while True:
            wake.clear()
            until = self._step()
            timeout = None if until is None else max(0.0, until - self._clock())
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(wake.wait(), timeout)

    def _step(self) -> float | None:
        """Carry out the policy's decisions until it says to wait; return until when."""
        while True:
            now = self._clock()
            decision = self.policy.decide(now, self._queue, self._in_flight > 0, self._busy_until,
                                          cap=self._cap, is_draining=self._is_draining)
            if decision.expired:
                self._expire(decision.expired, now)
                continue  # dropping may remove siblings further back: decide afresh
            if isinstance(decision, Dispatch):
                self._dispatch(decision.n, now)
                continue
            return decision.until

    def _dispatch(self, n: int, now: float) -> None:
        batch = [self._queue.popleft() for _ in range(n)]
        self._fair.dispatched(batch)
        self._running = batch
        self._in_flight = len(batch)
        self._busy_until = now + self.policy.latency_model.predict(len(batch))
        self._batch_task = asyncio.get_running_loop().create_task(self._execute(batch, now))

    def _expire(self, indices: Sequence[int], now: float) -> None:
        queued = list(self._queue)
        requests = {id(queued[i].request): queued[i].request for i in indices}
        kept = [item for item in queued if id(item.request) not in requests]
        dropped = len(queued) - len(kept)
        self._queue = deque(kept)
        self.items_expired += dropped
        self._expired_since_batch += dropped
        for request in requests.values():
            waited_ms = (now - request.submitted_at) * 1000.0
            self._fail(request, DeadlineExpired(request.timeout_ms, waited_ms))
        self._update_idle()

    async def _execute(self, batch: list[Item[T, R]], started: float) -> None:
        work = functools.partial(run_isolating, self._run_batch, [item.value for item in batch],
                                 self._cap, clock=self._clock, is_oom=self._is_oom)
        try:
            outcome, started = await self._device.run(work, min(i.deadline for i in batch))
        except Exception as exc:  # the executor itself failed (e.g. shut down)
            logger.exception("could not run a batch of %d items", len(batch))
            outcome = Outcome([None] * len(batch), dict(enumerate([exc] * len(batch))))
        finished = self._clock()
        if outcome.cap is not None and outcome.cap < self._cap:
            logger.warning("out of device memory with a batch of %d items: batch cap lowered "
                           "from %d to %d", len(batch), self._cap, outcome.cap)
            self._cap = outcome.cap
        if outcome.runs == 1 and len(outcome.timings) == 1:
            # The time the loop actually waited, thread handoffs included: that is what
            # busy_until and admission must predict (the handler's own time is ~4% less).
            self.policy.latency_model.observe(len(batch), finished - started)
        else:
            for size, seconds in outcome.timings:
                self.policy.latency_model.observe(size, seconds)
        self.batches += 1
        self._running = []
        self._in_flight = 0
        self._busy_until = None
        if self._broken is None:
            self._step()  # the next batch starts before this one's results fan out
        self._deliver(batch, outcome)
        stats = BatchStats(
            size=len(batch), duration_s=finished - started,
            queue_waits_s=tuple(started - item.enqueued_at for item in batch),
            cap=self._cap, expired=self._expired_since_batch, kind=outcome.kind,
            failed=len(outcome.failures), runs=outcome.runs,
        )
        self._expired_since_batch = 0
        self._update_idle()
        self._events()[0].set()  # the loop sets its timer afresh
        if self._on_batch is not None:
            try:
                self._on_batch(stats)
            except Exception:
                logger.exception("on_batch callback failed")

    def _deliver(self, batch: list[Item[T, R]], outcome: Outcome) -> None:
        self.items_failed += len(outcome.failures)
        self.items_succeeded += len(batch) - len(outcome.failures)
        for at, item in enumerate(batch):
            request = item.request
            if request.future.done():
                continue  # cancelled, expired or failed by a sibling
            cause = outcome.failures.get(at)
            if cause is not None:
                logger.info("item %d of a request failed: %s", item.index, type(cause).__name__)
                is_input_error = self._is_input_error(cause)
                self._fail(request, ItemFailed(item.index, cause, is_input_error=is_input_error))
                self._abandon(request)
                continue
            request.results[item.index] = outcome.results[at]
            request.remaining -= 1
            if request.remaining == 0:
                request.future.set_result(request.results)

    # -- bookkeeping --------------------------------------------------------------------------
    def _fail(self, request: Request[R], exc: PredictorError) -> None:
        if not request.future.done():
            request.future.set_exception(exc)

    def _abandon(self, request: Request[R]) -> None:
        """Drop the request's items still in the queue (it failed or was cancelled)."""
        kept = deque(item for item in self._queue if item.request is not request)
        self.items_abandoned += len(self._queue) - len(kept)
        self._queue = kept

    def _update_idle(self) -> None:
        if self._idle is not None and not self._queue and self._in_flight == 0:
            self._idle.set()
