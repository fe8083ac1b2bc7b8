"""The step plan: which canary weights, how long each, how many failures are tolerated.

Pure: parsing and validation only, no I/O. Errors are ``InvalidPlan`` (a
``PlatformError``), so the CLI prints one line and exits 2 before it touches
anything.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

from rollout._errors import InvalidPlan, InvalidSteps

DEFAULT_STEPS_PCT: tuple[int, ...] = (5, 25, 50)
DEFAULT_INTERVAL_S = 60.0
DEFAULT_FAILURE_LIMIT = 2


def parse_steps(text: str) -> tuple[int, ...]:
    """Parse ``"5,25,50"`` into canary weights (percent), strictly increasing within 1-100.

    >>> parse_steps("5, 25,50")
    (5, 25, 50)
    """
    parts = [p.strip() for p in text.split(",")]
    if not text.strip() or any(not p for p in parts):
        raise InvalidSteps(f"steps {text!r}: expected comma-separated percentages, e.g. 5,25,50")
    steps: list[int] = []
    for part in parts:
        try:
            steps.append(int(part))
        except ValueError:
            raise InvalidSteps(f"steps {text!r}: {part!r} is not a whole percentage") from None
    return validate_steps(steps)


def validate_steps(steps: Sequence[int]) -> tuple[int, ...]:
    """Check that weights are strictly increasing integers within 1-100."""
    if not steps:
        raise InvalidSteps("steps: at least one weight is needed, e.g. 5,25,50")
    for weight in steps:
        if not 1 <= weight <= 100:
            raise InvalidSteps(f"steps: {weight} is outside 1-100")
    for before, after in itertools.pairwise(steps):
        if after <= before:
            raise InvalidSteps(f"steps: {after} after {before} is not strictly increasing")
    return tuple(steps)


@dataclass(frozen=True)
class Plan:
    """How a rollout moves: the weights, the wait at each, the failures it tolerates."""

    steps_pct: tuple[int, ...] = DEFAULT_STEPS_PCT
    interval_s: float = DEFAULT_INTERVAL_S
    failure_limit: int = DEFAULT_FAILURE_LIMIT

    def __post_init__(self) -> None:
        validate_steps(self.steps_pct)
        if self.interval_s <= 0:
            raise InvalidPlan(f"interval must be greater than zero, got {self.interval_s}s")
        if self.failure_limit < 1:
            raise InvalidPlan(f"failure limit must be at least 1, got {self.failure_limit}")

    @property
    def last_index(self) -> int:
        return len(self.steps_pct) - 1

    def weight_at(self, index: int) -> int:
        """The canary weight (percent) of step ``index``."""
        return self.steps_pct[index]

    def is_last(self, index: int) -> bool:
        return index >= self.last_index
