"""The queue benchmark's machinery: a fleet (a fresh redis-server, frontends, workers) or
one in-process predictor, the two generator processes that load it, and one measured run
with every process group's CPU time, guarded against other people's work on the machine."""

from __future__ import annotations

import multiprocessing
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench._queue_report import cpu_split, merge_loads
from bench._servers import (
    Predictors,
    RedisProcess,
    Server,
    machine_busy_s,
    predictors,
    process_cpu_s,
    redis_server,
)
from bench.loadgen import LoadResult, run_open_loop
from bench.peers._measure import RunProtocol, wait_until_quiet
from bench.predictor_bench import FIXED_FLAGS

MODEL = "bench-fixed"
CLAIM_TIMEOUT_MS = 220  # the least claim timeout (Settings.claim_timeout_ms)
WARMUP_S = 2.0
CLIENT_TIMEOUT_S = 5.0
BODY = {"instances": ["x"]}


@dataclass(frozen=True)
class Settings:
    """The servers' deadline, and how a run guards against other people's work on the
    shared machine: wait up to ``quiet_wait_s`` for it to be quiet (``bench.peers``' gate),
    and measure again, up to ``retries`` times, a run in which others used more than
    ``max_others_cores``."""

    deadline_ms: int = 230
    quiet_wait_s: float = 5.0
    max_others_cores: float = 0.5
    retries: int = 1

    @property
    def claim_timeout_ms(self) -> int:
        # Below the deadline (the flags require it) and above the ~210 ms a healthy entry
        # can sit in a worker's hand (one batch running, its own forming).
        return max(CLAIM_TIMEOUT_MS, self.deadline_ms // 2)

    def server_flags(self) -> tuple[str, ...]:
        """predictor_bench's fixed-latency flags with this deadline."""
        flags = list(FIXED_FLAGS)
        flags[flags.index("--request_timeout_ms") + 1] = str(self.deadline_ms)
        return tuple(flags)

    def queue_flags(self, url: str, role: str) -> tuple[str, ...]:
        # Both roles: the flags' check wants the claim timeout below the deadline everywhere.
        return ("--queue_url", url, "--queue_role", role, *self.server_flags(),
                "--queue_claim_timeout_ms", str(self.claim_timeout_ms))


# -- the load: one generator process per frontend ------------------------------------------
def generate(url: str, rate: float, duration_s: float) -> tuple[LoadResult, float, float]:
    """In a generator process: one open-loop run; (result, its CPU s, its start, monotonic)."""
    cpu0, started = time.process_time(), time.monotonic()
    result = run_open_loop(url, rate=rate, duration_s=duration_s, body=BODY,
                           warmup_s=WARMUP_S, timeout_s=CLIENT_TIMEOUT_S)
    return result, time.process_time() - cpu0, started


@contextmanager
def generator_pool() -> Iterator[Any]:
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(2) as pool:
        pool.map(time.sleep, [0, 0])  # both started (imports done) before any run
        yield pool


@dataclass
class Fleet:
    """What one run measures: the URLs load goes to, and the processes behind them."""

    urls: list[str]
    frontends: list[Server]
    workers: list[Server] = field(default_factory=list)
    redis: RedisProcess | None = None
    group: Predictors | None = None
    settings: Settings = field(default_factory=Settings)

    def cpu(self) -> dict[str, float]:
        return {"frontends": sum(process_cpu_s(s.proc.pid) for s in self.frontends),
                "workers": sum(process_cpu_s(s.proc.pid) for s in self.workers),
                "redis": process_cpu_s(self.redis.proc.pid) if self.redis else 0.0}

    def batch_totals(self) -> tuple[float, float]:
        batching = self.workers or self.frontends  # in-process: the one server batches
        pairs = [w.batch_totals() for w in batching if w.proc.poll() is None]
        return sum(p[0] for p in pairs), sum(p[1] for p in pairs)

    def add_worker(self) -> Server:
        """Start one more worker (not waited for), as a Deployment replaces a dead pod."""
        assert self.group is not None and self.redis is not None
        worker = self.group.spawn(*self.settings.queue_flags(self.redis.url, "worker"))
        self.workers.append(worker)
        return worker


@contextmanager
def queue_fleet(registry: Path, frontends: int, workers: int,
                settings: Settings) -> Iterator[Fleet]:
    """A fresh redis-server, ``frontends`` frontends and ``workers`` workers."""
    with redis_server() as redis:
        flags = ([settings.queue_flags(redis.url, "frontend")] * frontends
                 + [settings.queue_flags(redis.url, "worker")] * workers)
        with predictors(MODEL, registry, flags) as group:
            fronts = group.servers[:frontends]
            yield Fleet([s.predict_url for s in fronts], fronts, group.servers[frontends:],
                        redis, group, settings)


@contextmanager
def in_process(registry: Path, settings: Settings) -> Iterator[Fleet]:
    with predictors(MODEL, registry, [settings.server_flags()]) as group:
        # The same two generators as the queue runs, both on the one server.
        yield Fleet([group.servers[0].predict_url] * 2, group.servers[:1])


def measure(pool: Any, fleet: Fleet, rate: float, duration_s: float,
            settings: Settings) -> dict[str, Any]:
    """One run (see :func:`measure_once`), repeated while others disturbed it (``settings``);
    the runs left out are kept under ``disturbed``."""
    disturbed: list[dict[str, Any]] = []
    while True:
        gate = wait_until_quiet(RunProtocol(quiet_busy_pct=25.0,
                                            quiet_deadline_s=settings.quiet_wait_s))
        run = measure_once(pool, fleet, rate, duration_s)
        run["gate"] = gate
        if (run["cpu"]["others"]["cores"] <= settings.max_others_cores
                or len(disturbed) >= settings.retries):
            run["disturbed"] = [{k: d[k] for k in ("p99_ms", "success_ratio", "cpu", "gate")}
                                for d in disturbed]
            return run
        print(f"  disturbed: others used {run['cpu']['others']['cores']:.2f} cores "
              f"(p99 {run['p99_ms']:.0f} ms); measuring again", flush=True)
        disturbed.append(run)
        time.sleep(1.0)  # the queue drains: every request's deadline is 230 ms


def measure_once(pool: Any, fleet: Fleet, rate: float, duration_s: float) -> dict[str, Any]:
    """One run of ``rate`` req/s split over the fleet's URLs, with its CPU accounting."""
    load1 = os.getloadavg()[0]
    sum0, count0 = fleet.batch_totals()
    cpu0, busy0, wall0 = fleet.cpu(), machine_busy_s(), time.monotonic()
    share = rate / len(fleet.urls)
    outs = pool.starmap(generate, [(u, share, duration_s) for u in fleet.urls])
    cpu1, busy1, wall = fleet.cpu(), machine_busy_s(), time.monotonic() - wall0
    sum1, count1 = fleet.batch_totals()
    results = [o[0] for o in outs]
    run = merge_loads(results)
    sent_all = sum(int(r.samples.status.size) for r in results)
    cpu0["loadgen"], cpu1["loadgen"] = 0.0, sum(o[1] for o in outs)
    cpu0["machine"], cpu1["machine"] = busy0, busy1
    run["cpu"] = cpu_split(cpu0, cpu1, sent_all, wall)
    ours = sum(v["cores"] for k, v in run["cpu"].items() if k != "machine")
    run["cpu"]["others"] = {"ms_per_request": 0.0,
                            "cores": max(0.0, run["cpu"]["machine"]["cores"] - ours)}
    run["mean_batch"] = (sum1 - sum0) / (count1 - count0) if count1 > count0 else 0.0
    run["load_avg_1m_at_start"] = load1
    return run


RUN_KEYS = ("throughput_rps", "success_ratio", "p50_ms", "p90_ms", "p99_ms", "max_ms",
            "mean_batch", "send_lag_p99_ms")
