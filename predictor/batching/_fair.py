"""The fair order of the batcher's queue: start-time fair queuing across flows.

Start-time fair queuing (Goyal, Vin and Cheng, SIGCOMM 1996): a flow is one tenant's
requests (one flow when there are no tenants). Each item gets a start tag
``max(V, the flow's last finish tag)`` and its flow's finish tag moves on by
``1 / weight``; the queue is kept sorted by tag and ``V`` is the largest tag
dispatched so far. With one flow the tags only grow, so the queue is plain FIFO and
every item is appended. With several, a flow that sends more than its share queues
behind its own backlog, and a light flow's item goes in near the head.

The batcher (``_batcher``) uses the order three ways: the policy's admission predicts a
request's finish from the items ahead of it in this order (so the flooding flow is
refused with 429 and a light one admitted), dispatch takes the head, and a full queue
pushes out the requests tagged last to admit an earlier-tagged one (``tail_requests``).
Pure bookkeeping, standard library only.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from typing import Protocol


class Tagged(Protocol):
    @property
    def tag(self) -> float: ...


class FairOrder:
    """Each flow's last finish tag, and V."""

    def __init__(self) -> None:
        self.virtual = 0.0
        self._finish: dict[str | None, float] = {}

    def start(self, flow: str | None) -> float:
        """The start tag the next request of ``flow`` would get."""
        return max(self.virtual, self._finish.get(flow, 0.0))

    def tags(self, flow: str | None, n: int, weight: float) -> list[float]:
        """Tag ``n`` items of an admitted request of ``flow`` (weight > 0)."""
        if not weight > 0:
            raise ValueError(f"weight must be > 0, got {weight!r}")
        start, step = self.start(flow), 1.0 / weight
        self._finish[flow] = start + n * step
        return [start + i * step for i in range(n)]

    def dispatched(self, items: Sequence[Tagged]) -> None:
        self.virtual = max(self.virtual, max(item.tag for item in items))


def position(queue: Sequence[Tagged], tag: float) -> int:
    """Where an item tagged ``tag`` goes: after every queued item tagged <= it."""
    if not queue or queue[-1].tag <= tag:
        return len(queue)  # the common case, and the only one with one flow
    return bisect.bisect_right([item.tag for item in queue], tag)
