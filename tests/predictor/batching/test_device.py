"""SharedDevice: one batch at a time on one thread, the nearest deadline first, and no
model starved by another's flood."""

from __future__ import annotations

import asyncio
import sys
import threading
import time
from pathlib import Path

import pytest

from predictor.batching._device import (
    DEVICE_THREAD_NAME,
    OwnDevice,
    SharedDevice,
    device_executor,
)


def _work(log: list[str], name: str, seconds: float, active: list[int]) -> str:
    active[0] += 1
    try:
        assert active[0] == 1, "two batches on the device at once"
        log.append(name)
        time.sleep(seconds)
        return f"{name} on {threading.current_thread().name}"
    finally:
        active[0] -= 1


def test_a_light_model_waits_one_batch_of_a_flooding_one_at_most() -> None:
    async def go() -> tuple[list[str], list[str]]:
        device = SharedDevice()
        log: list[str] = []
        active = [0]

        async def flood() -> None:  # model A: back to back, one batch at a time (a batcher)
            for i in range(12):
                await device.run(lambda i=i: _work(log, f"a{i}", 0.02, active),
                                 deadline=time.monotonic() - 100 + i)

        async def light() -> list[str]:  # model B: one batch now and then
            done = []
            for i in range(3):
                await asyncio.sleep(0.05)
                log.append(f"ask b{i}")
                result, _ = await device.run(lambda i=i: _work(log, f"b{i}", 0.02, active),
                                             deadline=time.monotonic() + 30)
                done.append(result)
            return done

        _, results = await asyncio.gather(flood(), light())
        device.shutdown()
        return log, results

    log, results = asyncio.run(go())
    assert all(r.split(" on ")[1].startswith("device") for r in results)
    ran = [entry for entry in log if not entry.startswith("ask")]
    assert sorted(ran) == sorted([f"a{i}" for i in range(12)] + ["b0", "b1", "b2"])
    for i in range(3):
        # A's batches have the earlier deadlines, yet B runs as soon as the batch running
        # when it asked is done.
        between = log[log.index(f"ask b{i}") + 1:log.index(f"b{i}")]
        assert len(between) <= 1, log


def test_two_busy_models_take_turns() -> None:
    async def go() -> list[str]:
        device = SharedDevice()
        log: list[str] = []
        active = [0]

        async def busy(model: str, seconds: float, batches: int) -> None:
            for _ in range(batches):
                await device.run(lambda: _work(log, model, seconds, active),
                                 deadline=time.monotonic() + 30)

        await asyncio.gather(busy("a", 0.02, 10), busy("b", 0.01, 20))
        device.shutdown()
        return log

    log = asyncio.run(go())
    assert log.count("a") == 10 and log.count("b") == 20
    # A batcher asks for its next batch only after its last one: a model never competes
    # with itself, so while both are busy they take turns, batch by batch.
    assert log[:20] == ["a", "b"] * 10, log


def test_among_several_waiting_the_nearest_deadline_goes_first() -> None:
    async def go() -> list[str]:
        device = SharedDevice()
        log: list[str] = []
        active = [0]
        blocker = asyncio.ensure_future(device.run(lambda: _work(log, "x", 0.03, active),
                                                   deadline=0))
        await asyncio.sleep(0.005)
        waits = [device.run(lambda m=m: _work(log, m, 0, active), deadline=d)
                 for m, d in (("late", 9.0), ("soon", 1.0), ("middle", 5.0))]
        await asyncio.gather(blocker, *waits)
        device.shutdown()
        return log

    assert asyncio.run(go()) == ["x", "soon", "middle", "late"]


def test_a_cancelled_waiter_passes_the_device_on() -> None:
    async def go() -> list[str]:
        device = SharedDevice()
        log: list[str] = []
        active = [0]
        first = asyncio.ensure_future(device.run(lambda: _work(log, "a", 0.05, active),
                                                 deadline=0))
        await asyncio.sleep(0.01)
        waiting = asyncio.ensure_future(device.run(lambda: _work(log, "b", 0, active),
                                                   deadline=0))
        third = asyncio.ensure_future(device.run(lambda: _work(log, "c", 0, active),
                                                 deadline=0))
        await asyncio.sleep(0.01)
        waiting.cancel()
        await first
        await asyncio.wait_for(third, 2)
        with pytest.raises(asyncio.CancelledError):
            await waiting
        assert device.waiting == 0
        device.shutdown()
        return log

    assert asyncio.run(go()) == ["a", "c"]


def test_own_device_reports_when_the_batch_started() -> None:
    async def go() -> tuple[str, float, float]:
        device = OwnDevice()
        before = time.monotonic()
        result, started = await device.run(lambda: threading.current_thread().name, 0.0)
        device.close()
        return result, before, started

    name, before, started = asyncio.run(go())
    assert name.startswith("batcher") and started >= before


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc names threads on Linux")
def test_the_device_thread_is_named_for_the_os_and_its_threads_inherit_it() -> None:
    """capacity/_edge.py tells the model's CPU from the edge's by this name."""

    def names() -> tuple[str, str]:
        own = Path(f"/proc/self/task/{threading.get_native_id()}/comm").read_text().strip()
        child: list[str] = []

        def inner() -> None:
            tid = threading.get_native_id()
            child.append(Path(f"/proc/self/task/{tid}/comm").read_text().strip())

        thread = threading.Thread(target=inner)  # started by the device thread
        thread.start()
        thread.join()
        return own, child[0]

    executor = device_executor()
    try:
        assert executor.submit(names).result() == (DEVICE_THREAD_NAME, DEVICE_THREAD_NAME)
    finally:
        executor.shutdown()
