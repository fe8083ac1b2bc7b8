"""An asyncio event loop on virtual time: ``time()`` jumps to the next timer instead of
waiting for it, so code that sleeps and sets timeouts runs at once and deterministically.

The loop is a real ``SelectorEventLoop`` (the real scheduling, callbacks and tasks); only
its clock and its selector differ. When nothing is ready, ``select(timeout)`` advances the
clock to the earliest scheduled timer (``_run_once`` passes the time left until it) and
reports no I/O. With no timer and nothing ready the program would wait for ever: that is
an error here, since nothing outside (no thread, no socket) can wake it.
"""

from __future__ import annotations

import asyncio
import selectors
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class _VirtualSelector(selectors.DefaultSelector):
    def __init__(self) -> None:
        super().__init__()
        self.loop: VirtualTimeLoop | None = None

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        ready = super().select(0)
        if ready or timeout == 0:
            return ready
        assert self.loop is not None
        if timeout is None:
            raise RuntimeError("virtual time: nothing is scheduled and nothing is ready")
        self.loop.advance(timeout)
        return []


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    """A selector event loop whose ``time()`` only moves when it would otherwise wait."""

    def __init__(self) -> None:
        selector = _VirtualSelector()
        super().__init__(selector)
        selector.loop = self
        self._now = 0.0

    def time(self) -> float:
        return self._now

    def advance(self, seconds: float) -> None:
        scheduled: list[Any] = getattr(self, "_scheduled", [])
        target = self._now + seconds
        if scheduled:
            target = max(target, scheduled[0].when())  # land on the timer exactly
        self._now = target


def run_virtual(main: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run`` on a fresh ``VirtualTimeLoop``."""
    loop = VirtualTimeLoop()
    try:
        return loop.run_until_complete(main)
    finally:
        loop.close()
