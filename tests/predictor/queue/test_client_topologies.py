"""One contract, three topologies: every Redis call the frontend and the worker make,
through ``connect``, against a real single server, a Sentinel-managed master and a
three-master Cluster on loopback."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from predictor.queue import QueueKeys, ResultStore, decode_record, ok_record
from predictor.queue._backpressure import depth_of
from predictor.queue._client import connect, redis_errors, uses_sharded_pubsub
from predictor.queue._replies import ReplyRouter
from predictor.queue._results import Answer
from predictor.queue._trim import trim_acknowledged
from tests.support.redis import RedisServer
from tests.support.redis_ha import RedisCluster, SentinelSet, start_server

TOPOLOGIES = ["redis_server", "redis_sentinel_shared", "redis_cluster"]


@pytest.fixture(params=TOPOLOGIES)
def topology(request: pytest.FixtureRequest) -> tuple[str, Any]:
    name = str(request.param)
    found: RedisServer | SentinelSet | RedisCluster = request.getfixturevalue(name)
    return name, found


async def _contract(url: str, keys: QueueKeys) -> dict[str, Any]:
    client = connect(url, socket_timeout_s=2.0, max_connections=8)
    seen: dict[str, Any] = {"sharded": uses_sharded_pubsub(client), "ping": await client.ping()}
    results = ResultStore(client, keys, ttl_s=30)
    # No sweep during the test: a resolved waiter proves the notification itself arrived.
    router = ReplyRouter(client, keys, keys.reply("fe"), results, sweep_interval_s=300)
    await router.start()
    seen["subscribed"] = router.is_subscribed
    try:
        await client.xgroup_create(keys.stream, QueueKeys.GROUP, id="0", mkstream=True)
        waiter = router.expect("r1")
        await client.xadd(keys.stream, {"request_id": "r1"})
        seen["depth"] = depth_of(await client.xinfo_groups(keys.stream), QueueKeys.GROUP)
        reply = await client.xreadgroup(QueueKeys.GROUP, "w1", {keys.stream: ">"}, count=4,
                                        block=500)
        entry_id = reply[0][1][0][0]
        _cursor, claimed, *_ = await client.xautoclaim(keys.stream, QueueKeys.GROUP, "w2", 0,
                                                      start_id="0-0", count=1)
        seen["claimed"] = [e for e, _ in claimed] == [entry_id]
        rows = await client.xpending_range(keys.stream, QueueKeys.GROUP, entry_id, entry_id, 1)
        seen["deliveries"] = rows[0]["times_delivered"]
        await results.deliver("r1", router.channel, ok_record("r1", ["first"]))
        seen["notified"] = (await asyncio.wait_for(waiter, 5))["results"]
        stands = await results.deliver("r1", router.channel, ok_record("r1", ["second"]))
        seen["stands"] = decode_record(stands)["results"]
        seen["fetched"] = sorted(await results.fetch(["r1", "absent"]))
        # A batch's answers in two pipelines (SPUBLISH on Cluster), its entry acknowledged.
        waiter = router.expect("r3")
        stood = await results.deliver_all([
            Answer("r1", router.channel, ok_record("r1", ["third"]), entry_id),
            Answer("r3", router.channel, ok_record("r3", ["r3"]))])
        seen["batch_stands"] = [decode_record(record)["results"] for record in stood]
        seen["batch_notified"] = (await asyncio.wait_for(waiter, 5))["results"]
        seen["pending_after_ack"] = (await client.xpending(keys.stream, QueueKeys.GROUP))[
            "pending"]
        await client.hset(keys.workers, "w1", "{}")
        seen["workers"] = await client.hgetall(keys.workers)
        await client.xadd(keys.stream, {"request_id": "r2"})
        await client.xreadgroup(QueueKeys.GROUP, "w1", {keys.stream: ">"}, count=4, block=500)
        seen["trimmed"] = await trim_acknowledged(client, keys.stream, approximate=False)
        # A burst far past the pool's 8 connections waits for them instead of failing.
        burst = await asyncio.gather(*(client.xadd(keys.stream, {"i": str(i)})
                                       for i in range(300)), return_exceptions=True)
        seen["burst_errors"] = [type(e).__name__ for e in burst if isinstance(e, BaseException)]
        await client.hdel(keys.workers, "w1")
    finally:
        await router.close()
        await client.aclose()
    return seen


def test_every_call_works_on_each_topology(topology: tuple[str, Any]) -> None:
    name, found = topology
    keys = QueueKeys("contract", name.replace("_", "-"))
    seen = asyncio.run(_contract(found.url, keys))
    assert seen == {
        "sharded": name == "redis_cluster", "ping": True, "subscribed": True,
        "depth": (1, 1, 0), "claimed": True, "deliveries": 2, "notified": ["first"],
        "stands": ["first"], "fetched": ["r1"], "batch_stands": [["first"], ["r3"]],
        "batch_notified": ["r3"], "pending_after_ack": 0, "workers": {b"w1": b"{}"}, "trimmed": 1,
        "burst_errors": []}
    if isinstance(found, RedisCluster):  # everything on the version's shard, sharded Pub/Sub
        owner = found.owner(found.keyslot(keys.tag))
        held = found.keys_by_node(f"modelctl:{keys.tag}:*")
        assert [port for port, names in held.items() if names] == [owner]
        assert {found.keyslot(k) for k in held[owner]} == {found.keyslot(keys.tag)}


def test_a_write_refused_for_want_of_replicas_reads_as_unavailable(tmp_path: Path) -> None:
    """``min-replicas-to-write`` with no replica: NOREPLICAS is a 503 (and retried by the
    callers), like a lost connection, not a 500."""
    port, process = start_server(tmp_path, "--min-replicas-to-write", "1")

    async def write() -> list[BaseException | None]:
        client = connect(f"redis://127.0.0.1:{port}/0", socket_timeout_s=2.0)
        results = ResultStore(client, QueueKeys("refused", "1"), ttl_s=30)
        refusals: list[BaseException | None] = []
        for call in (lambda: client.xadd("s", {"a": "1"}),  # one command, and a pipeline
                     lambda: results.deliver_all([Answer("r1", "c", b"{}", "1-1")])):
            try:
                await call()
                refusals.append(None)
            except BaseException as exc:
                refusals.append(exc)
        await client.aclose()
        return refusals

    try:
        refused = asyncio.run(write())
    finally:
        process.stop()
    assert len(refused) == 2
    for exc in refused:
        assert isinstance(exc, redis_errors()) and "NOREPLICAS" in str(exc), exc
