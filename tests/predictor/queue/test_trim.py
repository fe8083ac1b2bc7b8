"""Trimming against a real redis-server: only what every group read and acknowledged goes."""

from __future__ import annotations

import asyncio

from predictor.queue._trim import trim_acknowledged, trim_floor
from tests.support.redis import RedisServer


def test_the_floor_is_the_lowest_unacknowledged_or_unread_entry_of_any_group() -> None:
    groups = [{"name": "workers", "last-delivered-id": "5-0"},
              {"name": b"audit", "last-delivered-id": b"9-1"}]
    assert trim_floor(groups, {"workers": None, "audit": None}) == "5-0"
    assert trim_floor(groups, {"workers": "3-2", "audit": None}) == "3-2"
    assert trim_floor(groups, {"workers": None, "audit": b"2-0"}) == "2-0"
    assert trim_floor([], {}) is None  # no group: an entry may still be unread
    assert trim_floor([{"name": "workers", "last-delivered-id": "0-0"}], {}) is None


def test_only_read_and_acknowledged_entries_are_trimmed(redis_server: RedisServer) -> None:
    import redis.asyncio as aioredis

    stream = "modelctl:{trim:1}:requests"

    async def go() -> tuple[list[bytes], int, list[bytes], list[bytes]]:
        client = aioredis.Redis.from_url(redis_server.url)
        await client.delete(stream)
        ids = [await client.xadd(stream, {"n": str(i)}) for i in range(6)]
        await client.xgroup_create(stream, "workers", id="0")
        # Deliver four: ack the first two, leave #2 and #3 pending; #4 and #5 unread.
        await client.xreadgroup("workers", "w1", {stream: ">"}, count=4)
        await client.xack(stream, "workers", ids[0], ids[1])
        removed = await trim_acknowledged(client, stream, approximate=False)
        left = [entry_id for entry_id, _ in await client.xrange(stream)]
        # Acknowledge everything read so far: the floor moves up to the unread entries.
        await client.xack(stream, "workers", ids[2], ids[3])
        await trim_acknowledged(client, stream, approximate=False)
        after = [entry_id for entry_id, _ in await client.xrange(stream)]
        await client.delete(stream)
        await client.aclose()
        return ids, removed, left, after

    ids, removed, left, after = asyncio.run(go())
    assert removed == 2 and left == ids[2:]  # the acknowledged two went; pending and unread stay
    # Below the group's last-delivered ID only: the unread two (and that one) stay.
    assert after == ids[3:]
