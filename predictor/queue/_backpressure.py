"""Admission at the frontend, pure: the queue's depth and the workers' published speed in,
admit or refuse (and for how long) out.

Depth is lag plus pending (``XINFO GROUPS``: ``lag`` is "the number of entries in the
stream that are still waiting to be delivered to the group's consumers, or a NULL when
that number can't be determined"; ``pending`` is the length of the group's pending
entries list, delivered but not acknowledged). Each worker publishes its learnt batch
latency ``t_w(b) = a_w + c_w * b``, its batch cap and its start-up time; together they
predict the wait of a request of ``k`` items that joins the queue now:

    ahead = depth + k
    wait  = max(0, ahead - sum(cap_w)) / sum(cap_w / t_w(cap_w))   # full batches before
          + max_w t_w(min(ahead, cap_w))                          # the batch that carries it

The last term is the batch the request rides in, at the size the queue gives it, not at
the cap: a line learnt from small batches may overstate t(cap) several times over, and
charging every request t(cap) would then refuse all of them even with the queue empty, so
that no batch would run to correct the estimate (a latch, measured in bench/queue_bench).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import orjson

# A worker that has not refreshed its info for this long is presumed gone.
STALE_AFTER_S = 10.0


@dataclass(frozen=True)
class WorkerInfo:
    """What one worker publishes in the workers hash."""

    consumer: str
    batch_s: float  # t(cap)
    cap: int
    startup_s: float
    updated_s: float
    intercept_s: float | None = None  # a of t(b) = a + c*b; None: t(b) = batch_s for all b
    per_item_s: float = 0.0  # c

    def batch_time_s(self, size: int) -> float:
        """Predicted seconds of a batch of ``size`` items on this worker."""
        if self.intercept_s is None:
            return self.batch_s
        return self.intercept_s + self.per_item_s * min(size, self.cap)

    def to_json(self) -> bytes:
        return orjson.dumps({"batch_s": self.batch_s, "cap": self.cap,
                             "startup_s": self.startup_s, "updated_s": self.updated_s,
                             "intercept_s": self.intercept_s, "per_item_s": self.per_item_s})


def parse_workers(raw: Mapping[Any, Any]) -> list[WorkerInfo]:
    """The workers hash (HGETALL), skipping fields that do not parse."""
    out = []
    for name, value in raw.items():
        try:
            doc = orjson.loads(value)
            intercept = doc.get("intercept_s")
            out.append(WorkerInfo(name.decode() if isinstance(name, bytes) else str(name),
                                  float(doc["batch_s"]), int(doc["cap"]),
                                  float(doc["startup_s"]), float(doc["updated_s"]),
                                  None if intercept is None else float(intercept),
                                  float(doc.get("per_item_s") or 0.0)))
        except (ValueError, KeyError, TypeError):
            continue
    return out


def depth_of(groups: Iterable[Mapping[str, Any]], group: str) -> tuple[int, int, int]:
    """(depth, lag, pending) of ``group`` from XINFO GROUPS; an unknown lag counts 0."""
    for info in groups:
        name = info.get("name")
        if (name.decode() if isinstance(name, bytes) else name) == group:
            lag = int(info.get("lag") or 0)
            pending = int(info.get("pending") or 0)
            return lag + pending, lag, pending
    return 0, 0, 0


@dataclass(frozen=True)
class Verdict:
    """Admit, or refuse with a reason and a Retry-After."""

    reason: Literal["queue_full", "deadline"] | None
    retry_after_s: float = 0.0
    predicted_wait_s: float | None = None

    @property
    def is_admitted(self) -> bool:
        return self.reason is None


def predicted_wait_s(depth: int, items: int, workers: Sequence[WorkerInfo],
                     now_s: float) -> float | None:
    """Seconds until a request of ``items`` joining now is answered; None when unknown
    (no worker has ever published). With no live worker, the start-up time comes first."""
    live = [w for w in workers if now_s - w.updated_s <= STALE_AFTER_S and w.batch_s > 0]
    if live:
        return _drain_s(depth + items, live)
    known = [w for w in workers if w.batch_s > 0]
    if not known:
        return None
    return max(w.startup_s for w in known) + _drain_s(depth + items, known)


def _drain_s(ahead: int, workers: Sequence[WorkerInfo]) -> float:
    """The module docstring's wait: full batches before, then the carrying batch."""
    rate = sum(w.cap / w.batch_s for w in workers)  # items per second at full batches
    before = max(0, ahead - sum(w.cap for w in workers)) / rate
    return before + max(w.batch_time_s(min(ahead, w.cap)) for w in workers)


def admit(depth: int, items: int, max_queue_size: int, wait_s: float | None,
          remaining_s: float) -> Verdict:
    """Refuse when the queue is over ``max_queue_size`` items or the predicted wait misses
    the ``remaining_s`` the request has left; Retry-After is the time to drain the excess."""
    if depth + items > max_queue_size:
        excess = depth + items - max_queue_size
        retry = 1.0
        if wait_s is not None and depth + items > 0:
            retry = wait_s * excess / (depth + items)
        return Verdict("queue_full", max(1.0, retry), wait_s)
    if wait_s is not None and wait_s > remaining_s:
        return Verdict("deadline", max(1.0, math.ceil(wait_s - remaining_s)), wait_s)
    return Verdict(None, 0.0, wait_s)
