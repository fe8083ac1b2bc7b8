"""One device shared by many batchers: one batch at a time, never two models in one.

A multi-model predictor (``predictor/multi``) gives every model its own ``Batcher`` (its
own queue, triggers and learnt t(b)) and all of them one ``SharedDevice``: a batch runs
only when the device is free, on the one device thread. When it frees, the device goes
to the waiting batch whose oldest item is closest to its deadline (issue 16's rule).

Why a flood on one model cannot starve another: a batcher holds one batch at a time and
asks for the device again only once that batch is done, so each model has at most one
batch waiting, and the model whose batch just ran is never among the waiters when the
device is handed on. Two busy models take turns batch by batch; a model flooding the
device delays another by at most the one batch it has running (tests/predictor/
batching/test_device.py). A batcher alone on its device runs on ``OwnDevice``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import ctypes
import heapq
import itertools
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol, TypeVar

R = TypeVar("R")

# The OS name of the device thread (Linux: /proc/<pid>/task/<tid>/comm, at most 15
# bytes). Threads it starts inherit the name (clone copies comm), torch's OpenMP team
# among them, so the model's CPU can be told from the HTTP edge's (capacity/_edge.py).
DEVICE_THREAD_NAME = "modelctl-device"
_PR_SET_NAME = 15  # linux/prctl.h


def _name_os_thread(name: str) -> None:
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None).prctl(_PR_SET_NAME, name.encode()[:15], 0, 0, 0)


def device_executor(prefix: str = "device") -> concurrent.futures.ThreadPoolExecutor:
    """The one thread a device's batches run on, named ``DEVICE_THREAD_NAME`` for the OS."""
    return concurrent.futures.ThreadPoolExecutor(
        max_workers=1, thread_name_prefix=prefix, initializer=_name_os_thread,
        initargs=(DEVICE_THREAD_NAME,))


class DeviceLane(Protocol):
    """Where a batcher runs its batches: ``run`` returns the result and when it started."""

    async def run(self, work: Callable[[], R], deadline: float) -> tuple[R, float]: ...

    def close(self) -> None: ...


class OwnDevice:
    """A batcher alone on its device: one thread of its own (or ``executor``, not owned)."""

    def __init__(self, executor: concurrent.futures.Executor | None = None, *,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._executor = executor
        self._owned = executor is None
        self._clock = clock

    async def run(self, work: Callable[[], R], deadline: float) -> tuple[R, float]:
        if self._executor is None:
            self._executor = device_executor("batcher")
        started = self._clock()
        return await asyncio.get_running_loop().run_in_executor(self._executor, work), started

    def close(self) -> None:
        if self._owned and self._executor is not None:
            self._executor.shutdown(wait=False)


@dataclass(order=True)
class _Waiter:
    deadline: float
    seq: int
    future: asyncio.Future[None] = field(compare=False)


class SharedDevice:
    """The device thread, and the order in which models' batches take it."""

    def __init__(self, executor: concurrent.futures.Executor | None = None, *,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._executor = executor or device_executor()
        self._clock = clock
        self._busy = False
        self._waiting: list[_Waiter] = []
        self._seq = itertools.count()

    @property
    def executor(self) -> concurrent.futures.Executor:
        """The device thread (loads never run here: they would hold every model up)."""
        return self._executor

    @property
    def waiting(self) -> int:
        """Batches waiting for the device."""
        return sum(1 for w in self._waiting if not w.future.done())

    async def run(self, work: Callable[[], R], deadline: float) -> tuple[R, float]:
        """Run ``work`` on the device thread once it is this batch's turn; returns its
        result and the clock's time when it started (waiting for the device is not its
        run). ``deadline`` is that of the batch's oldest item, on ``clock``."""
        await self._acquire(deadline)
        started = self._clock()
        try:
            result = await asyncio.get_running_loop().run_in_executor(self._executor, work)
        finally:
            self._release()
        return result, started

    def close(self) -> None:
        """A batcher is done with the device; the device stays for the others."""

    def shutdown(self) -> None:
        """Stop the device thread (the multi-model host, once every model is gone)."""
        self._executor.shutdown(wait=False)

    async def _acquire(self, deadline: float) -> None:
        if not self._busy and not self.waiting:
            self._busy = True
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._waiting, _Waiter(deadline, next(self._seq), future))
        try:
            await future  # _release hands the device over: _busy stays True
        except asyncio.CancelledError:
            if future.done() and not future.cancelled():
                self._release()  # granted just as we were cancelled: pass it on
            raise

    def _release(self) -> None:
        while self._waiting:
            waiter = heapq.heappop(self._waiting)
            if not waiter.future.done():
                waiter.future.set_result(None)
                return
        self._busy = False

