"""Queue mode end to end: real redis-server, real frontends and workers (python -m
predictor, the fixed-latency task), compared with an in-process predictor."""

from __future__ import annotations

import asyncio
import json
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

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
                    spacing_s: float = 0.0, timeout_s: float = 60) -> list[tuple[int, Any, float]]:
    limits = httpx.Limits(max_connections=1000, max_keepalive_connections=1000)
    async with httpx.AsyncClient(limits=limits, timeout=timeout_s) as client:
        async def one(i: int, path: str, body: dict[str, Any]) -> tuple[int, Any, float]:
            await asyncio.sleep(i * spacing_s)
            started = time.monotonic()
            r = await client.post(urls[i % len(urls)] + path, json=body,
                                  headers={"x-request-id": f"id-{i}"})
            return r.status_code, r.json(), time.monotonic() - started

        return await asyncio.gather(*(one(i, p, b) for i, (p, b) in enumerate(bodies)))


def test_500_concurrent_requests_each_get_their_in_process_answer(fleet: Fleet) -> None:
    bodies = _bodies(500)
    queued = asyncio.run(_send_all([f.url for f in fleet.frontends], bodies))
    direct = asyncio.run(_send_all([fleet.in_process.url], bodies))
    for i, ((code, answer, _), (ref_code, ref_answer, _)) in enumerate(
            zip(queued, direct, strict=True)):
        assert (code, ref_code) == (200, 200), (i, answer, ref_answer)
        assert answer == ref_answer, i


def test_bad_input_gets_the_in_process_4xx_and_is_never_enqueued(fleet: Fleet) -> None:
    xlen = fleet.redis.client().xlen(fleet.stream)
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
    assert fleet.redis.client().xlen(fleet.stream) == xlen


def _pending_of(fleet: Fleet) -> dict[str, int]:
    summary = fleet.redis.client().xpending(fleet.stream, "workers")
    return {c["name"].decode(): int(c["pending"]) for c in summary.get("consumers") or []}


def _run_in_thread(coro: Any) -> tuple[threading.Thread, list[Any]]:
    box: list[Any] = []
    thread = threading.Thread(target=lambda: box.append(asyncio.run(coro)), daemon=True)
    thread.start()
    return thread, box


def test_a_sigkilled_worker_loses_nothing(fleet: Fleet) -> None:
    bodies = [(f"/v1/models/{NAME}:predict", {"instances": [f"kill-{i}"]}) for i in range(600)]
    thread, box = _run_in_thread(_send_all([f.url for f in fleet.frontends], bodies,
                                           spacing_s=0.02))
    for _ in range(3):
        def victim() -> RunningPredictor | None:
            held = _pending_of(fleet)
            # A worker holding requests right now: its PID is in its consumer name.
            for w in fleet.workers:
                if w.proc.poll() is None and any(f"-{w.proc.pid}-" in c and n > 0
                                                 for c, n in held.items()):
                    return w
            return None

        worker = wait_for(victim, timeout_s=30, interval_s=0.01, what="a worker holding a batch")
        worker.proc.signal(signal.SIGKILL)
        wait_for(lambda w=worker: w.proc.poll() is not None, timeout_s=10, what="the kill")
        fleet.replace_dead_workers()
    thread.join(timeout=120)
    assert box, "the load did not finish"
    results = box[0]
    assert [code for code, _, _ in results] == [200] * len(bodies)
    assert all(elapsed < TIMEOUT_MS / 1000 for _, _, elapsed in results)
    assert [answer["predictions"] for _, answer, _ in results] == [
        [f"kill-{i}"] for i in range(len(bodies))]


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
