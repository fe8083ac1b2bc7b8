"""The models of a multi-model predictor: loaded on demand, evicted least recently used.

``ModelHost`` keeps one ``Slot`` per model of the catalog (``_catalog``). A request
takes the model with ``using(name, deadline)``: that pins it (a pinned model is never
evicted), loads it if it is not resident, and hands over its ``BatchingModel``. Loads:

- run on their own threads (``--max_concurrent_loads`` at once), never on the event loop
  or the device thread, so other models keep serving; concurrent first requests of one
  model share one load;
- first make room (``_residency.make_room``): evict idle models past their minimum
  residency, least recently used first; no room now: 429 with ``Retry-After`` when the
  first resident's residency ends;
- verify the artifact (checksums) and measure the model after it (``_measure``);
- a load that fails marks the model UNAVAILABLE with the reason and is not retried by
  requests (503 with the reason) until the repository's ``load`` asks again.

A request whose deadline cannot cover the model's load time (its last one, else the
longest any model took) gets 429 with ``Retry-After`` sized to it, and the load goes on,
so that the retry finds the model resident. States are Triton's repository index's:
UNAVAILABLE (with a reason: not loaded, evicted, unloaded, or the failure), LOADING,
READY, UNLOADING.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import math
import time
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from predictor._artifact import Artifact, open_artifact
from predictor._build import build_model
from predictor._config import ServerConfig
from predictor._errors import ModelUnavailable, ModelUnknown, Overloaded, PredictorError
from predictor._metrics import PredictorMetrics
from predictor._model import BatchingModel
from predictor.batching._device import SharedDevice
from predictor.multi._catalog import Entry, read_catalog, scan, signature
from predictor.multi._measure import estimate, measure
from predictor.multi._metrics import MultiMetrics
from predictor.multi._residency import Budget, Room, Size, make_room
from predictor.multi._slot import (
    LOADING,
    READY,
    RESCAN_INTERVAL_S,
    UNAVAILABLE,
    UNLOADING,
    Slot,
    release_memory,
    shown,
)

logger = logging.getLogger("predictor.multi")

class ModelHost:
    """Every model of ``config.model_dir``, and the one device they share."""

    def __init__(self, config: ServerConfig, *,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.config = config
        self.models_dir = Path(config.model_dir)
        self.budget = Budget(int(config.memory_budget_mb * 2**20),
                             int(config.device_memory_budget_mb * 2**20) or None)
        self.device = SharedDevice()
        self.metrics = MultiMetrics.create()
        self._clock = clock
        self._prepare_pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="prepare")
        self._loaders = ThreadPoolExecutor(config.max_concurrent_loads, thread_name_prefix="load")
        self._load_turns: asyncio.Semaphore | None = None
        self._slots: dict[str, Slot] = {}
        self._catalog = (read_catalog(Path(config.model_catalog)) if config.model_catalog
                         else None)
        self.rescan()

    # -- what is known ---------------------------------------------------------------------
    def rescan(self) -> None:
        """Read the model directory again: new models join, removed idle ones leave."""
        found = self._catalog if self._catalog is not None else scan(self.models_dir)
        for name, entry in found.items():
            slot = self._slots.get(name)
            if slot is None:
                slot = self._slots[name] = Slot(entry, PredictorMetrics.create(
                    name, entry.version or "unknown", self.config.role))
                if entry.problem:
                    slot.reason, slot.failed = entry.problem, True
            elif slot.state == UNAVAILABLE:
                slot.entry = entry
                if (slot.failed and slot.loading is None and not entry.problem
                        and signature(entry.model_dir) != slot.failed_on):
                    slot.failed, slot.reason = False, "not loaded (changed since it failed)"
        for name in [n for n, s in self._slots.items() if n not in found]:
            slot = self._slots[name]
            if slot.state == UNAVAILABLE and slot.loading is None:
                del self._slots[name]
            elif not slot.removed:  # its directory went (KServe's agent deletes it first)
                slot.removed = True
                with contextlib.suppress(RuntimeError):  # no loop yet: nothing is resident
                    asyncio.get_running_loop().create_task(self._retire(slot))

    async def _retire(self, slot: Slot) -> None:
        """A model whose directory is gone: requests in flight finish, then it leaves."""
        if slot.loading is not None:
            with contextlib.suppress(Exception):
                await asyncio.shield(slot.loading)
        if slot.state == READY:
            await self._evict(slot, "removed from the model directory", "removed")
        if self._slots.get(slot.entry.name) is slot:
            del self._slots[slot.entry.name]

    async def watch(self, interval_s: float = RESCAN_INTERVAL_S) -> None:
        """Read the model directory again every ``interval_s`` (the server runs this)."""
        while True:
            await asyncio.sleep(interval_s)
            self.rescan()

    def names(self) -> list[str]:
        return sorted(n for n, s in self._slots.items() if not s.removed)

    def slot(self, name: str) -> Slot:
        if name not in self._slots:
            self.rescan()
        slot = self._slots.get(name)
        if slot is None or slot.removed:
            raise ModelUnknown(f"model {name!r} is not in this predictor's model directory "
                               f"({len(self._slots)} models: GET /v2/repository/index)")
        return slot

    def index(self) -> list[dict[str, Any]]:
        """Every model with its state, reason, version and measured size."""
        self.rescan()
        return [self._slots[name].index_row() for name in self.names()]

    def model(self, name: str) -> BatchingModel | None:
        """The resident model of that name (None: not resident)."""
        slot = self._slots.get(name)
        return slot.model if slot is not None and slot.state == READY else None

    def metrics_of(self, name: str) -> PredictorMetrics | None:
        slot = self._slots.get(name)
        return slot.metrics if slot is not None else None

    # -- serving ---------------------------------------------------------------------------
    @contextlib.asynccontextmanager
    async def using(self, name: str, deadline: float) -> AsyncIterator[BatchingModel]:
        """The resident model, pinned while the request holds it (loaded first if need be;
        ``deadline`` on the host's clock)."""
        slot = self.slot(name)
        while slot.state == UNLOADING:  # being evicted: wait (not pinning it), then reload
            if self._clock() >= deadline:
                raise ModelUnavailable(f"model {name} is being unloaded", retry_after_s=1.0)
            await asyncio.sleep(0.01)
        slot.users += 1
        try:
            model = await self._resident(slot, deadline)
            slot.last_used = self._clock()
            yield model
        finally:
            slot.users -= 1
            slot.last_used = self._clock()

    async def _resident(self, slot: Slot, deadline: float) -> BatchingModel:
        if slot.state == READY and slot.model is not None:
            return slot.model
        name = slot.entry.name
        if slot.failed and slot.loading is None:
            raise ModelUnavailable(f"model {name} is unavailable: {slot.reason}")
        self.metrics.cold_starts.labels(model=name).inc()
        if slot.loading is None:
            self._start_load(slot)
        assert slot.loading is not None
        expected = slot.load_s if slot.load_s is not None else self._longest_load_s()
        remaining = deadline - self._clock()
        if expected is not None and expected > remaining:
            raise Overloaded("deadline", expected, (
                f"model {name} is loading (about {expected:.1f} s), longer than the "
                f"{max(0.0, remaining) * 1000:.0f} ms this request has left"))
        try:
            await asyncio.wait_for(asyncio.shield(slot.loading), max(0.0, remaining))
        except TimeoutError:
            raise Overloaded("deadline", expected or 1.0, (
                f"model {name} is still loading at this request's deadline")) from None
        if slot.state == READY and slot.model is not None:
            return slot.model
        if slot.failed:
            raise ModelUnavailable(f"model {name} is unavailable: {slot.reason}")
        raise Overloaded("memory", slot.retry_after_s, f"model {name} is not resident and "
                         f"cannot be loaded now: {slot.reason}")

    def _longest_load_s(self) -> float | None:
        times = [s.load_s for s in self._slots.values() if s.load_s is not None]
        return max(times) if times else None

    # -- loading and evicting --------------------------------------------------------------
    def _start_load(self, slot: Slot) -> asyncio.Task[None]:
        slot.state, slot.reason, slot.failed = LOADING, "loading", False
        slot.loading = asyncio.get_running_loop().create_task(
            self._load(slot), name=f"load-{slot.entry.name}")
        return slot.loading

    async def load(self, name: str) -> None:
        """Load ``name`` now (the repository's load): retries a failed model too; a
        resident model whose directory now holds another version is reloaded, the old
        version serving until the new one is ready."""
        slot = self.slot(name)
        if slot.state == READY:
            fresh = self._on_disk(name)
            if (fresh is not None and fresh.version != slot.entry.version
                    and not fresh.problem and not slot.reloading):
                slot.reloading = True
                try:
                    await self._reload(slot, fresh)
                finally:
                    slot.reloading = False
            return
        if slot.state == UNLOADING:
            raise ModelUnavailable(f"model {name} is being unloaded", retry_after_s=1.0)
        slot.users += 1  # nothing evicts it between its load and the answer
        try:
            await asyncio.shield(slot.loading or self._start_load(slot))
        finally:
            slot.users -= 1
        if slot.state != READY:
            raise ModelUnavailable(f"model {name} did not load: {slot.reason}",
                                   retry_after_s=slot.retry_after_s or None)

    def _on_disk(self, name: str) -> Entry | None:
        found = self._catalog if self._catalog is not None else scan(self.models_dir)
        return found.get(name)

    async def _reload(self, slot: Slot, fresh: Entry) -> None:
        """The new version loads beside the old one (both count against the budget), then
        takes its place; the old one finishes what it holds and leaves."""
        name = slot.entry.name
        need = estimate(dict(fresh.file_sizes), on_device=self.budget.device is not None)
        others = [s.as_resident(busy=s is slot or None) for s in self._slots.values()
                  if s.state in (READY, LOADING, UNLOADING)]
        room = make_room(others, max(need, slot.size or Size(), key=lambda z: z.host + z.device),
                         self.budget, now_s=self._clock(),
                         min_residency_s=self.config.min_residency_s)
        if not room.fits:
            raise Overloaded("memory", room.retry_after_s, f"no room to load version "
                             f"{fresh.version} of {name} beside version "
                             f"{slot.entry.version}: {room.reason}")
        for victim in room.evict:
            await self._evict(self._slots[victim], "evicted (least recently used)", "lru")
        try:
            async with self._turns():  # a reload is a load: --max_concurrent_loads at once
                started = self._clock()
                model, artifact = await asyncio.get_running_loop().run_in_executor(
                    self._loaders, self._load_blocking, fresh)
        except Exception as exc:
            self.metrics.loaded(name, "failed", None, None)
            raise ModelUnavailable(f"version {fresh.version} of {name} did not load (version "
                                   f"{slot.entry.version} keeps serving): {exc}") from None
        old_model, old_artifact = slot.model, slot.artifact
        slot.entry, slot.model, slot.artifact = fresh, model, artifact
        slot.size, slot.load_s = measure(model.handler), self._clock() - started
        slot.metrics = PredictorMetrics.create(name, fresh.version, self.config.role)
        slot.loaded_at = slot.last_used = self._clock()
        self.metrics.loaded(name, "ok", slot.load_s, slot.size)
        logger.info("reloaded %s: version %s serves", name, fresh.version)
        if old_model is not None:
            await old_model.drain()  # the requests it holds finish on the old version
        if old_artifact is not None:
            old_artifact.close()
        del old_model
        await release_memory()

    def _turns(self) -> asyncio.Semaphore:
        if self._load_turns is None:  # made on the loop that uses it
            self._load_turns = asyncio.Semaphore(self.config.max_concurrent_loads)
        return self._load_turns

    async def _load(self, slot: Slot) -> None:
        name = slot.entry.name
        try:
            async with self._turns():
                if not await self._make_room(slot):
                    return
                started = self._clock()
                model, artifact = await asyncio.get_running_loop().run_in_executor(
                    self._loaders, self._load_blocking, slot.entry)
                slot.load_s = self._clock() - started
                slot.model, slot.artifact, slot.size = model, artifact, measure(model.handler)
                slot.loaded_at = slot.last_used = self._clock()
                slot.state, slot.reason = READY, ""
                self.metrics.loaded(name, "ok", slot.load_s, slot.size)
                logger.info("loaded %s version %s in %.2f s (%s)", name, artifact.version,
                            slot.load_s, shown(slot.size))
                await self._settle(slot)
        except Exception as exc:  # a failed load leaves every other model serving
            reason = str(exc) if isinstance(exc, PredictorError) else (
                f"{type(exc).__name__}: {exc}")
            slot.fail(reason[:500])
            self.metrics.loaded(name, "failed", None, None)
            logger.warning("could not load %s: %s", name, slot.reason)
        finally:
            slot.loading = None

    def _room_for(self, slot: Slot, need: Size) -> Room:
        others = [s.as_resident() for s in self._slots.values()
                  if s is not slot and s.state in (READY, LOADING, UNLOADING)]
        return make_room(others, need, self.budget, now_s=self._clock(),
                         min_residency_s=self.config.min_residency_s)

    async def _make_room(self, slot: Slot) -> bool:
        """Evict what must go for ``slot``; False (and the slot says why) if nothing can."""
        need = slot.size or estimate(dict(slot.entry.file_sizes),
                                     on_device=self.budget.device is not None)
        room = self._room_for(slot, need)
        slot.reserved = need if room.fits else Size()  # what concurrent loads plan around
        if not room.fits:
            slot.state, slot.reason = UNAVAILABLE, room.reason
            if math.isinf(room.retry_after_s):  # larger than the budget: for good
                slot.fail(f"too big for the budget: {room.reason}")
            slot.retry_after_s = 0.0 if slot.failed else room.retry_after_s
            self.metrics.loaded(slot.entry.name, "no_room", None, None)
            return False
        for victim in room.evict:
            await self._evict(self._slots[victim], "evicted (least recently used)", "lru")
        return True

    async def _settle(self, slot: Slot) -> None:
        """After a load: the model may measure more than its estimate (a first load, a task
        without weight files). Evict what must go for it to fit; if nothing may, it leaves
        again itself (429 with the time when there may be room)."""
        assert slot.size is not None
        room = self._room_for(slot, slot.size)
        if not room.fits and math.isinf(room.retry_after_s):  # alone larger than the budget
            await self._evict(slot, room.reason, "too_big", wait_for_users=False)
            slot.fail(f"too big for the budget: {room.reason}")
            return
        if not room.fits:  # the budget is a hard limit: the newcomer leaves again, for now
            logger.warning("%s holds %s, more than its estimate and than the budget leaves "
                           "now: unloaded again (%s)", slot.entry.name, shown(slot.size),
                           room.reason)
            await self._evict(slot, room.reason, "no_room", wait_for_users=False)
            slot.retry_after_s = room.retry_after_s
            return
        for victim in room.evict:
            await self._evict(self._slots[victim], "evicted (least recently used)", "lru")

    async def unload(self, name: str) -> None:
        """Unload ``name`` (the repository's unload): requests in flight finish first."""
        slot = self.slot(name)
        if slot.loading is not None:
            await asyncio.shield(slot.loading)
        if slot.state == READY:
            await self._evict(slot, "unloaded", "unload")

    async def _evict(self, slot: Slot, reason: str, why: str, *,
                     wait_for_users: bool = True) -> None:
        model, artifact = slot.model, slot.artifact
        slot.state, slot.reason = UNLOADING, "unloading"
        while wait_for_users and slot.users:  # an unload waits for the requests holding it
            await asyncio.sleep(0.01)
        if model is not None:
            await model.drain()  # what is queued or running finishes
        slot.model = slot.artifact = None
        slot.state, slot.reason = UNAVAILABLE, reason
        if artifact is not None:
            artifact.close()
        del model
        await release_memory()
        self.metrics.evicted(slot.entry.name, why)
        logger.info("%s %s", reason, slot.entry.name)

    def _load_blocking(self, entry: Entry) -> tuple[BatchingModel, Artifact]:
        config = dataclasses.replace(self.config, model_name=entry.name,
                                     model_dir=str(entry.model_dir), multi_model=False,
                                     model_catalog="")
        entry.fetch_if_needed()  # a catalog's version: from the registry, verified
        artifact = open_artifact(config)
        try:
            model = build_model(config, artifact, device=self.device,
                                prepare_pool=self._prepare_pool)
            return model, artifact
        except BaseException:
            artifact.close()
            raise

    async def close(self, timeout_s: float) -> None:
        """SIGTERM: every resident model finishes what it holds."""
        models = [s.model for s in self._slots.values() if s.model is not None]
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.gather(*(m.drain() for m in models),
                                                  return_exceptions=True), timeout_s)
        self.device.shutdown()
        self._loaders.shutdown(wait=False)
