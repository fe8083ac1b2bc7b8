"""The batcher alone, in process, against a fixed-latency model (open loop).

Items arrive on a Poisson schedule fixed in advance (seeded); each one is
submitted at its scheduled time whatever happened before (open loop, no
coordinated omission), and its latency runs from the scheduled time to its
result: queue wait plus service. The model sleeps ``--latency-ms`` per batch
whatever its size, like the ``fixed-latency`` task, so what is measured is the
batching alone. ``--naive`` also runs a straightforward batcher for comparison
(collect up to the max batch or for max-wait after the first item, then run).

    python -m bench.batcher_sim --rates 50,800 --duration-s 10 --runs 3 --naive
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import random
import statistics
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from predictor._errors import PredictorError
from predictor.batching import Batcher, BatchStats
from predictor.batching._policy import BatchConfig

Submit = Callable[[list[int], float], Awaitable[list[int]]]


@dataclass
class RunResult:
    rate: float
    latencies_s: list[float]
    statuses: Counter[str]
    batch_sizes: list[int]
    elapsed_s: float

    def quantile_ms(self, q: float) -> float:
        ordered = sorted(self.latencies_s)
        if not ordered:
            return float("nan")
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000.0


def fixed_latency(latency_s: float, sizes: list[int]) -> Callable[[list[int]], list[int]]:
    def run_batch(items: list[int]) -> list[int]:
        sizes.append(len(items))
        time.sleep(latency_s)
        return items

    return run_batch


async def drive(
    submit: Submit, rate: float, duration_s: float, seed: int, timeout_s: float
) -> RunResult:
    """Submit one item per arrival of a Poisson schedule; measure from the schedule."""
    rng = random.Random(seed)
    offsets, t = [], 0.0
    while True:
        t += rng.expovariate(rate)
        if t >= duration_s:
            break
        offsets.append(t)
    latencies: list[float] = []
    statuses: Counter[str] = Counter()

    async def one(i: int, scheduled: float) -> None:
        try:
            await submit([i], scheduled + timeout_s)
            statuses["ok"] += 1
            latencies.append(time.monotonic() - scheduled)
        except PredictorError as exc:
            statuses[type(exc).__name__] += 1

    start = time.monotonic() + 0.05
    tasks = []
    for i, offset in enumerate(offsets):
        scheduled = start + offset
        delay = scheduled - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(one(i, scheduled)))
    await asyncio.gather(*tasks)
    return RunResult(rate, latencies, statuses, [], time.monotonic() - start)


async def run_ours(
    config: BatchConfig, latency_s: float, rate: float, duration_s: float, seed: int
) -> RunResult:
    sizes: list[int] = []
    stats: list[BatchStats] = []
    batcher: Batcher[int, int] = Batcher(
        fixed_latency(latency_s, sizes), config, on_batch=stats.append
    )
    await batcher.start()
    result = await drive(batcher.submit, rate, duration_s, seed, config.request_timeout_s)
    await batcher.drain(10.0)
    result.batch_sizes = sizes
    return result


class NaiveBatcher:
    """Take the first item, collect more until the batch is full or max-wait has
    passed since collection began, run it, repeat: it never forms the next batch
    while one runs, so a busy device adds max-wait to every cycle."""

    def __init__(self, run_batch: Callable[[list[int]], list[int]], config: BatchConfig) -> None:
        self._run_batch = run_batch
        self._config = config
        self._queue: asyncio.Queue[tuple[int, asyncio.Future[int]]] = asyncio.Queue()
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=1)
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self._task = asyncio.create_task(self._loop())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
        self._pool.shutdown(wait=False)

    async def submit(self, items: list[int], deadline: float) -> list[int]:
        futures = []
        for item in items:
            future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
            await self._queue.put((item, future))
            futures.append(future)
        return list(await asyncio.gather(*futures))

    async def _loop(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            batch = [await self._queue.get()]
            until = loop.time() + self._config.max_batch_wait_s
            while len(batch) < self._config.max_batch_size:
                try:
                    batch.append(await asyncio.wait_for(self._queue.get(), until - loop.time()))
                except TimeoutError:
                    break
            results = await loop.run_in_executor(
                self._pool, self._run_batch, [item for item, _ in batch]
            )
            for (_, future), value in zip(batch, results, strict=True):
                future.set_result(value)


async def run_naive(
    config: BatchConfig, latency_s: float, rate: float, duration_s: float, seed: int
) -> RunResult:
    sizes: list[int] = []
    naive = NaiveBatcher(fixed_latency(latency_s, sizes), config)
    await naive.start()
    result = await drive(naive.submit, rate, duration_s, seed, config.request_timeout_s)
    await naive.stop()
    result.batch_sizes = sizes
    return result


def summarise(name: str, runs: list[RunResult]) -> str:
    def median(f: Callable[[RunResult], float]) -> float:
        return statistics.median(f(r) for r in runs)

    statuses: Counter[str] = Counter()
    for r in runs:
        statuses.update(r.statuses)
    return (
        f"{name:6} {runs[0].rate:7.0f}/s  "
        f"thr {median(lambda r: r.statuses['ok'] / r.elapsed_s):7.1f}/s  "
        f"p50 {median(lambda r: r.quantile_ms(0.50)):6.1f}  "
        f"p90 {median(lambda r: r.quantile_ms(0.90)):6.1f}  "
        f"p99 {median(lambda r: r.quantile_ms(0.99)):6.1f}  "
        f"max {median(lambda r: r.quantile_ms(1.0)):7.1f} ms  "
        f"mean batch {median(lambda r: statistics.fmean(r.batch_sizes or [0])):5.1f}  "
        f"statuses {dict(statuses)}  (median of {len(runs)} runs)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rates", default="50,800", help="offered items/s, comma-separated")
    parser.add_argument("--duration-s", type=float, default=10.0)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--latency-ms", type=float, default=100.0)
    parser.add_argument("--max-batch-size", type=int, default=100)
    parser.add_argument("--max-batch-wait-ms", type=float, default=50.0)
    parser.add_argument("--max-queue-size", type=int, default=1024)
    parser.add_argument(
        "--timeout-ms", type=float, default=30000.0, help="each item's deadline after its schedule"
    )
    parser.add_argument("--naive", action="store_true", help="also run the naive batcher")
    args = parser.parse_args()
    config = BatchConfig(
        max_batch_size=args.max_batch_size,
        max_batch_wait_ms=args.max_batch_wait_ms,
        max_queue_size=args.max_queue_size,
        request_timeout_ms=args.timeout_ms,
    )
    latency_s = args.latency_ms / 1000.0
    for rate in (float(r) for r in args.rates.split(",")):
        runners = [("ours", run_ours)] + ([("naive", run_naive)] if args.naive else [])
        for name, runner in runners:
            runs = [
                asyncio.run(runner(config, latency_s, rate, args.duration_s, seed))
                for seed in range(args.runs)
            ]
            print(summarise(name, runs), flush=True)


if __name__ == "__main__":
    main()
