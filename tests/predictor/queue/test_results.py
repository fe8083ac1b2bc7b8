"""Result writes against a real redis-server: idempotent, and the stored one is published."""

from __future__ import annotations

import asyncio

from predictor.queue import QueueKeys, ResultStore, decode_record, ok_record
from tests.support import wait_for
from tests.support.redis import RedisServer


def test_a_redelivered_result_never_overwrites_the_first(redis_server: RedisServer) -> None:
    import redis.asyncio as aioredis

    keys = QueueKeys("idem", "1")
    sync = redis_server.client()
    pubsub = sync.pubsub(ignore_subscribe_messages=True)
    pubsub.subscribe("chan")

    async def go() -> tuple[bytes, bytes]:
        client = aioredis.Redis.from_url(redis_server.url)
        store = ResultStore(client, keys, ttl_s=30)
        first = await store.deliver("r1", "chan", ok_record("r1", ["first"]))
        second = await store.deliver("r1", "chan", ok_record("r1", ["second"]))
        await client.aclose()
        return first, second

    first, second = asyncio.run(go())
    assert decode_record(first)["results"] == ["first"]
    assert decode_record(second)["results"] == ["first"]  # the standing result, not ours
    assert decode_record(sync.get(keys.result("r1")))["results"] == ["first"]
    assert 0 < sync.ttl(keys.result("r1")) <= 30
    published: list[object] = []

    def two_notifications() -> bool:
        message = pubsub.get_message(timeout=0.2)  # None for the subscribe confirmation too
        if message is not None:
            published.append(decode_record(message["data"])["results"])
        return len(published) >= 2

    wait_for(two_notifications, timeout_s=10, interval_s=0, what="two notifications")
    assert published == [["first"], ["first"]]
    pubsub.close()
