"""Writing a result: once, idempotently, then the notification.

``SET key value NX EX ttl`` sets the key "only if it does not already exist" and replies
nil otherwise (Redis's SET documentation): a second delivery of the same request never
overwrites the first result. Whichever result is stored is the one published, so a
frontend that missed the first notification and gets a second one still gets the first
answer. ``PUBLISH`` is fire and forget (a subscriber not connected at that moment never
sees the message, Redis's Pub/Sub documentation); the result key is the fallback.
"""

from __future__ import annotations

from typing import Any

from predictor.queue._keys import QueueKeys


class ResultStore:
    """Stores and announces results of one model version's requests."""

    def __init__(self, client: Any, keys: QueueKeys, ttl_s: int) -> None:
        self._client = client
        self._keys = keys
        self._ttl_s = ttl_s

    async def deliver(self, request_id: str, reply_to: str, record: bytes) -> bytes:
        """Store ``record`` unless a result is there already; publish the stored one.
        Returns the record that stands (ours, or the earlier one)."""
        key = self._keys.result(request_id)
        stored = await self._client.set(key, record, nx=True, ex=self._ttl_s)
        if not stored:
            earlier = await self._client.get(key)
            if earlier is not None:
                record = earlier
        await self._client.publish(reply_to, record)
        return record

    async def fetch(self, request_ids: list[str]) -> dict[str, bytes]:
        """The stored results among ``request_ids`` (MGET: one slot, one round trip)."""
        if not request_ids:
            return {}
        values = await self._client.mget([self._keys.result(r) for r in request_ids])
        return {r: v for r, v in zip(request_ids, values, strict=True) if v is not None}
