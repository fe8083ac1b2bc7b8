"""What the batcher's queue holds and what it reports: plain data.

An ``Item`` is one item of a ``Request``; a request's future resolves once all of
its items have results. ``tag`` is the item's place in the fair order (``_fair``).
``BatchStats`` is what one dispatched batch did (``Batcher``'s ``on_batch``).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from predictor.batching._isolation import BatchKind

T = TypeVar("T")
R = TypeVar("R")


@dataclass(frozen=True)
class BatchStats:
    """What happened to one dispatched batch (for metrics and logs).

    ``duration_s`` covers every run of the batch, bisection included;
    ``queue_waits_s`` holds each item's time in the queue; ``expired`` counts
    items dropped at their deadline since the previous batch; ``cap`` is the
    batch cap after this batch; ``kind`` is ``"ok"``, ``"bisect"`` (something
    raised and was isolated) or ``"oom"`` (out of memory: split, cap lowered).
    """

    size: int
    duration_s: float
    queue_waits_s: tuple[float, ...]
    cap: int
    expired: int
    kind: BatchKind
    failed: int
    runs: int


@dataclass(eq=False)
class Request(Generic[R]):
    future: asyncio.Future[list[R]]
    submitted_at: float
    deadline: float
    timeout_ms: float
    results: list[Any]
    remaining: int


@dataclass(eq=False, slots=True)
class Item(Generic[T, R]):
    value: T
    enqueued_at: float
    deadline: float
    request: Request[R]
    index: int
    tag: float = 0.0  # start tag in the fair order (``_fair``)
