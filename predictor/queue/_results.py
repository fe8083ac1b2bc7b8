"""Writing results: once, idempotently, then the notification and the acknowledgement.

``SET key value NX GET EX ttl`` sets the key "only if it does not already exist" and
returns the old value, nil when there was none (Redis's SET documentation; NX and GET
together since Redis 7.0): a second delivery of the same request never overwrites the
first result, and the same reply says which result stands. Whichever result is stored is
the one published, so a frontend that missed the first notification and gets a second
one still gets the first answer. ``PUBLISH`` is fire and forget (a subscriber not
connected at that moment never sees the message, Redis's Pub/Sub documentation); the
result key is the fallback.

Answers leave in pipelines (``deliver_all``): the results of any number of requests in
one round trip, then their notifications and one ``XACK`` of all their stream entries in
a second, so an entry is acknowledged only once its result stands. A pipeline is not a
transaction (Redis's pipelining documentation): each command runs, or fails, on its own;
any failure fails the whole call, and the caller's retry is safe because SET NX finds
the results already stored and publishes those.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from predictor.queue._client import execute_pipeline, uses_sharded_pubsub
from predictor.queue._keys import QueueKeys


@dataclass(frozen=True)
class Answer:
    """One request's finished record, where to announce it, and (on a worker) the stream
    entry to acknowledge once it stands."""

    request_id: str
    reply_to: str
    record: bytes
    entry_id: str | None = None


class ResultStore:
    """Stores and announces results of one model version's requests."""

    def __init__(self, client: Any, keys: QueueKeys, ttl_s: int) -> None:
        self._client = client
        self._keys = keys
        self._ttl_s = ttl_s

    async def deliver(self, request_id: str, reply_to: str, record: bytes) -> bytes:
        """Store ``record`` unless a result is there already; publish the stored one.
        Returns the record that stands (ours, or the earlier one)."""
        return (await self.deliver_all([Answer(request_id, reply_to, record)]))[0]

    async def deliver_all(self, answers: Sequence[Answer]) -> list[bytes]:
        """``deliver`` for each answer in two round trips, then XACK of their entries;
        returns the records that stand, in order."""
        if not answers:
            return []
        pipe = self._client.pipeline(transaction=False)
        for answer in answers:
            pipe.set(self._keys.result(answer.request_id), answer.record, nx=True,
                     ex=self._ttl_s, get=True)
        earlier = await execute_pipeline(pipe)
        standing = [answer.record if old is None else bytes(old)
                    for answer, old in zip(answers, earlier, strict=True)]
        pipe = self._client.pipeline(transaction=False)
        # A cluster pipeline is not the client: SPUBLISH is asked for by name there.
        publish = pipe.spublish if uses_sharded_pubsub(self._client) else pipe.publish
        for answer, record in zip(answers, standing, strict=True):
            publish(answer.reply_to, record)
        entries = [answer.entry_id for answer in answers if answer.entry_id is not None]
        if entries:
            pipe.xack(self._keys.stream, QueueKeys.GROUP, *entries)
        await execute_pipeline(pipe)
        return standing

    async def fetch(self, request_ids: list[str]) -> dict[str, bytes]:
        """The stored results among ``request_ids`` (MGET: one slot, one round trip)."""
        if not request_ids:
            return {}
        values = await self._client.mget([self._keys.result(r) for r in request_ids])
        return {r: v for r, v in zip(request_ids, values, strict=True) if v is not None}
