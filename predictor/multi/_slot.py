"""One model's place in a multi-model predictor: its state (Triton's repository index
states), its model when resident, what it measured and when it was used."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from predictor._artifact import Artifact
from predictor._metrics import PredictorMetrics
from predictor._model import BatchingModel
from predictor.multi._catalog import Entry
from predictor.multi._residency import Size

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

    def busy(self) -> bool:
        if self.users or self.state in (LOADING, UNLOADING):
            return True
        batcher = self.model._batcher if self.model is not None else None
        return batcher is not None and bool(batcher.queue_depth or batcher.in_flight)
