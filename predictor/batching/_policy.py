"""The batching policy: pure decisions over a queue, with time passed in.

Nothing here does I/O, sleeps or touches asyncio; every method takes ``now`` (in
seconds of a monotonic clock) and returns a decision, so tests drive it tick by
tick with a fake clock. The batcher (``_batcher.py``) carries the decisions out.

The decision rule
-----------------
One batch runs at a time; the next one forms while it runs. When the device is
busy the policy never dispatches; it only reports items whose deadline can no
longer be met (``start + t(1) >= deadline``, where ``start`` is when the device
is predicted to be free) so they are dropped before they cost device time.
When the device is free, the first items of the queue leave as a batch (FIFO,
at most the cap) as soon as any of these holds:

1. the queue holds a full batch;
2. the oldest item has waited ``max_batch_wait_ms``;
3. waiting any longer would push a queued item's predicted finish past its
   deadline (the latest start is ``min(deadline) - t(n + 1)``, less a little
   slack for timers that fire late);
4. waiting no longer pays (below).

Otherwise the policy waits, never later than the oldest item's window end or
the latest start of rule 3, and the batcher re-decides at each arrival.

A leaving batch is cut short when that saves deadlines: if the whole batch
would finish after the deadline of some of its items, it shrinks to the longest
prefix that finishes before all of its deadlines, unless the whole batch keeps
more items on time (under overload, where every head item is close to its
deadline, shrinking for it would throw away the capacity the backlog needs).

When does waiting pay? Batch latency is learnt online as ``t(b) = a + c*b``
(an exponentially weighted least-squares fit, as BentoML's ``CorkDispatcher``
does with its ``o_a * n + o_b`` optimizer). Under that model, holding a batch
for ``d`` seconds while arrivals keep the device fed back to back only shifts
every later batch by ``d``: the n waiting items lose ``n*d`` and nobody gains,
because the items that would have joined simply ride in the next batch, which
runs anyway. Greedy dispatch also sizes batches by itself: items that arrive
during a batch of ``b`` form the next one (``lambda * t(b)``), which converges
to the smallest batch that keeps up with the arrival rate ``lambda``. Waiting
pays only when that fixed point does not exist within the cap, i.e. when the
arrival rate is at or beyond what full batches can serve
(``lambda >= cap / t(cap)``): then every partial batch wastes device time the
backlog needs, and filling the batch lowers the per-item cost ``t(b)/b``
where it matters. It also needs an arrival to be expected before the window
closes (the expected gap is ``max(1/lambda, time since the last arrival)``, so
a pause in traffic ends the wait, like BentoML's check on the newest item's age).

Admission (``admit``) refuses a request at once when the queue cannot take all
of its items, or when its predicted finish (drain the queue ahead of it in full
batches, then its own batch, starting when the device is free, plus a couple of
milliseconds of dispatch slack per batch) is past its deadline. Full batches
make the prediction optimistic on purpose: a request is refused only when it
would miss even in the best case, and an accepted item that later cannot make
it is dropped in the queue instead.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

from predictor.batching._estimators import ArrivalRate, LatencyModel, is_int, is_number

DispatchReason = Literal["full", "max_wait", "deadline", "no_gain", "draining"]
RefusalReason = Literal["queue_full", "deadline"]

# Retry-After must be positive so that rounding up always gives at least 1 s.
_MIN_RETRY_AFTER_S = 0.001
# Per batch, for what the latency model does not see: an event loop wakes a little
# late and hands a batch to its thread a little after deciding. A batch that must
# start by a deadline starts this much earlier (with a flat t(b) its latest start
# is also the moment its head item expires), and admission counts it per batch.
_START_SLACK_S = 0.002


@dataclass(frozen=True)
class BatchConfig:
    """Batching knobs; validated on construction."""

    max_batch_size: int = 32
    max_batch_wait_ms: float = 10.0
    max_queue_size: int = 1024
    request_timeout_ms: float = 30000.0

    def __post_init__(self) -> None:
        if not is_int(self.max_batch_size) or self.max_batch_size < 1:
            raise ValueError(f"max_batch_size must be an integer >= 1, got {self.max_batch_size!r}")
        if not is_number(self.max_batch_wait_ms) or self.max_batch_wait_ms < 0:
            raise ValueError(
                f"max_batch_wait_ms must be a finite number >= 0, got {self.max_batch_wait_ms!r}"
            )
        if not is_int(self.max_queue_size) or self.max_queue_size < self.max_batch_size:
            raise ValueError(
                "max_queue_size must be an integer >= max_batch_size "
                f"({self.max_batch_size}), got {self.max_queue_size!r}"
            )
        if not is_number(self.request_timeout_ms) or self.request_timeout_ms <= 0:
            raise ValueError(
                f"request_timeout_ms must be a finite number > 0, got {self.request_timeout_ms!r}"
            )

    @property
    def max_batch_wait_s(self) -> float:
        return self.max_batch_wait_ms / 1000.0

    @property
    def request_timeout_s(self) -> float:
        return self.request_timeout_ms / 1000.0


class QueuedItem(Protocol):
    """What the policy needs to know about a queued item (seconds, monotonic)."""

    @property
    def enqueued_at(self) -> float: ...

    @property
    def deadline(self) -> float: ...


@dataclass(frozen=True)
class Admission:
    """The answer to "may this request enter the queue?"."""

    accepted: bool
    reason: RefusalReason | None
    retry_after_s: float
    predicted_finish: float


@dataclass(frozen=True)
class Dispatch:
    """Run the first ``n`` queued items that are not in ``expired`` now."""

    n: int
    reason: DispatchReason
    expired: tuple[int, ...] = ()


@dataclass(frozen=True)
class Wait:
    """Dispatch nothing; decide again at ``until`` (or at the next event if None).

    ``expired`` are queue indices of items to drop now.
    """

    until: float | None
    expired: tuple[int, ...] = ()


Decision = Dispatch | Wait


class BatchPolicy:
    """Decides when a batch leaves the queue and whether a request may enter it.

    ``latency_model`` learns ``t(b)`` from the batches the batcher runs; ``arrivals``
    learns the arrival rate from ``record_arrivals``. ``cap`` arguments lower
    the batch size below ``config.max_batch_size`` (after out-of-memory errors).
    """

    def __init__(
        self,
        config: BatchConfig,
        latency_model: LatencyModel | None = None,
        *,
        arrivals: ArrivalRate | None = None,
    ) -> None:
        self.config = config
        if latency_model is None:
            latency_model = LatencyModel(prior_s=config.max_batch_wait_s)
        self.latency_model = latency_model
        self.arrivals = arrivals if arrivals is not None else ArrivalRate()

    def record_arrivals(self, now: float, n_items: int) -> None:
        """Tell the policy that ``n_items`` entered the queue at ``now``."""
        self.arrivals.record(now, n_items)

    def admit(
        self,
        now: float,
        queue_depth: int,
        n_items: int,
        deadline: float,
        busy_until: float | None,
        *,
        cap: int | None = None,
    ) -> Admission:
        """May a request of ``n_items`` join a queue of ``queue_depth`` items?

        ``busy_until`` is when the running batch is predicted to end (None when
        the device is free). ``predicted_finish`` in the answer leaves out the
        per-batch slack.
        """
        size = self._cap(cap)
        start = _free_at(now, busy_until)
        finish = start + self._drain_s(queue_depth + n_items, size)
        retry_after_s = self.retry_after_s(now, queue_depth, busy_until, cap=size)
        if queue_depth + n_items > self.config.max_queue_size:
            return Admission(False, "queue_full", retry_after_s, finish)
        batches = -(-(queue_depth + n_items) // size)
        if finish + batches * _START_SLACK_S > deadline:
            return Admission(False, "deadline", retry_after_s, finish)
        return Admission(True, None, retry_after_s, finish)

    def retry_after_s(
        self, now: float, queue_depth: int, busy_until: float | None, *, cap: int | None = None
    ) -> float:
        """Predicted seconds until the running batch and the queue have drained
        (always > 0, so rounding up for ``Retry-After`` gives at least 1 s)."""
        drain = _free_at(now, busy_until) - now + self._drain_s(queue_depth, self._cap(cap))
        return max(_MIN_RETRY_AFTER_S, drain)

    def decide(
        self,
        now: float,
        queue: Sequence[QueuedItem],
        device_busy: bool,
        busy_until: float | None,
        *,
        cap: int | None = None,
        is_draining: bool = False,
    ) -> Decision:
        """What to do with ``queue`` (oldest first) at ``now``.

        Looks at the head of the queue only: at most ``cap`` live items plus
        the expired ones among them. With ``is_draining`` nothing more will
        arrive, so a free device never waits.
        """
        size = self._cap(cap)
        start = _free_at(now, busy_until) if device_busy else now
        t1 = self.latency_model.predict(1)
        expired, live = _scan(queue, start, t1, size)
        if device_busy or not live:
            # Wake when the next head item would expire (the batcher also wakes
            # when the batch finishes or an item arrives).
            until = min((item.deadline - t1 for item in live), default=None)
            return Wait(None if not live else until, expired)
        reason = self._dispatch_reason(now, live, size, is_draining)
        if reason is not None:
            return Dispatch(self._fit_deadlines(now, live), reason, expired)
        window_end = live[0].enqueued_at + self.config.max_batch_wait_s
        return Wait(min(window_end, self._latest_start(live)), expired)

    def _dispatch_reason(
        self, now: float, live: list[QueuedItem], cap: int, is_draining: bool
    ) -> DispatchReason | None:
        if len(live) >= cap:
            return "full"
        if is_draining:
            return "draining"
        window_end = live[0].enqueued_at + self.config.max_batch_wait_s
        if now >= window_end:
            return "max_wait"
        if now >= self._latest_start(live):
            return "deadline"
        if not self._waiting_pays(now, cap, window_end):
            return "no_gain"
        return None

    def _latest_start(self, live: list[QueuedItem]) -> float:
        """The last moment a batch of these items plus one more can start and
        still finish every one of them before its deadline."""
        earliest = min(item.deadline for item in live)
        return earliest - self.latency_model.predict(len(live) + 1) - _START_SLACK_S

    def _waiting_pays(self, now: float, cap: int, window_end: float) -> bool:
        rate = self.arrivals.rate(now)
        if rate <= 0:
            return False
        gap = 1.0 / rate
        last = self.arrivals.last_arrival
        if last is not None:
            gap = max(gap, now - last)
        if now + gap >= window_end:
            return False  # nothing expected to join before the window closes
        # Below what full batches can serve, greedy dispatch keeps up by itself
        # and holding only delays (module docstring).
        return rate * self.latency_model.predict(cap) >= cap

    def _fit_deadlines(self, now: float, live: list[QueuedItem]) -> int:
        """How many of ``live`` to dispatch: all of them, or the longest prefix
        that finishes before all of its deadlines if that keeps more items on
        time (at least 1: the head item alone can still make it)."""
        whole_finish = now + self.latency_model.predict(len(live))
        on_time_whole = sum(1 for item in live if whole_finish <= item.deadline)
        if on_time_whole == len(live):
            return len(live)
        prefix = 1
        earliest = math.inf
        for m, item in enumerate(live, start=1):
            earliest = min(earliest, item.deadline)
            if now + self.latency_model.predict(m) > earliest:
                break  # t(m) grows and the earliest deadline only shrinks
            prefix = m
        return prefix if prefix > on_time_whole else len(live)

    def _drain_s(self, n_items: int, cap: int) -> float:
        """Seconds to run ``n_items`` in full batches of ``cap`` plus a last one."""
        if n_items <= 0:
            return 0.0
        full = (n_items - 1) // cap
        predict = self.latency_model.predict
        return full * predict(cap) + predict(n_items - full * cap)

    def _cap(self, cap: int | None) -> int:
        if cap is None:
            return self.config.max_batch_size
        return max(1, min(cap, self.config.max_batch_size))


def _free_at(now: float, busy_until: float | None) -> float:
    return now if busy_until is None else max(now, busy_until)


def _scan(
    queue: Iterable[QueuedItem], start: float, t1: float, cap: int
) -> tuple[tuple[int, ...], list[QueuedItem]]:
    """Split the head of the queue into expired indices and up to ``cap`` live items.

    An item expires at ``deadline - t1`` (computed the same way as the busy
    wake-up time, so that waking at it always finds the item expired).
    """
    expired: list[int] = []
    live: list[QueuedItem] = []
    for index, item in enumerate(queue):
        if start >= item.deadline - t1:
            expired.append(index)
            continue
        live.append(item)
        if len(live) >= cap:
            break
    return tuple(expired), live
