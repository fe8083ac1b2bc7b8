"""Queue mode past one Redis, with real servers on loopback: a Sentinel failover under
load (the master SIGKILLed), and a three-master Cluster serving two models whose hash
tags fall on different shards. Frontends and workers are real ``python -m predictor``
processes on the fixed-latency task; nothing is restarted."""

from __future__ import annotations

import asyncio
import json
import re
import signal
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support import wait_for
from tests.support.predictor import RunningPredictor, push_fixed_latency
from tests.support.redis_ha import RedisCluster, SentinelSet

TIMEOUT_MS = 4500
# The frontend answers by the request's deadline: its own latency histogram (arrival to
# response) has every request in the 5 s bucket. The client's clock adds its scheduling
# on a small shared machine, so it only bounds a hang (which would run to the timeout).
ANSWERED_BY_LE = "5.0"
HTTP_TIMEOUT_S = TIMEOUT_MS / 1000 + 30.0


async def _send(url: str, name: str, tags: list[str], spacing_s: float,
                ) -> list[tuple[int, Any, float]]:
    """One request per tag, open loop (``spacing_s`` apart): (status, body, seconds)."""
    limits = httpx.Limits(max_connections=500, max_keepalive_connections=500)
    async with httpx.AsyncClient(limits=limits, timeout=HTTP_TIMEOUT_S) as client:
        async def one(i: int, tag: str) -> tuple[int, Any, float]:
            await asyncio.sleep(i * spacing_s)
            started = time.monotonic()
            r = await client.post(f"{url}/v1/models/{name}:predict", json={"instances": [tag]})
            return r.status_code, r.json(), time.monotonic() - started

        return list(await asyncio.gather(*(one(i, t) for i, t in enumerate(tags))))


def _in_thread(coro: Any) -> tuple[threading.Thread, list[Any]]:
    box: list[Any] = []
    thread = threading.Thread(target=lambda: box.append(asyncio.run(coro)), daemon=True)
    thread.start()
    return thread, box


@pytest.fixture
def own_pairs() -> Iterator[list[RunningPredictor]]:
    """The test's frontends and workers, stopped by PID when it ends. Requested after the
    Redis fixture, so they stop while their Redis still runs: a worker whose Redis is
    gone spends its drain timeout retrying it, and the session's stop SIGKILLs it."""
    started: list[RunningPredictor] = []
    yield started
    for predictor in started:  # all drain at once, then each is waited for
        predictor.proc.signal(signal.SIGTERM)
    for predictor in started:
        predictor.proc.stop()


def _pair(start: Callable[..., RunningPredictor], name: str, url: str,
          own: list[RunningPredictor]) -> tuple[RunningPredictor, RunningPredictor]:
    common = ("--queue_url", url, "--request_timeout_ms", str(TIMEOUT_MS),
              "--queue_claim_timeout_ms", "1000")
    worker = start(name, "latest", *common, "--queue_role", "worker", "--max_batch_wait_ms", "5")
    frontend = start(name, "latest", *common, "--queue_role", "frontend")
    own += [frontend, worker]
    return frontend, worker


def _answered_by(predictor: RunningPredictor, le: str) -> tuple[float, float]:
    """(requests answered within ``le`` seconds, all requests), from the server's metrics."""
    text = predictor.metrics()
    within = re.search(rf'^modelctl_request_duration_seconds_bucket{{[^}}]*le="{le}"[^}}]*}} '
                       r"(\S+)$", text, re.M)
    count = re.search(r"^modelctl_request_duration_seconds_count{[^}]*} (\S+)$", text, re.M)
    assert within and count, "no request latency histogram on /metrics"
    return float(within.group(1)), float(count.group(1))


def _version(predictor: RunningPredictor) -> int:
    return int(json.loads((predictor.model_dir / "MANIFEST.json").read_text())["version"])


def test_a_sentinel_failover_under_load_answers_every_request_once(
        start_predictor: Callable[..., RunningPredictor], registry_dir: Path,
        redis_sentinel: SentinelSet, own_pairs: list[RunningPredictor]) -> None:
    name = "queue-ha-sentinel"
    push_fixed_latency(registry_dir, name, latency_ms=10, max_batch_size=32)
    frontend, worker = _pair(start_predictor, name, redis_sentinel.url, own_pairs)
    old_master = redis_sentinel.master_port()
    tags = [f"fo-{i}" for i in range(800)]
    thread, box = _in_thread(_send(frontend.url, name, tags, spacing_s=0.01))  # 100 req/s
    stream = f"modelctl:{{{name}:{_version(frontend)}}}:requests"
    wait_for(lambda: redis_sentinel.client(old_master).xinfo_groups(stream)[0]["entries-read"]
             >= 100, timeout_s=20, what="the worker to have read 100 requests")
    redis_sentinel.kill(old_master, signal.SIGKILL)
    killed_at = time.monotonic()
    new_master = wait_for(
        lambda: (p := redis_sentinel.master_port()) not in (0, old_master)
        and redis_sentinel.is_master(p) and p, timeout_s=20,
        what="the sentinels to promote the replica")
    promoted_s = time.monotonic() - killed_at
    thread.join(timeout=60)
    assert box, "the load did not finish"
    results = box[0]
    codes = [code for code, _, _ in results]
    assert set(codes) <= {200, 429, 503}, sorted(set(codes))
    within, total = _answered_by(frontend, ANSWERED_BY_LE)
    assert within == total >= len(tags), (within, total)  # by its deadline, never a hang
    for tag, (code, body, _) in zip(tags, results, strict=True):
        if code == 200:
            assert body["predictions"] == [tag]  # its own answer, never a neighbour's
    lost = [body for code, body, _ in results if code == 429 and "expired" in body["error"]]
    slowest_s = max(elapsed for _, _, elapsed in results)
    print(f"\nfailover: promoted in {promoted_s:.1f} s; {codes.count(200)} answered 200, "
          f"{codes.count(503)} refused 503, {codes.count(429)} 429 ({len(lost)} waited out "
          f"their deadline: enqueued, then lost or stranded); slowest {slowest_s:.1f} s")
    # After the failover: new requests are served again, nothing restarted.
    wait_for(lambda: frontend.v1(["after"]).status_code == 200, timeout_s=20,
             what="a 200 after the failover")
    after = asyncio.run(_send(frontend.url, name, [f"after-{i}" for i in range(50)], 0.0))
    assert [code for code, _, _ in after] == [200] * 50
    assert [body["predictions"] for _, body, _ in after] == [[f"after-{i}"] for i in range(50)]
    assert frontend.proc.poll() is None and worker.proc.poll() is None
    wait_for(lambda: redis_sentinel.client(new_master).xinfo_groups(stream)[0]["pending"] == 0,
             timeout_s=10, what="nothing pending on the new master")


def test_a_cluster_serves_two_models_each_on_its_own_shard(
        start_predictor: Callable[..., RunningPredictor], registry_dir: Path,
        redis_cluster: RedisCluster, own_pairs: list[RunningPredictor]) -> None:
    # Names whose hash tags {name:1} fall in different thirds of the 16384 slots.
    names = ("ha-cluster-a", "ha-cluster-b")
    for name in names:
        push_fixed_latency(registry_dir, name, latency_ms=10, max_batch_size=32)
    pairs = {name: _pair(start_predictor, name, redis_cluster.url, own_pairs)
             for name in names}
    tags = {name: f"{{{name}:{_version(pairs[name][0])}}}" for name in names}
    owners = {name: redis_cluster.owner(redis_cluster.keyslot(tags[name])) for name in names}
    assert owners[names[0]] != owners[names[1]], f"choose other names: {owners}"

    async def both() -> dict[str, list[tuple[int, Any, float]]]:
        runs = [_send(pairs[n][0].url, n, [f"{n}-{i}" for i in range(200)], 0.0)
                for n in names]
        return dict(zip(names, await asyncio.gather(*runs), strict=True))

    for name, results in asyncio.run(both()).items():
        assert [code for code, _, _ in results] == [200] * 200, name
        assert [body["predictions"] for _, body, _ in results] == [
            [f"{name}-{i}"] for i in range(200)]
    by_node = redis_cluster.keys_by_node("modelctl:*")
    for name in names:
        mine = {port: [k for k in keys if tags[name] in k] for port, keys in by_node.items()}
        holders = [port for port, keys in mine.items() if keys]
        assert holders == [owners[name]], (name, mine)
        keys = mine[owners[name]]
        assert {f"modelctl:{tags[name]}:requests", f"modelctl:{tags[name]}:workers"} <= set(keys)
        assert any(":result:" in k for k in keys)
        assert {redis_cluster.keyslot(k) for k in keys} == {redis_cluster.keyslot(tags[name])}
    for port in {owners[n] for n in names}:  # replies went by sharded Pub/Sub, on the shard
        node = redis_cluster.node(port)
        assert node.execute_command("PUBSUB", "SHARDCHANNELS", "modelctl:*"), port
        assert not node.execute_command("PUBSUB", "CHANNELS", "modelctl:*"), port
