"""Which models must leave so that another fits: least recently used, never a busy one,
never one within its minimum residency. Pure: the host (``_host``) carries it out.

A model's size is two numbers, host bytes and device bytes, measured after it loaded
(``_measure``); before its first load it is estimated from its weight files. The budget
holds both: a load fits when what stays plus what comes is within each. Among the
models that may leave (idle: nothing queued, running or holding it; loaded at least
``min_residency_s`` ago) the least recently used leave first, and only as many as the
newcomer needs. When even all of those would not make room, nothing is evicted: the
load is refused, with the time at which the first resident still inside its residency
period may leave (the ``Retry-After`` of the 429), or as never possible when the model
alone is larger than the budget.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Size:
    """Bytes a model holds: in host memory, and on the device."""

    host: int = 0
    device: int = 0

    def __add__(self, other: Size) -> Size:
        return Size(self.host + other.host, self.device + other.device)

    def __sub__(self, other: Size) -> Size:
        return Size(self.host - other.host, self.device - other.device)

    def within(self, budget: Budget) -> bool:
        return self.host <= budget.host and (
            budget.device is None or self.device <= budget.device)


@dataclass(frozen=True)
class Budget:
    """``device`` None: no device budget (serving on the CPU)."""

    host: int
    device: int | None = None


@dataclass(frozen=True)
class Resident:
    """A model in memory (or being loaded), as the planner sees it."""

    name: str
    size: Size
    loaded_at_s: float
    last_used_s: float
    busy: bool  # items queued or running, a request holding it, or still loading


@dataclass(frozen=True)
class Room:
    """The planner's answer: evict these (in order) and the model fits; or it does not fit,
    and may after ``retry_after_s`` (infinite: larger than the budget on its own)."""

    fits: bool
    evict: tuple[str, ...] = ()
    retry_after_s: float = 0.0
    reason: str = ""


def make_room(residents: Sequence[Resident], need: Size, budget: Budget, *, now_s: float,
              min_residency_s: float) -> Room:
    """Evictions that make room for ``need`` next to ``residents`` within ``budget``."""
    if not need.within(budget):
        return Room(False, retry_after_s=math.inf, reason=(
            f"it needs {_mib(need, budget)}, more than the whole budget of {_mib(budget)}"))
    used = sum((r.size for r in residents), Size())
    if (used + need).within(budget):
        return Room(True)
    evictable = sorted((r for r in residents if not r.busy
                        and now_s - r.loaded_at_s >= min_residency_s),
                       key=lambda r: (r.last_used_s, r.name))
    chosen: list[str] = []
    for resident in evictable:
        used = used - resident.size
        chosen.append(resident.name)
        if (used + need).within(budget):
            return Room(True, tuple(chosen))
    waits = [r.loaded_at_s + min_residency_s - now_s for r in residents
             if not r.busy and now_s - r.loaded_at_s < min_residency_s]
    busy = sum(1 for r in residents if r.busy)
    return Room(False, retry_after_s=max(1.0, min(waits)) if waits else 1.0, reason=(
        f"the budget of {_mib(budget)} is held by {len(residents)} resident models "
        f"({busy} busy, {len(waits)} within their {min_residency_s:g} s minimum residency)"))


def _mib(size: Size | Budget, budget: Budget | None = None) -> str:
    def mib(n: int) -> str:
        return f"{n / 2**20:.1f} MiB"

    shown_budget = budget if budget is not None else size
    text = f"{mib(size.host)} of host memory"
    if shown_budget.device is not None and size.device is not None:
        text += f" and {mib(size.device)} of device memory"
    return text
