"""The simulation against queueing theory (M/D/1) and against the real asyncio Batcher.

The M/D/1 waiting-time distribution (Poisson arrivals at lambda, one server, constant
service D, FIFO, rho = lambda D < 1) is Erlang's, in Crommelin's form (Crommelin 1932,
"Delay probability formulae when the holding times are constant"; e.g. Kleinrock,
Queueing Systems vol. 1, or Franx, "A simple solution for the M/D/c waiting time
distribution", Oper. Res. Lett. 2001, eq. for c = 1):

    P(W <= t) = (1 - rho) * sum_{k=0}^{floor(t/D)} (lambda (k D - t))^k / k! * e^{-lambda (k D - t)}

With max_batch_size 1 and a profile whose samples are all equal, a replica is exactly that
queue, so the simulated waiting-time quantiles must match the exact ones.
"""

from __future__ import annotations

import asyncio
import math
import random
import time
from collections.abc import Callable
from typing import Any

import pytest

from capacity import (
    BatchTiming,
    Burst,
    Profile,
    bursty_arrivals,
    poisson_arrivals,
    simulate,
)
from capacity._profile import quantile
from predictor._errors import DeadlineExpired, Overloaded
from predictor.batching import BatchConfig, Batcher
from tests.support.virtual_loop import VirtualTimeLoop


def _profile(batches: dict[int, tuple[float, ...]], edge_ms: float = 0.0) -> Profile:
    return Profile("m", 1, "cpu", tuple(BatchTiming(b, tuple(sorted(s)), 0.0)
                                        for b, s in sorted(batches.items())),
                   edge_ms=edge_ms, edge_cpu_ms=0.5, load_s=10.0)


def md1_cdf(t: float, lam: float, d: float) -> float:
    rho = lam * d
    total = 0.0
    for k in range(math.floor(t / d) + 1):
        x = lam * (k * d - t)
        total += x ** k / math.factorial(k) * math.exp(-x)
    return (1 - rho) * total


def md1_quantile(q: float, lam: float, d: float) -> float:
    lo, hi = 0.0, d
    while md1_cdf(hi, lam, d) < q:
        hi *= 2
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if md1_cdf(mid, lam, d) < q else (lo, mid)
    return hi


@pytest.mark.parametrize("rho", [0.6, 0.8])
def test_one_item_batches_of_constant_service_are_the_md1_queue(rho: float) -> None:
    d = 0.010
    lam = rho / d
    profile = _profile({1: (10.0,)})
    arrivals = poisson_arrivals(lam, 100_000, random.Random(1))
    config = BatchConfig(1, 0.0, 1_000_000, 1e9)
    result = simulate(profile, config, arrivals, keep_requests=True)
    assert result.answered == result.requests
    waits = sorted(t - d for t in result.latencies_s)
    for q in (0.5, 0.9, 0.99):
        exact = md1_quantile(q, lam, d)
        simulated = quantile(waits, q)
        assert simulated == pytest.approx(exact, rel=0.05), (q, simulated, exact)
    assert result.utilisation == pytest.approx(rho, rel=0.03)


# -- fidelity: the real Batcher on virtual time ------------------------------------------
class _ProfiledLane:
    """A DeviceLane whose batch takes one draw of the profile's t(n), in virtual time."""

    def __init__(self, profile: Profile, seed: int, clock: Callable[[], float]) -> None:
        self._profile, self._rng, self._clock = profile, random.Random(seed), clock

    async def run(self, work: Callable[[], Any], deadline: float) -> tuple[Any, float]:
        started = self._clock()
        outcome = work()
        await asyncio.sleep(self._profile.service_s(len(outcome.results), self._rng.random()))
        return outcome, started

    def close(self) -> None:
        pass


def _run_batcher(profile: Profile, config: BatchConfig, arrivals: list[float],
                 seed: int) -> list[tuple[str, float]]:
    loop = VirtualTimeLoop()
    outcomes: list[tuple[str, float]] = [("", math.nan)] * len(arrivals)

    async def one(index: int, batcher: Batcher[int, int]) -> None:
        start = loop.time()
        try:
            await batcher.submit([index], start + config.request_timeout_s)
            outcomes[index] = ("answered", loop.time() - start)
        except Overloaded:
            outcomes[index] = ("rejected", math.nan)
        except DeadlineExpired:
            outcomes[index] = ("expired", math.nan)

    async def main() -> None:
        batcher: Batcher[int, int] = Batcher(lambda xs: xs, config, clock=loop.time,
                                             device=_ProfiledLane(profile, seed, loop.time))
        await batcher.start()
        tasks = []
        for index, at in enumerate(arrivals):
            await asyncio.sleep(max(0.0, at - loop.time()))
            tasks.append(asyncio.ensure_future(one(index, batcher)))
        await asyncio.gather(*tasks)
        await batcher.drain(1.0)

    try:
        loop.run_until_complete(main())
    finally:
        loop.close()
    return outcomes


@pytest.mark.parametrize("rate", [150.0, 900.0], ids=["underloaded", "overloaded"])
def test_the_simulation_does_what_the_real_batcher_does(rate: float) -> None:
    profile = _profile({1: (4.0, 5.0, 6.0), 4: (6.0, 7.0, 9.0), 8: (8.0, 10.0, 13.0)})
    config = BatchConfig(8, 3.0, 24, 40.0)
    arrivals = poisson_arrivals(rate, 3000, random.Random(3))
    real = _run_batcher(profile, config, arrivals, seed=11)
    sim = simulate(profile, config, arrivals, seed=11, keep_requests=True)
    assert [o for o, _ in real] == list(sim.outcomes)
    for (_, latency), simulated in zip(real, sim.latencies_s, strict=True):
        if not math.isnan(latency):
            assert simulated == pytest.approx(latency, abs=1e-9)
    if rate > 500:
        assert sim.rejected > 0 and sim.answered > 0
    else:
        assert sim.answered == sim.requests


# -- the rest ------------------------------------------------------------------------------
def test_a_burst_multiplies_the_rate_for_its_duration() -> None:
    times = bursty_arrivals(100.0, Burst(3.0, 20.0), 12_000, random.Random(1), burst_at_s=30)
    inside = sum(1 for t in times if 30 <= t < 50)
    before = sum(1 for t in times if 0 <= t < 20)
    assert inside / 20 == pytest.approx(300, rel=0.05)
    assert before / 20 == pytest.approx(100, rel=0.1)


def test_queue_mode_and_balancers_answer_what_they_can() -> None:
    profile = _profile({1: (4.0, 5.0), 8: (8.0, 10.0)}, edge_ms=1.0)
    config = BatchConfig(8, 2.0, 64, 100.0)
    arrivals = poisson_arrivals(1500.0, 6000, random.Random(5))
    for kwargs in ({"mode": "queue"}, {"balancer": "random"}, {"balancer": "least-loaded"}):
        result = simulate(profile, config, arrivals, replicas=3, **kwargs)  # type: ignore[arg-type]
        assert result.requests == result.answered + result.rejected + result.expired
        assert result.success_rate > 0.99 and result.p99_ms <= 100.0
        assert 0 < result.utilisation < 1
    assert result.cpu_limit_rps == 2000.0 and not result.is_cpu_bound


def test_a_hundred_thousand_requests_take_seconds_not_minutes() -> None:
    profile = _profile({1: (4.0, 5.0), 8: (8.0, 10.0), 32: (20.0, 24.0)})
    arrivals = poisson_arrivals(1000.0, 100_000, random.Random(2))
    began = time.perf_counter()
    simulate(profile, BatchConfig(32, 5.0, 1024, 200.0), arrivals)
    assert time.perf_counter() - began < 10.0
