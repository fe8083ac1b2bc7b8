"""Queue mode end to end: real redis-server, real frontends and workers (python -m
predictor, the fixed-latency task), compared with an in-process predictor."""

from __future__ import annotations

import asyncio
import json
import signal
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from predictor.queue import Entry, QueueKeys, decode_record, encode_entry
from tests.support import wait_for
from tests.support.predictor import RunningPredictor, push_fixed_latency
from tests.support.redis import RedisServer

NAME = "queue-e2e"
TIMEOUT_MS = 30000
WORKER_ARGS = ("--queue_role", "worker", "--queue_claim_timeout_ms", "1000",
               "--queue_max_deliveries", "2", "--max_batch_wait_ms", "5",
               "--request_timeout_ms", str(TIMEOUT_MS))


class Fleet:
    def __init__(self, start: Callable[..., RunningPredictor], redis: RedisServer) -> None:
        self.start = start
        self.redis = redis
        self.frontends = [self._start("--queue_role", "frontend",
                                      "--request_timeout_ms", str(TIMEOUT_MS))
                          for _ in range(2)]
        self.workers = [self.add_worker() for _ in range(2)]
        self.in_process = start(NAME, "latest", "--max_batch_wait_ms", "5")
        version = json.loads((self.in_process.model_dir / "MANIFEST.json").read_text())
        self.stream = f"modelctl:{{{NAME}:{version['version']}}}:requests"

    def _start(self, *args: str) -> RunningPredictor:
        return self.start(NAME, "latest", "--queue_url", self.redis.url, *args)

    def add_worker(self) -> RunningPredictor:
        worker = self._start(*WORKER_ARGS)
        return worker

    def replace_dead_workers(self) -> int:
        dead = [w for w in self.workers if w.proc.poll() is not None]
        for w in dead:
            self.workers.remove(w)
            self.workers.append(self.add_worker())
        return len(dead)


@pytest.fixture(scope="module")
def fleet(start_predictor: Callable[..., RunningPredictor], registry_dir: Path,
          redis_server: RedisServer) -> Fleet:
    push_fixed_latency(registry_dir, NAME, latency_ms=20, max_batch_size=32,
                       allow_exit_items=True)
    return Fleet(start_predictor, redis_server)


def _bodies(n: int) -> list[tuple[str, dict[str, Any]]]:
    out: list[tuple[str, dict[str, Any]]] = []
    for i in range(n):
        if i % 5 == 4:
            out.append((f"/v2/models/{NAME}/infer", {"inputs": [
                {"name": "input", "datatype": "BYTES", "shape": [2], "data": [f"v2-{i}", "x"]}]}))
        else:
            out.append((f"/v1/models/{NAME}:predict", {"instances": [f"req-{i}", {"k": i}]}))
    return out


async def _send_all(urls: list[str], bodies: list[tuple[str, dict[str, Any]]],
                    spacing_s: float = 0.0, timeout_s: float = 60,
                    more: Callable[[int], tuple[str, dict[str, Any]] | None] | None = None,
                    ) -> list[tuple[int, Any, float]]:
    """Send ``bodies`` (then ``more(i)`` until it says None), one every ``spacing_s``."""
    limits = httpx.Limits(max_connections=1000, max_keepalive_connections=1000)
    async with httpx.AsyncClient(limits=limits, timeout=timeout_s) as client:
        async def one(i: int, path: str, body: dict[str, Any]) -> tuple[int, Any, float]:
            started = time.monotonic()
            r = await client.post(urls[i % len(urls)] + path, json=body,
                                  headers={"x-request-id": f"id-{i}"})
            return r.status_code, r.json(), time.monotonic() - started

        tasks = []
        began = time.monotonic()
        while True:
            i = len(tasks)
            request = bodies[i] if i < len(bodies) else (more(i) if more else None)
            if request is None:
                break
            await asyncio.sleep(max(0.0, began + i * spacing_s - time.monotonic()))
            tasks.append(asyncio.create_task(one(i, *request)))
        return list(await asyncio.gather(*tasks))


def test_500_concurrent_requests_each_get_their_in_process_answer(fleet: Fleet) -> None:
    bodies = _bodies(500)
    queued = asyncio.run(_send_all([f.url for f in fleet.frontends], bodies))
    direct = asyncio.run(_send_all([fleet.in_process.url], bodies))
    for i, ((code, answer, _), (ref_code, ref_answer, _)) in enumerate(
            zip(queued, direct, strict=True)):
        assert (code, ref_code) == (200, 200), (i, answer, ref_answer)
        assert answer == ref_answer, i


def _last_added(fleet: Fleet) -> bytes:
    """The stream's last generated ID: it moves only when something is added, whereas
    XLEN also falls when a worker trims what the earlier tests left acked."""
    return fleet.redis.client().xinfo_stream(fleet.stream)["last-generated-id"]


def test_bad_input_gets_the_in_process_4xx_and_is_never_enqueued(fleet: Fleet) -> None:
    last = _last_added(fleet)
    cases = [
        (f"/v1/models/{NAME}:predict", b'{"instances": []}'),
        (f"/v1/models/{NAME}:predict", b'{"instances": [1], "extra": 1}'),
        (f"/v1/models/{NAME}:predict", b'{"instances": [' + b"[" * 70 + b"]" * 70 + b']}'),
        (f"/v2/models/{NAME}/infer",
         b'{"inputs": [{"name": "nope", "datatype": "BYTES", "shape": [1], "data": ["a"]}]}'),
        (f"/v1/models/{NAME}:predict", b'{"instances": ['),
    ]
    for path, body in cases:
        headers = {"content-type": "application/json"}
        got = httpx.post(fleet.frontends[0].url + path, content=body, headers=headers, timeout=10)
        want = httpx.post(fleet.in_process.url + path, content=body, headers=headers, timeout=10)
        assert 400 <= want.status_code < 500
        assert (got.status_code, got.json()) == (want.status_code, want.json()), body
    assert _last_added(fleet) == last


def _pending_of(fleet: Fleet) -> dict[str, int]:
    summary = fleet.redis.client().xpending(fleet.stream, "workers")
    return {c["name"].decode(): int(c["pending"]) for c in summary.get("consumers") or []}


def _first_deliveries_held(fleet: Fleet) -> dict[str, int]:
    """Consumer -> entries it holds, for consumers whose every entry is a first delivery."""
    held: dict[str, int] = {}
    again: set[str] = set()
    for row in fleet.redis.client().xpending_range(fleet.stream, "workers", "-", "+", 10000):
        name = row["consumer"].decode()
        held[name] = held.get(name, 0) + 1
        if row["times_delivered"] > 1:
            again.add(name)
    return {name: n for name, n in held.items() if name not in again}


def _run_in_thread(coro: Any) -> tuple[threading.Thread, list[Any]]:
    box: list[Any] = []
    thread = threading.Thread(target=lambda: box.append(asyncio.run(coro)), daemon=True)
    thread.start()
    return thread, box


KILLS = 10


def test_a_sigkilled_worker_loses_nothing(fleet: Fleet) -> None:
    """Ten times, a worker SIGKILLed while it holds a batch, under load: every request 200.

    Each victim holds only first deliveries: an entry whose worker is killed twice is
    dead-lettered by design (--queue_max_deliveries 2 here), which the poison test covers."""
    killed: list[int] = []

    def more(i: int) -> tuple[str, dict[str, Any]] | None:  # the load lasts the kills
        return None if len(killed) >= KILLS and i >= 200 + 25 * len(killed) else (
            f"/v1/models/{NAME}:predict", {"instances": [f"kill-{i}"]})

    thread, box = _run_in_thread(_send_all([f.url for f in fleet.frontends], [],
                                           spacing_s=0.02, more=more))
    while len(killed) < KILLS:
        def victim() -> RunningPredictor | None:
            held = _first_deliveries_held(fleet)
            # A worker holding requests right now: its PID is in its consumer name.
            for w in fleet.workers:
                if w.proc.poll() is None and any(f"-{w.proc.pid}-" in c for c in held):
                    return w
            return None

        worker = wait_for(victim, timeout_s=30, interval_s=0.01, what="a worker holding a batch")
        worker.proc.signal(signal.SIGKILL)
        wait_for(lambda w=worker: w.proc.poll() is not None, timeout_s=10, what="the kill")
        killed.append(worker.proc.pid)
        fleet.replace_dead_workers()
    thread.join(timeout=120)
    assert box, "the load did not finish"
    results = box[0]
    assert [code for code, _, _ in results] == [200] * len(results)
    assert all(elapsed < TIMEOUT_MS / 1000 for _, _, elapsed in results)
    assert [answer["predictions"] for _, answer, _ in results] == [
        [f"kill-{i}"] for i in range(len(results))]


def test_a_poison_input_is_dead_lettered_and_its_batch_mates_answered(fleet: Fleet) -> None:
    dead_key = fleet.stream.replace(":requests", ":dead")
    dead_before = fleet.redis.client().xlen(dead_key)
    bodies = [(f"/v1/models/{NAME}:predict", {"instances": [f"mate-{i}"]}) for i in range(40)]
    bodies.insert(20, (f"/v1/models/{NAME}:predict", {"instances": [{"exit_process": True}]}))
    _thread, box = _run_in_thread(_send_all([f.url for f in fleet.frontends], bodies,
                                           spacing_s=0.002))

    def done() -> bool:
        fleet.replace_dead_workers()
        return bool(box)

    wait_for(done, timeout_s=120, interval_s=0.1, what="every answer, workers replaced")
    results = box[0]
    code, answer, _ = results[20]
    assert code == 500 and "dead-lettered" in answer["error"], answer
    others = [r for i, r in enumerate(results) if i != 20]
    assert [c for c, _, _ in others] == [200] * len(others)
    assert fleet.redis.client().xlen(dead_key) == dead_before + 1
    wait_for(lambda: sum(_pending_of(fleet).values()) == 0, timeout_s=20, what="pending empty")


# -- SIGTERM while a worker runs a claimed request alone ------------------------------------
SLOW = "queue-slow"
SLOW_S = 4.0  # longer than the 2.5 s the worker gives its read and claim loops to stop


@pytest.fixture(scope="module")
def slow_worker(start_predictor: Callable[..., RunningPredictor], registry_dir: Path,
                redis_server: RedisServer) -> Iterator[tuple[RunningPredictor, QueueKeys]]:
    push_fixed_latency(registry_dir, SLOW, latency_ms=SLOW_S * 1000, max_batch_size=4)
    worker = start_predictor(SLOW, "latest", "--queue_url", redis_server.url,
                             "--queue_role", "worker", "--queue_claim_timeout_ms", "300",
                             "--drain_timeout_s", "20", "--request_timeout_ms", str(TIMEOUT_MS))
    version = json.loads((worker.model_dir / "MANIFEST.json").read_text())["version"]
    yield worker, QueueKeys(SLOW, str(version))
    worker.proc.stop()


def test_sigterm_on_a_worker_finishes_the_claimed_request_it_runs(
        slow_worker: tuple[RunningPredictor, QueueKeys], redis_server: RedisServer) -> None:
    worker, keys = slow_worker
    client = redis_server.client()
    now_ms = time.time() * 1000
    entry = Entry("claimed-1", "c-1", ["claimed"], {}, deadline_ms=now_ms + TIMEOUT_MS,
                  timeout_ms=TIMEOUT_MS, enqueued_ms=now_ms, reply_to=keys.reply("gone"))
    # Read by a worker that then died ("ghost"), in one transaction with its XADD, so the
    # live worker's blocked read never gets it first: the live one must claim it.
    with client.pipeline(transaction=True) as pipe:
        pipe.xadd(keys.stream, encode_entry(entry))
        pipe.xreadgroup("workers", "ghost", {keys.stream: ">"}, count=1)
        pipe.execute()
    mark = f"-{worker.proc.pid}-"
    rows = wait_for(lambda: [r for r in client.xpending_range(keys.stream, "workers", "-", "+", 10)
                             if mark in r["consumer"].decode()], timeout_s=20, interval_s=0.01,
                    what="the worker claiming the entry")
    assert rows[0]["times_delivered"] == 2
    worker.proc.signal(signal.SIGTERM)
    termed = time.monotonic()
    assert worker.proc.wait(30) == 0
    assert time.monotonic() - termed < 20
    raw = client.get(keys.result("claimed-1"))
    assert raw is not None, "the claimed request was dropped, not finished"
    assert decode_record(raw) == {"request_id": "claimed-1", "ok": True, "results": ["claimed"]}
    assert client.xpending(keys.stream, "workers")["pending"] == 0
