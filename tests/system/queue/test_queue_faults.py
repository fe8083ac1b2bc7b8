"""Queue mode under faults (issue 15): a frontend SIGKILLed, Redis crashed for 5 s and
restarted, overload at 5x the workers' capacity, SIGTERM on a frontend and on a worker.
Real redis-server, frontends and workers (the fixed-latency task), one model name (so
its own keys) per fleet; open-loop load from a thread, every outcome kept with its time.
"""

from __future__ import annotations

import asyncio
import json
import signal
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support import wait_for
from tests.support.predictor import RunningPredictor, push_fixed_latency
from tests.support.redis import RedisServer, own_redis_server

TIMEOUT_MS = 30000


@dataclass
class Outcome:
    index: int
    target: int
    sent_s: float
    done_s: float = 0.0
    status: int | None = None
    body: Any = None
    retry_after: str | None = None
    error: BaseException | None = None

    @property
    def echoed(self) -> Any:
        """What the fixed-latency task echoed (V1 predictions or V2 output data)."""
        body = self.body if isinstance(self.body, dict) else {}
        return body.get("predictions", body.get("outputs", [{}])[0].get("data"))


def _request(name: str, tag: str, i: int) -> tuple[str, dict[str, Any]]:
    if i % 5 == 4:  # every fifth one V2, the rest V1 (the fast path)
        return f"/v2/models/{name}/infer", {"inputs": [
            {"name": "input", "datatype": "BYTES", "shape": [1], "data": [f"{tag}-{i}"]}]}
    return f"/v1/models/{name}:predict", {"instances": [f"{tag}-{i}"]}


class Load:
    """Open-loop requests from a thread: one every ``spacing_s`` to ``urls`` in turn, until
    ``count`` are sent or ``stop()``; each request is ``<tag>-<index>``."""

    def __init__(self, name: str, urls: list[str], tag: str, *, spacing_s: float,
                 count: int | None = None, timeout_s: float = TIMEOUT_MS / 1000 + 15) -> None:
        self.name, self.urls, self.tag = name, urls, tag
        self.spacing_s, self.count, self.timeout_s = spacing_s, count, timeout_s
        self.outcomes: list[Outcome] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=lambda: asyncio.run(self._main()), daemon=True)
        self._thread.start()

    def in_flight(self, target: int) -> int:
        return sum(1 for o in list(self.outcomes) if o.target == target and not o.done_s)

    def answered(self, since_s: float = 0.0) -> int:
        return sum(1 for o in list(self.outcomes) if o.status == 200 and o.sent_s >= since_s)

    def finish(self, *, stop: bool = False) -> list[Outcome]:
        """Every outcome, once each request sent (``stop``: no more) has its answer."""
        if stop:
            self._stop.set()
        self._thread.join(TIMEOUT_MS / 1000 + 30)
        assert not self._thread.is_alive(), "the load did not finish: a request hangs"
        return self.outcomes

    async def _main(self) -> None:
        limits = httpx.Limits(max_connections=2000, max_keepalive_connections=2000)
        async with httpx.AsyncClient(limits=limits, timeout=self.timeout_s) as client:
            tasks = []
            started = time.monotonic()
            while not self._stop.is_set() and (self.count is None or len(tasks) < self.count):
                i = len(tasks)
                await asyncio.sleep(max(0.0, started + i * self.spacing_s - time.monotonic()))
                tasks.append(asyncio.create_task(self._one(client, i)))
            await asyncio.gather(*tasks)

    async def _one(self, client: httpx.AsyncClient, i: int) -> None:
        outcome = Outcome(i, i % len(self.urls), time.monotonic())
        self.outcomes.append(outcome)
        path, body = _request(self.name, self.tag, i)
        try:
            r = await client.post(self.urls[outcome.target] + path, json=body,
                                  headers={"x-request-id": f"{self.tag}-{i}"})
            outcome.status, outcome.retry_after = r.status_code, r.headers.get("retry-after")
            outcome.body = r.json()
        except httpx.HTTPError as exc:
            outcome.error = exc
        outcome.done_s = time.monotonic()


@dataclass
class Fleet:
    name: str
    redis: RedisServer
    frontends: list[RunningPredictor] = field(default_factory=list)
    workers: list[RunningPredictor] = field(default_factory=list)
    channels: list[str] = field(default_factory=list)  # each frontend's reply channel

    @property
    def tag(self) -> str:
        manifest = json.loads((self.workers[0].model_dir / "MANIFEST.json").read_text())
        return f"modelctl:{{{self.name}:{manifest['version']}}}:"

    @property
    def stream(self) -> str:
        return self.tag + "requests"

    def group(self) -> dict[str, Any]:
        groups = self.redis.client().xinfo_groups(self.stream)
        return dict(next(g for g in groups if g["name"] == b"workers"))

    def is_idle(self) -> bool:
        return (lambda g: g["pending"] == 0 and g["lag"] == 0)(self.group())

    def pending(self) -> list[dict[str, Any]]:
        return list(self.redis.client().xpending_range(self.stream, "workers", "-", "+", 10000))

    def result_keys(self) -> list[bytes]:
        return list(self.redis.client().scan_iter(match=f"{self.tag}result:*", count=1000))

    def reply_channels(self) -> set[str]:
        return {c.decode() for c in self.redis.client().pubsub_channels(f"{self.tag}reply:*")}


def _fleet(start: Callable[..., RunningPredictor], registry_dir: Path, redis: RedisServer,
           name: str, *, task: dict[str, Any], frontends: int, timeout_ms: int = TIMEOUT_MS,
           frontend_args: tuple[str, ...] = (), worker_args: tuple[str, ...] = (),
           ) -> Iterator[Fleet]:
    """One worker, then ``frontends`` frontends; every process stopped (by PID) after."""
    push_fixed_latency(registry_dir, name, **task)
    common = ("--queue_url", redis.url, "--request_timeout_ms", str(timeout_ms),
              "--queue_claim_timeout_ms", str(min(5000, timeout_ms // 2)))
    fleet = Fleet(name, redis)
    try:
        fleet.workers.append(start(name, "latest", *common, "--queue_role", "worker",
                                   "--max_batch_wait_ms", "5", *worker_args))
        for _ in range(frontends):  # ready means subscribed: the new channel is its own
            known = set(fleet.channels)
            fleet.frontends.append(start(name, "latest", *common, "--queue_role", "frontend",
                                         *frontend_args))
            fleet.channels.append(wait_for(lambda known=known: next(iter(  # type: ignore[misc]
                fleet.reply_channels() - known), None), timeout_s=10, what="its reply channel"))
        yield fleet
    finally:
        for p in fleet.frontends + fleet.workers:
            p.proc.stop()


def _status(url: str) -> int:
    return httpx.get(url, timeout=5).status_code


def _id(entry_id: bytes) -> tuple[int, ...]:
    return tuple(int(part) for part in entry_id.decode().split("-"))


def _assert_own_answers(outcomes: list[Outcome], tag: str) -> None:
    for o in outcomes:
        if o.status == 200:
            assert o.echoed == [f"{tag}-{o.index}"], (o.index, o.body)


# -- a frontend SIGKILLed under load ------------------------------------------------------
RESULT_TTL_S = 3


@pytest.fixture(scope="module")
def kill_fleet(start_predictor: Callable[..., RunningPredictor], registry_dir: Path,
               redis_server: RedisServer) -> Iterator[Fleet]:
    # One worker of 80 requests/s under 200/s: a backlog builds, so the frontend holds many.
    ttl = ("--queue_result_ttl_s", str(RESULT_TTL_S))
    yield from _fleet(start_predictor, registry_dir, redis_server, "qf-kill",
                      task={"latency_ms": 100, "max_batch_size": 8}, frontends=2,
                      frontend_args=ttl, worker_args=ttl)


def test_a_sigkilled_frontend_resets_only_its_own_clients_and_leaks_nothing(
        kill_fleet: Fleet) -> None:
    fleet, survivor = kill_fleet, kill_fleet.channels[1]
    load = Load(fleet.name, [f.url for f in fleet.frontends], "fk", spacing_s=0.005, count=400)
    wait_for(lambda: load.in_flight(target=0) >= 20 and fleet.group()["lag"] >= 10,
             timeout_s=30, what="the first frontend holding requests in the stream")
    fleet.frontends[0].proc.signal(signal.SIGKILL)
    killed = time.monotonic()
    wait_for(lambda: fleet.frontends[0].proc.poll() is not None, timeout_s=10, what="the kill")
    keys = fleet.result_keys()
    ttls = [fleet.redis.client().pttl(k) for k in keys]
    assert keys and all(t > 0 or t == -2 for t in ttls), ttls  # -1: a key with no TTL
    outcomes = load.finish()

    mine = [o for o in outcomes if o.target == 0]
    others = [o for o in outcomes if o.target == 1]
    assert [(o.status, o.error) for o in others] == [(200, None)] * len(others)
    _assert_own_answers(outcomes, "fk")
    for o in mine:  # answered before the kill, or a reset: never an HTTP error, never a hang
        assert o.status == 200 or (isinstance(o.error, httpx.TransportError) and
                                   not isinstance(o.error, httpx.TimeoutException)), (o, o.error)
    assert [o for o in mine if o.error is not None and o.sent_s < killed], "nobody was reset"

    # Nothing leaks: every entry read and acknowledged (the dead frontend's too), its
    # subscription gone, and every result key gone with its TTL.
    wait_for(fleet.is_idle, timeout_s=60, what="the group's pending list empty, no lag")
    wait_for(lambda: fleet.reply_channels() == {survivor}, timeout_s=10,
             what=f"only {survivor} subscribed")
    wait_for(lambda: not fleet.result_keys(), timeout_s=RESULT_TTL_S + 15,
             what="every result key expired")
    assert fleet.redis.client().xlen(fleet.tag + "dead") == 0


# -- Redis crashed for 5 s under load, restarted on the same port and directory -----------
OUTAGE_S = 5.0


@pytest.fixture(scope="module")
def crash_fleet(start_predictor: Callable[..., RunningPredictor], registry_dir: Path,
                tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    # Redis write(2)s the AOF before it replies, but with everysec it fsyncs up to a
    # second later (a machine crash loses that) and postpones the write while an fsync
    # runs (a busy disk: replies first). appendfsync always fsyncs before any reply (Redis
    # 7.0, #9678): "whatever a client was told survives" is exact, whatever the disk does.
    with own_redis_server(tmp_path_factory.mktemp("redis-crash"), appendfsync="always") as redis:
        yield from _fleet(start_predictor, registry_dir, redis, "qf-redis",
                          task={"latency_ms": 20, "max_batch_size": 32}, frontends=2,
                          worker_args=("--queue_result_ttl_s", "600"))


def test_redis_crashed_for_5_s_answers_503_then_recovers_and_loses_nothing(
        crash_fleet: Fleet) -> None:
    fleet, redis = crash_fleet, crash_fleet.redis
    urls = [f.url for f in fleet.frontends]
    before = Load(fleet.name, urls, "before", spacing_s=0.005, count=40).finish()
    assert [(o.status, o.echoed) for o in before] == [(200, [f"before-{i}"]) for i in range(40)]
    wait_for(fleet.is_idle, timeout_s=20, what="every request acknowledged")

    load = Load(fleet.name, urls, "during", spacing_s=0.01)
    wait_for(lambda: load.answered() >= 30, timeout_s=30, what="the load under way")
    # What Redis has acknowledged, read last thing before the crash. The group's
    # last-delivered ID first: whatever is delivered after it has a higher ID.
    client = redis.client()
    delivered = _id(fleet.group()["last-delivered-id"])
    pending = {_id(p["message_id"]) for p in fleet.pending()}
    keys = fleet.result_keys()
    results = client.mget(keys)
    stream = client.xinfo_stream(fleet.stream)
    redis.stop(signal.SIGKILL)
    stopped = time.monotonic()

    unready: set[int] = set()
    while time.monotonic() - stopped < OUTAGE_S:  # the outage: sampled, not waited on
        for i, f in enumerate(fleet.frontends):
            assert _status(f.url + "/v2/health/live") == 200
            if _status(f.url + "/v2/health/ready") == 503:
                unready.add(i)
        time.sleep(0.2)
    assert unready == {0, 1}, "a frontend stayed ready without Redis"
    restarting = time.monotonic()
    redis.start()
    # Nothing acknowledged is pending again (a lost XACK would be back in the list).
    client = redis.client()
    again = {_id(p["message_id"]) for p in fleet.pending()} - pending
    assert not [i for i in again if i <= delivered], "acknowledged entries came back"
    wait_for(lambda: all(_status(f.url + "/v2/health/ready") == 200 for f in fleet.frontends),
             timeout_s=30, what="both frontends ready again, by themselves")
    recovered = time.monotonic()
    wait_for(lambda: load.answered(since_s=recovered) >= 40, timeout_s=30,
             what="answers after the restart")
    outcomes = load.finish(stop=True)

    # One answer each: its own 200, or a 503 with Retry-After given at once.
    for o in outcomes:
        assert o.error is None and o.status in (200, 503), (o.index, o.status, o.error, o.body)
        if o.status == 503:
            assert o.done_s - o.sent_s < 5.0, (o.index, o.done_s - o.sent_s)
    # KServe's own V2 route refuses a frontend that is not ready (healthy() is false
    # while Redis is away) with ModelNotReady; predictor/_server.py answers it with
    # Retry-After like the frontend's own 503.
    unavailable = [o for o in outcomes if o.status == 503]
    assert unavailable and all(o.retry_after and int(o.retry_after) >= 1
                               for o in unavailable), [o for o in unavailable if not o.retry_after]
    _assert_own_answers(outcomes, "during")
    down = [o for o in outcomes if stopped < o.sent_s < restarting - 0.5]
    assert down and {o.status for o in down} == {503}
    after = [o for o in outcomes if o.sent_s > recovered]
    assert after and {o.status for o in after} == {200}

    # Nothing acknowledged is lost: every result stored and every entry added before the
    # crash is still there (AOF, fsynced before each reply).
    assert client.mget(keys) == results
    now = client.xinfo_stream(fleet.stream)
    assert _id(now["last-generated-id"]) >= _id(stream["last-generated-id"])
    assert now["entries-added"] >= stream["entries-added"]
    assert _id(fleet.group()["last-delivered-id"]) >= delivered
    wait_for(fleet.is_idle, timeout_s=30, what="everything acknowledged after the restart")


# -- overload at 5x the workers' capacity ---------------------------------------------------
BATCH, LATENCY_S, SHORT_TIMEOUT_MS = 4, 0.1, 2000


@pytest.fixture(scope="module")
def small_fleet(start_predictor: Callable[..., RunningPredictor], registry_dir: Path,
                redis_server: RedisServer) -> Iterator[Fleet]:
    yield from _fleet(start_predictor, registry_dir, redis_server, "qf-overload",
                      task={"latency_ms": LATENCY_S * 1000, "max_batch_size": BATCH},
                      frontends=1, timeout_ms=SHORT_TIMEOUT_MS)


def test_overload_at_5x_capacity_is_answered_200_or_429_and_nothing_else(
        small_fleet: Fleet) -> None:
    capacity = BATCH / LATENCY_S  # requests per second, one worker: 3 s at 5x
    outcomes = Load(small_fleet.name, [small_fleet.frontends[0].url], "over",
                    spacing_s=1 / (5 * capacity), count=int(5 * capacity * 3),
                    timeout_s=SHORT_TIMEOUT_MS / 1000 + 20).finish()
    codes = {o.status for o in outcomes}  # a transport error is None: not allowed either
    assert codes == {200, 429}, (codes, [repr(o.error) for o in outcomes if o.error][:3])
    _assert_own_answers(outcomes, "over")
    refused = [o for o in outcomes if o.status == 429]
    assert all(o.retry_after and int(o.retry_after) >= 1 for o in refused)
    # No hang (a client on a busy machine sees the deadline plus its own queueing) ...
    took = {code: sorted(o.done_s - o.sent_s for o in outcomes if o.status == code)
            for code in (200, 429)}
    assert max(took[200] + took[429]) < SHORT_TIMEOUT_MS / 1000 + 10, took
    # ... and shed at the door: the typical refusal is quicker than the typical answer.
    assert took[429][len(took[429]) // 2] < took[200][len(took[200]) // 2], took


# -- SIGTERM on a frontend, then on a worker -------------------------------------------------
DRAIN_S = 20


@pytest.fixture(scope="module")
def term_fleet(start_predictor: Callable[..., RunningPredictor], registry_dir: Path,
               redis_server: RedisServer) -> Iterator[Fleet]:
    # Slow batches (4 per 0.5 s) so that what is held takes seconds to answer; a claim
    # timeout far above that, so nothing is claimed while its worker still runs it.
    drain = ("--drain_timeout_s", str(DRAIN_S))
    yield from _fleet(start_predictor, registry_dir, redis_server, "qf-term",
                      task={"latency_ms": 500, "max_batch_size": BATCH}, frontends=2,
                      frontend_args=drain,
                      worker_args=(*drain, "--queue_claim_timeout_ms", "15000"))


def test_sigterm_on_a_frontend_answers_what_it_holds_then_exits_0(term_fleet: Fleet) -> None:
    fleet, frontend = term_fleet, term_fleet.frontends[0]
    added = fleet.redis.client().xinfo_stream(fleet.stream)["entries-added"]
    load = Load(fleet.name, [frontend.url], "held", spacing_s=0.0, count=16)
    wait_for(lambda: fleet.redis.client().xinfo_stream(fleet.stream)["entries-added"]
             >= added + 16, timeout_s=20, what="all 16 requests in the stream")
    frontend.proc.signal(signal.SIGTERM)
    termed = time.monotonic()
    wait_for(lambda: _status(frontend.url + "/v2/health/ready") == 503, timeout_s=10,
             what="readiness false")
    assert load.in_flight(target=0) > 0, "it answered everything before readiness went false"
    late = httpx.post(f"{frontend.url}/v1/models/{fleet.name}:predict",
                      json={"instances": ["late"]}, timeout=10)
    assert late.status_code == 503, late.text  # draining: new requests are refused
    outcomes = load.finish()
    assert [(o.status, o.echoed) for o in outcomes] == [(200, [f"held-{i}"]) for i in range(16)]
    assert frontend.proc.wait(DRAIN_S + 10) == 0
    assert time.monotonic() - termed < DRAIN_S


def test_sigterm_on_a_worker_finishes_and_acknowledges_its_batch(term_fleet: Fleet) -> None:
    fleet, worker = term_fleet, term_fleet.workers[0]
    mark = f"-{worker.proc.pid}-"

    def held() -> list[dict[str, Any]]:
        return [p for p in fleet.pending() if mark in p["consumer"].decode()]

    load = Load(fleet.name, [fleet.frontends[1].url], "batch", spacing_s=0.0, count=8)
    # More than one batch in hand: one running, the next waiting behind it.
    rows = wait_for(lambda: (lambda h: h if len(h) > BATCH else None)(held()), timeout_s=20,
                    interval_s=0.01, what="the worker holding more than a batch")
    assert {r["times_delivered"] for r in rows} == {1}
    worker.proc.signal(signal.SIGTERM)
    termed = time.monotonic()
    outcomes = load.finish()
    assert [(o.status, o.echoed) for o in outcomes] == [(200, [f"batch-{i}"]) for i in range(8)]
    assert worker.proc.wait(DRAIN_S + 10) == 0
    assert time.monotonic() - termed < DRAIN_S
    # Acknowledged before it left: nothing pending, so nothing for anyone to redeliver.
    assert fleet.pending() == [] and fleet.is_idle()
    assert not [c for c in fleet.redis.client().hkeys(fleet.tag + "workers") if mark in c.decode()]
