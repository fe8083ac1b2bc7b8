"""A clock that moves only when a test moves it."""

from __future__ import annotations


class FakeClock:
    """A monotonic clock in seconds: call it for the time, ``advance`` to move it."""

    def __init__(self, start_s: float = 1000.0) -> None:
        self.now = start_s

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> float:
        """Move forward by ``seconds`` (never back) and return the new time."""
        if seconds < 0:
            raise ValueError(f"a monotonic clock cannot go back ({seconds} s)")
        self.now += seconds
        return self.now

    def advance_to(self, when: float) -> float:
        """Move forward to ``when`` if it is later than now; return the new time."""
        return self.advance(max(0.0, when - self.now))
