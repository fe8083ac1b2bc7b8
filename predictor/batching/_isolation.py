"""Running a batch so that failing items are isolated: bisection and OOM splits.

This runs on the batcher's device thread. A batch that raises is split in
halves and each half rerun, recursively, until the failing items stand alone;
every other item still gets its result. An out-of-memory error does the same
and also lowers the batch cap to half the size that failed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

T = TypeVar("T")

BatchKind = Literal["ok", "bisect", "oom"]


def is_out_of_memory(exc: BaseException) -> bool:
    """True for ``torch.cuda.OutOfMemoryError`` (matched by class name, so torch
    is never imported here) and anything derived from a class of that name."""
    return any(cls.__name__ == "OutOfMemoryError" for cls in type(exc).__mro__)


def is_bad_input(exc: BaseException) -> bool:
    """The default test for "the input was at fault": ValueError or TypeError."""
    return isinstance(exc, ValueError | TypeError)


@dataclass
class Outcome:
    """What running one batch came to.

    ``results`` by position (None where the item failed), ``failures`` by
    position, ``timings`` as (size, seconds) of the runs that succeeded,
    ``runs`` calls of ``run_batch``, and ``cap``: the lowered batch cap after
    an out-of-memory error (None if none).
    """

    results: list[Any]
    failures: dict[int, BaseException] = field(default_factory=dict)
    timings: list[tuple[int, float]] = field(default_factory=list)
    runs: int = 0
    kind: BatchKind = "ok"
    cap: int | None = None


def run_isolating(
    run_batch: Callable[[list[T]], list[Any]],
    values: list[T],
    cap: int,
    *,
    clock: Callable[[], float],
    is_oom: Callable[[BaseException], bool],
) -> Outcome:
    """Run ``values`` as one batch; on an error, bisect until the failing items
    are alone. ``cap`` is the batch cap in force (lowered on out-of-memory)."""
    outcome = Outcome([None] * len(values))

    def attempt(lo: int, hi: int) -> None:
        outcome.runs += 1
        began = clock()
        try:
            results = run_batch(values[lo:hi])
            if len(results) != hi - lo:
                raise RuntimeError(f"run_batch returned {len(results)} results for "
                                   f"{hi - lo} items")
        except Exception as exc:
            oom = is_oom(exc)
            if oom:
                outcome.kind = "oom"
            elif outcome.kind == "ok":
                outcome.kind = "bisect"
            if hi - lo == 1:
                outcome.failures[lo] = exc  # with OOM: one item too large for the device
                return
            if oom:
                outcome.cap = min(outcome.cap or cap, max(1, (hi - lo) // 2))
            mid = (lo + hi) // 2
            attempt(lo, mid)
            attempt(mid, hi)
            return
        outcome.timings.append((hi - lo, clock() - began))
        outcome.results[lo:hi] = results

    attempt(0, len(values))
    return outcome
