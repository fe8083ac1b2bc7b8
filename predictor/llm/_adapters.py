"""Per-tenant LoRA adapters on one served LLM: which engine a generation runs on.

``AdapterRouter`` takes the ``LLMModel``'s place behind the routes (it is ``Generating``
too). A generation's adapter is its tenant's (``Tenant.adapter``, from
``predictor.tenants.CURRENT``, set by the tenant check from the API key); nothing in the
request picks one. No tenant, or a tenant without an adapter: the base model, whose
engine always runs. A tenant whose adapter this server does not serve: 403.

transformers' continuous batching runs one set of weights per batch, so batches cannot
mix adapters: each adapter gets an engine of its own over a merged copy of the base
(``_lora.merged_model``), started when the adapter is first asked for. At most
``--max_resident_adapters`` such engines run at once (the hot set); when another is
needed the least recently used idle one is stopped and its cache and weights freed
(``to_evict``, pure). A generation waits, within its deadline, while every resident
adapter is busy. The adapter's own LoRA weights stay in host memory once read (the cold
set), so a second load reads nothing from disk but the base. Each engine schedules its
own sequences; the tenant check's limits and weights apply before any of them.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import time
from collections import OrderedDict
from collections.abc import AsyncGenerator, Collection, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from predictor._errors import (
    BadInput,
    DeadlineExpired,
    Forbidden,
    ModelUnavailable,
    Overloaded,
    PredictorError,
)
from predictor.llm._lora import AdapterEntry, Lora, merged_model, read_lora
from predictor.llm._metrics import AdapterMetrics
from predictor.llm._model import LLMModel, Piece
from predictor.llm._params import GenerationRequest

if TYPE_CHECKING:
    from common.tenants import Tenant

logger = logging.getLogger("predictor.llm")


def to_evict(resident: Sequence[str], wanted: str, busy: Collection[str],
             limit: int) -> list[str] | None:
    """Which adapters to stop so that ``wanted`` can run: ``resident`` is least recently
    used first (loads under way included), ``busy`` those with generations running.
    ``[]``: nothing to stop; None: no room can be made now (every one is busy)."""
    if wanted in resident:
        return []
    over = len(resident) + 1 - limit
    if over <= 0:
        return []
    idle = [name for name in resident if name not in busy]
    if len(idle) < over:
        return None
    return idle[:over]


class AdapterRouter:
    """The base ``LLMModel`` and its adapters' engines, one generation at a time."""

    def __init__(self, base: LLMModel, adapters: dict[str, AdapterEntry], *, base_dir: Path,
                 max_resident: int, metrics: AdapterMetrics | None = None) -> None:
        self.base = base
        self.config = base.config
        self.name = base.name
        self.version = base.version
        self.draining = False
        self.adapters = adapters
        self.base_dir = base_dir
        self.max_resident = max(1, max_resident)
        self.metrics = metrics
        self._engines: OrderedDict[str, LLMModel] = OrderedDict()  # least recent first
        self._loading: set[str] = set()
        self._busy: dict[str, int] = {}
        self._cold: dict[str, Lora] = {}  # read once, kept in host memory
        self._failed: dict[str, str] = {}  # adapters that can never load here, and why
        self._changed = asyncio.Event()

    # -- which model ---------------------------------------------------------------------
    def adapter_for(self, tenant: Tenant | None) -> str | None:
        """The tenant's adapter (None: the base); Forbidden when it is not served here."""
        if tenant is None or tenant.adapter is None:
            return None
        if tenant.adapter not in self.adapters:
            raise Forbidden(f"tenant {tenant.name} uses adapter {tenant.adapter}, which "
                            f"this server of {self.name} does not serve")
        return tenant.adapter

    @property
    def resident(self) -> list[str]:
        """The adapters whose engines run, least recently used first."""
        return list(self._engines)

    async def generate(
        self, request: GenerationRequest, *, timeout_ms: float, arrived: float | None = None
    ) -> AsyncGenerator[Piece, None]:
        from predictor.tenants import CURRENT

        arrived = time.monotonic() if arrived is None else arrived
        adapter = self.adapter_for(CURRENT.get())
        if adapter is None:
            model = self.base
        else:
            if self.draining:
                raise Overloaded("draining", 0.0, "the server is shutting down")
            model = await self._acquire(adapter, arrived, timeout_ms)
        pieces = model.generate(request, timeout_ms=timeout_ms, arrived=arrived)
        try:
            async for piece in pieces:
                yield piece
        finally:
            await pieces.aclose()  # its sequence is cancelled if it still runs
            if adapter is not None:
                self._release(adapter)

    # -- residency -----------------------------------------------------------------------
    async def _acquire(self, name: str, arrived: float, timeout_ms: float) -> LLMModel:
        """The adapter's model, started if need be; counted busy until ``_release``."""
        while True:
            if name in self._failed:
                raise ModelUnavailable(self._failed[name])
            model = self._engines.get(name)
            if model is not None and not model.engine.healthy() and not self._busy.get(name):
                logger.warning("adapter %s: its engine stopped; starting it again", name)
                del self._engines[name]
                await self._stop(name, [model])
                del model
                continue
            if model is not None:
                self._engines.move_to_end(name)
                self._busy[name] = self._busy.get(name, 0) + 1
                return model
            plan = None
            if name not in self._loading:
                busy = {n for n, count in self._busy.items() if count}
                plan = to_evict([*self._engines, *self._loading], name, busy,
                                self.max_resident)
            if plan is not None:
                break
            left_s = timeout_ms / 1000.0 - (time.monotonic() - arrived)
            self._changed.clear()  # no await since the check: nothing is missed
            try:
                async with asyncio.timeout(max(left_s, 0.0)):
                    await self._changed.wait()
            except TimeoutError:
                raise DeadlineExpired(timeout_ms, (time.monotonic() - arrived) * 1000) from None
        leaving = [(old, self._engines.pop(old)) for old in plan]
        self._loading.add(name)
        self._busy[name] = self._busy.get(name, 0) + 1  # this request's, once loaded
        waiting = [True]
        # The load is a task of its own: a request that goes away while it runs does not
        # leave a started engine behind; the engine is installed when it is ready.
        load = asyncio.ensure_future(self._evict_and_load(name, leaving))
        load.add_done_callback(lambda task: self._loaded(name, task, waiting))
        try:
            await asyncio.shield(load)
        except asyncio.CancelledError:
            if load.done() and not load.cancelled() and load.exception() is None:
                self._release(name)  # installed for this request, which went away
            else:
                waiting[0] = False
            raise
        except BadInput as exc:
            raise ModelUnavailable(self._failed.get(name, str(exc))) from exc
        except PredictorError:
            raise
        except Exception as exc:
            raise ModelUnavailable(f"adapter {name} failed to load: {exc}", 5.0) from exc
        return self._engines[name]

    async def _evict_and_load(self, name: str, leaving: list[tuple[str, LLMModel]]) -> LLMModel:
        # Fetched, checked and read before anyone leaves: a bad adapter evicts nobody.
        try:
            await asyncio.to_thread(self._read, name)
        except BaseException:
            for old, model in reversed(leaving):  # back, least recently used first
                self._engines[old] = model
                self._engines.move_to_end(old, last=False)
            raise
        while leaving:
            old, model = leaving.pop(0)
            await self._stop(old, [model])
            del model
            if self.metrics is not None:
                self.metrics.evicted(old)
        started = time.monotonic()
        model = await asyncio.to_thread(self._load, name)
        logger.info("adapter %s: engine started in %.1f s", name, time.monotonic() - started)
        if self.metrics is not None:
            self.metrics.load_seconds(time.monotonic() - started)
        return model

    def _loaded(self, name: str, task: asyncio.Future[LLMModel], waiting: list[bool]) -> None:
        """The load's end, on the event loop, before its requester resumes."""
        self._loading.discard(name)
        self._changed.set()
        error = None if task.cancelled() else task.exception()
        if task.cancelled() or error is not None:
            self._busy[name] -= 1
            if isinstance(error, BadInput):  # the artifact itself: never tried again
                self._failed[name] = f"adapter {name} cannot be served: {error}"
                logger.error("%s", self._failed[name])
            else:
                logger.error("adapter %s failed to load: %s", name, error)
            if self.metrics is not None:
                self.metrics.failed(name)
            return
        self._engines[name] = task.result()
        if not waiting[0]:
            self._busy[name] -= 1
        if self.metrics is not None:
            self.metrics.loaded(name, self.resident)

    def _release(self, name: str) -> None:
        self._busy[name] -= 1
        self._changed.set()

    def _read(self, name: str) -> Lora:
        """The adapter's weights: fetched, checked and read once, then kept (blocking)."""
        lora = self._cold.get(name)
        if lora is None:
            entry = self.adapters[name]
            entry.fetch_if_needed()
            lora = self._cold[name] = read_lora(name, entry.adapter_dir)
            logger.info("adapter %s version %d: %d LoRA tensors, %.1f MiB in host memory",
                        name, entry.version, len(lora.weights), lora.nbytes / 2**20)
        return lora

    def _load(self, name: str) -> LLMModel:
        """Merge the adapter into a copy of the base and start an engine over it.
        Blocking: on a thread."""
        from predictor.llm._engine import TransformersEngine

        lora = self._read(name)
        model = merged_model(self.base_dir, lora, self.config.device, self.config.dtype)
        base = self.base
        cache_bytes = int(self.config.kv_cache_memory_mb * 2**20)
        # Without --kv_cache_memory_mb the engine would take 90 percent of the memory
        # free: an adapter's gets as many blocks as the base's instead.
        blocks = None if cache_bytes else (base.engine.stats().kv_blocks_total or None)
        engine = TransformersEngine(model, eos_token_ids=base.engine.eos_token_ids,
                                    vocab_size=len(base.tokenizer), num_blocks=blocks,
                                    cache_bytes=cache_bytes)
        engine.start()
        return LLMModel(self.config, tokenizer=base.tokenizer, engine=engine,
                        version=base.version, context_tokens=base.context_tokens,
                        metrics=base.metrics)

    async def _stop(self, name: str, holder: list[LLMModel]) -> None:
        """Stop an engine and free its cache and weights (``holder``: its last reference)."""
        await asyncio.to_thread(holder[0].stop)
        holder.clear()
        await asyncio.to_thread(_free_memory)
        logger.info("adapter %s: engine stopped (resident: %s)", name,
                    ", ".join(self._engines) or "none")
        if self.metrics is not None:
            self.metrics.resident(self.resident)

    # -- the server's life ---------------------------------------------------------------
    async def healthy(self) -> bool:
        return not self.draining and await self.base.healthy()

    async def drain(self, timeout_s: float) -> None:
        self.draining = True
        await asyncio.gather(self.base.drain(timeout_s),
                             *(m.drain(timeout_s) for m in list(self._engines.values())))

    def stop(self) -> None:
        for model in list(self._engines.values()):
            model.stop()
        self._engines.clear()
        self.base.stop()


def _free_memory() -> None:
    gc.collect()
    try:
        import torch

        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    except ImportError:  # pragma: no cover - torch is a dependency
        pass


def with_adapters(base: LLMModel, adapters: dict[str, AdapterEntry], *,
                  base_dir: Path) -> AdapterRouter:
    """The router over ``base`` and ``adapters`` (``_lora.read_adapter_catalog``; none:
    every tenant with an adapter gets 403), with their metrics."""
    config = base.config
    metrics = None
    if adapters:
        metrics = AdapterMetrics(config.model_name, base.version, config.role,
                                 sorted(adapters))
    return AdapterRouter(base, adapters, base_dir=base_dir,
                         max_resident=config.max_resident_adapters, metrics=metrics)
