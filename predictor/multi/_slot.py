"""One model's place in a multi-model predictor: its state (Triton's repository index
states), its model when resident, what it measured and when it was used."""

from __future__ import annotations

import asyncio
import gc
from dataclasses import dataclass, field
from typing import Any

from predictor._artifact import Artifact
from predictor._metrics import PredictorMetrics
from predictor._model import BatchingModel
from predictor.multi._catalog import Entry, signature
from predictor.multi._residency import Resident, Size

UNAVAILABLE, LOADING, READY, UNLOADING = "UNAVAILABLE", "LOADING", "READY", "UNLOADING"
RESCAN_INTERVAL_S = 5.0


@dataclass(eq=False)
class Slot:
    """A model of the catalog, resident or not (``ModelHost`` changes it)."""

    entry: Entry
    metrics: PredictorMetrics
    state: str = UNAVAILABLE
    reason: str = "not loaded"
    failed: bool = False  # the last load failed: requests do not retry it
    model: BatchingModel | None = None
    artifact: Artifact | None = None
    size: Size | None = None  # measured after the last load
    load_s: float | None = None  # how long the last load took
    loaded_at: float = 0.0
    last_used: float = 0.0
    users: int = 0
    loading: asyncio.Task[None] | None = None
    retry_after_s: float = 0.0  # no room at the last try: when there may be
    removed: bool = False  # its directory is gone: it leaves once its requests finish
    reserved: Size = field(default_factory=Size)  # while loading: its estimate
    failed_on: tuple[tuple[str, int, int], ...] = ()  # the directory when its load failed
    reloading: bool = False  # a newer version is loading beside this one

    def as_resident(self, *, busy: bool | None = None) -> Resident:
        """The slot as the planner sees it (``busy``: instead of whether it is)."""
        return Resident(self.entry.name, self.size or self.reserved, self.loaded_at,
                        self.last_used, self.busy() if busy is None else busy)

    def index_row(self) -> dict[str, Any]:
        """The repository index's row: state, reason, version, size at its last load."""
        size = self.size or Size()
        return {"name": self.entry.name, "version": self.entry.version, "state": self.state,
                "reason": self.reason, "host_bytes": size.host, "device_bytes": size.device}

    def fail(self, reason: str) -> None:
        """UNAVAILABLE for ``reason``; not tried again until its directory changes or the
        repository's load asks."""
        self.state, self.reason, self.failed = UNAVAILABLE, reason, True
        self.failed_on = signature(self.entry.model_dir)

    def busy(self) -> bool:
        if self.users or self.state in (LOADING, UNLOADING):
            return True
        batcher = self.model._batcher if self.model is not None else None
        return batcher is not None and bool(batcher.queue_depth or batcher.in_flight)


async def release_memory() -> None:
    """Give a dropped model's memory back. Its batcher's cancelled tasks hold it (through
    a reference cycle) until the loop has run their last step: collect after that."""
    import torch

    for _ in range(3):
        await asyncio.sleep(0)
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def shown(size: Size) -> str:
    return f"{size.host / 2**20:.1f} MiB host, {size.device / 2**20:.1f} MiB device"
