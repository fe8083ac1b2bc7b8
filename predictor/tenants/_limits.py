"""Per-tenant limits: request and generated-token rates (the ``limits`` library) and
requests in flight.

Why ``limits``: it is the rate limiter Flask-Limiter and SlowAPI are built on, with the
same strategies in memory and in Redis (Lua scripts, so a check and its hit are one
atomic step), and an asyncio API. Its moving window ("20 per 2 seconds": at most 20
requests in any 2 s) gives a tenant a burst of 20 and 10 a second sustained, what a
token bucket of 20 filling at 10/s gives, and refuses exactly at the window's edge.

Where the count lives:

- one predictor: in the process (``MemoryStorage``);
- queue mode (``--queue_url``): in the queue's Redis, over the frontends' own
  connection pool, so two frontends enforce one limit between them (the keys are
  ``LIMITS:modelctl-tenant/...``; Redis Cluster is not supported yet).

Generated tokens (task llm) are known only once a generation ends: they are charged
then (``charge_tokens``), up to what the window holds, and a request is refused while
its tenant's token window is full. ``concurrent`` (requests, or streams, in flight) is
counted in the process: in queue
mode each frontend enforces it on its own.
"""

from __future__ import annotations

import logging
import math
import time
from typing import TYPE_CHECKING, Any

from predictor._errors import QueueUnavailable, Throttled

if TYPE_CHECKING:
    from common.tenants import Tenant

NAMESPACE = "modelctl-tenant"
logger = logging.getLogger("predictor.tenants")


class TenantLimits:
    """Admission by each tenant's rate, and its slots in flight."""

    def __init__(self, storage: Any) -> None:
        from limits.aio.strategies import MovingWindowRateLimiter

        self._limiter = MovingWindowRateLimiter(storage)
        self._items: dict[str, Any] = {}
        self._inflight: dict[str, int] = {}

    @classmethod
    def in_memory(cls) -> TenantLimits:
        from limits.aio.storage import MemoryStorage

        return cls(MemoryStorage())

    @classmethod
    def on_redis(cls, client: Any) -> TenantLimits:
        """Limits shared through the Redis of ``client`` (the queue's, redis-py asyncio)."""
        from limits.aio.storage import RedisStorage

        pool = getattr(client, "connection_pool", None)
        if pool is None:
            raise ValueError("tenant limits need a single Redis or Sentinel, not a Cluster")
        return cls(RedisStorage("async+redis://", implementation="redispy",
                                connection_pool=pool))

    def _item(self, rate: str) -> Any:
        item = self._items.get(rate)
        if item is None:
            from limits import parse

            parsed = parse(rate)
            item = self._items[rate] = type(parsed)(parsed.amount, parsed.multiples,
                                                    NAMESPACE)
        return item

    async def admit(self, tenant: Tenant) -> None:
        """Count one request of ``tenant``, or raise Throttled (nothing counted)."""
        if tenant.concurrent is not None and self._inflight.get(tenant.name, 0) >= \
                tenant.concurrent:
            raise Throttled(f"tenant {tenant.name} has {tenant.concurrent} requests in "
                            "flight, its limit: retry when one has finished", 1.0)
        if tenant.requests is not None:
            item = self._item(tenant.requests)
            try:
                admitted = await self._limiter.hit(item, tenant.name)
                stats = None if admitted else await self._limiter.get_window_stats(
                    item, tenant.name)
            except Exception as exc:  # the storage (Redis) is away: as the queue would be
                raise QueueUnavailable(f"tenant limits: Redis did not answer "
                                       f"({type(exc).__name__})") from None
            if stats is not None:
                wait = max(1.0, math.ceil(stats.reset_time - time.time()))
                raise Throttled(f"tenant {tenant.name} is over its rate of {tenant.requests}",
                                wait)
        if tenant.tokens is not None:
            await self._refuse_if_spent(tenant, tenant.tokens, "generated-token")
        self._inflight[tenant.name] = self._inflight.get(tenant.name, 0) + 1

    async def _refuse_if_spent(self, tenant: Tenant, rate: str, what: str) -> None:
        item = self._item(rate)
        try:
            stats = await self._limiter.get_window_stats(item, tenant.name, "tokens")
        except Exception as exc:
            raise QueueUnavailable(f"tenant limits: Redis did not answer "
                                   f"({type(exc).__name__})") from None
        if stats.remaining <= 0:
            wait = max(1.0, math.ceil(stats.reset_time - time.time()))
            raise Throttled(f"tenant {tenant.name} is over its {what} rate of {rate}", wait)

    async def charge_tokens(self, tenant: Tenant, tokens: int) -> None:
        """Count ``tokens`` generated for ``tenant`` (after its request), up to what its
        window holds: the next request is refused while the window is full."""
        if tenant.tokens is None or tokens <= 0:
            return
        item = self._item(tenant.tokens)
        try:
            if not await self._limiter.hit(item, tenant.name, "tokens", cost=tokens):
                stats = await self._limiter.get_window_stats(item, tenant.name, "tokens")
                if stats.remaining > 0:
                    await self._limiter.hit(item, tenant.name, "tokens",
                                            cost=stats.remaining)
        except Exception:  # counted late is still counted next time; never fail the answer
            logger.warning("tenant %s: generated tokens not counted (limits storage away)",
                           tenant.name)

    def release(self, tenant: Tenant) -> None:
        left = self._inflight.get(tenant.name, 0) - 1
        if left > 0:
            self._inflight[tenant.name] = left
        else:
            self._inflight.pop(tenant.name, None)
