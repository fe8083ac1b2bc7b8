"""The batcher on a real event loop, with a real executor thread and a fake model."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import Any, TypeVar

import pytest

from predictor._errors import BadInput, DeadlineExpired, ItemFailed, Overloaded
from predictor.batching import Batcher, BatchStats
from predictor.batching._isolation import is_out_of_memory, run_isolating
from predictor.batching._policy import BatchConfig

X = TypeVar("X")


class OutOfMemoryError(RuntimeError):
    """Named like torch.cuda.OutOfMemoryError, which is all the batcher looks at."""


class Device:
    """A synchronous run_batch that doubles numbers, records what it ran and on
    which thread, can be held closed, and misbehaves on request."""

    def __init__(
        self,
        *,
        latency_s: float = 0.0,
        oom_above: int | None = None,
        bad_inputs: frozenset[int] = frozenset(),
        breaks_on: frozenset[int] = frozenset(),
    ) -> None:
        self.batches: list[list[int]] = []
        self.threads: set[int] = set()
        self.gate = threading.Event()
        self.gate.set()
        self.latency_s = latency_s
        self.oom_above = oom_above
        self.bad_inputs = bad_inputs
        self.breaks_on = breaks_on

    def hold(self) -> None:
        self.gate.clear()

    def release(self) -> None:
        self.gate.set()

    def __call__(self, items: list[int]) -> list[int]:
        self.threads.add(threading.get_ident())
        self.batches.append(list(items))
        if not self.gate.wait(timeout=10):
            raise RuntimeError("the test never released the device")
        if self.latency_s:
            time.sleep(self.latency_s)
        if self.oom_above is not None and len(items) > self.oom_above:
            raise OutOfMemoryError(f"CUDA out of memory with {len(items)} items")
        for x in items:
            if x in self.bad_inputs:
                raise ValueError(f"{x} is not a valid input")
            if x in self.breaks_on:
                raise RuntimeError(f"the model broke on {x}")
        return [x * 2 for x in items]

    @property
    def ran(self) -> list[int]:
        return [x for batch in self.batches for x in batch]


def run(coro: Coroutine[Any, Any, X]) -> X:
    return asyncio.run(asyncio.wait_for(coro, 15))


async def eventually(check: Callable[[], bool], what: str, timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        await asyncio.sleep(0.001)


def in_(seconds: float) -> float:
    return time.monotonic() + seconds


async def started(device: Device, config: BatchConfig, stats: list[BatchStats]) -> Batcher[
    int, int
]:
    batcher: Batcher[int, int] = Batcher(device, config, on_batch=stats.append)
    await batcher.start()
    return batcher


async def occupy(batcher: Batcher[int, int], device: Device, value: int = 1000) -> asyncio.Task[
    list[int]
]:
    """Hold the device and start one request on it, so that others queue up."""
    device.hold()
    task = asyncio.create_task(batcher.submit([value], in_(10)))
    await eventually(lambda: batcher.in_flight == 1, "the first batch to start")
    return task


async def settle(tasks: Sequence[Awaitable[Any]]) -> list[Any]:
    return list(await asyncio.gather(*tasks, return_exceptions=True))


def test_200_concurrent_requests_get_their_own_results_in_batches() -> None:
    async def scenario() -> None:
        device = Device(latency_s=0.002)
        stats: list[BatchStats] = []
        batcher = await started(device, BatchConfig(max_batch_size=16, max_batch_wait_ms=5,
                                                    max_queue_size=512), stats)
        results = await asyncio.gather(*(batcher.submit([i], in_(10)) for i in range(200)))
        assert results == [[2 * i] for i in range(200)]
        assert device.ran == list(range(200))  # FIFO through every batch
        assert max(len(b) for b in device.batches) > 1
        assert all(len(b) <= 16 for b in device.batches)
        assert sum(s.size for s in stats) == 200
        assert {s.kind for s in stats} == {"ok"}
        assert all(len(s.queue_waits_s) == s.size and min(s.queue_waits_s) >= 0 for s in stats)
        assert batcher.items_succeeded == 200
        assert batcher.policy.latency_model.observations == len(stats)
        assert await batcher.drain(1.0)

    run(scenario())


def test_a_request_of_many_items_keeps_its_order_across_batches() -> None:
    async def scenario() -> None:
        device = Device()
        stats: list[BatchStats] = []
        batcher = await started(device, BatchConfig(max_batch_size=2, max_queue_size=8), stats)
        assert await batcher.submit([5, 4, 3, 2, 1], in_(10)) == [10, 8, 6, 4, 2]
        assert [len(b) for b in device.batches] == [2, 2, 1]
        await batcher.drain(1.0)

    run(scenario())


def test_run_batch_runs_on_one_thread_off_the_event_loop() -> None:
    async def scenario() -> None:
        device = Device()
        stats: list[BatchStats] = []
        batcher = await started(device, BatchConfig(max_batch_size=4, max_queue_size=64), stats)
        await asyncio.gather(*(batcher.submit([i], in_(10)) for i in range(20)))
        assert len(device.threads) == 1
        assert threading.get_ident() not in device.threads
        await batcher.drain(1.0)

    run(scenario())


def test_a_full_queue_refuses_at_once_and_whole_requests_only() -> None:
    async def scenario() -> None:
        device = Device()
        stats: list[BatchStats] = []
        batcher = await started(device, BatchConfig(max_batch_size=2, max_queue_size=4), stats)
        first = await occupy(batcher, device)
        queued = [asyncio.create_task(batcher.submit([i], in_(10))) for i in range(3)]
        await eventually(lambda: batcher.queue_depth == 3, "three queued items")
        with pytest.raises(Overloaded, match="queue is full") as refused:
            await asyncio.wait_for(batcher.submit([10, 11], in_(10)), 1.0)
        assert refused.value.reason == "queue_full"
        assert refused.value.retry_after_s > 0
        assert batcher.queue_depth == 3  # all of the request's items or none
        last = asyncio.create_task(batcher.submit([3], in_(10)))  # exactly fills it
        await eventually(lambda: batcher.queue_depth == 4, "a full queue")
        device.release()
        assert await first == [2000]
        assert await asyncio.gather(*queued, last) == [[0], [2], [4], [6]]
        assert batcher.rejected == {"queue_full": 1}
        await batcher.drain(1.0)

    run(scenario())


def test_a_request_that_cannot_meet_its_deadline_is_refused() -> None:
    async def scenario() -> None:
        device = Device(latency_s=0.1)
        stats: list[BatchStats] = []
        batcher = await started(device, BatchConfig(max_batch_size=8, max_queue_size=64), stats)
        await batcher.submit([1], in_(10))  # the batcher learns that a batch takes 100 ms
        with pytest.raises(Overloaded, match="cannot finish within its deadline") as refused:
            await batcher.submit([2], in_(0.05))
        assert refused.value.reason == "deadline"
        assert await batcher.submit([3], in_(5.0)) == [6]
        assert batcher.rejected == {"deadline": 1}
        assert 2 not in device.ran
        await batcher.drain(1.0)

    run(scenario())


def test_an_item_that_expires_in_the_queue_never_runs() -> None:
    async def scenario() -> None:
        device = Device()
        stats: list[BatchStats] = []
        batcher = await started(device, BatchConfig(max_batch_size=4, max_batch_wait_ms=0,
                                                    max_queue_size=16), stats)
        first = await occupy(batcher, device)
        doomed = asyncio.create_task(batcher.submit([5, 6], in_(0.15), timeout_ms=200))
        survivor = asyncio.create_task(batcher.submit([8], in_(10)))
        with pytest.raises(DeadlineExpired, match=r"deadline of 200 ms expired after waiting "
                                                  r"\d+ ms in the queue") as expired:
            await asyncio.wait_for(doomed, 2.0)  # while the device is still held
        assert 100 < expired.value.waited_ms < 1000
        assert batcher.items_expired == 2
        device.release()
        assert await first == [2000]
        assert await survivor == [16]
        assert 5 not in device.ran and 6 not in device.ran
        assert sum(s.expired for s in stats) == 2
        await batcher.drain(1.0)

    run(scenario())


def test_a_poison_item_fails_only_its_own_request() -> None:
    async def scenario() -> None:
        device = Device(bad_inputs=frozenset({13}), breaks_on=frozenset({7}))
        stats: list[BatchStats] = []
        batcher = await started(device, BatchConfig(max_batch_size=32, max_queue_size=64), stats)
        first = await occupy(batcher, device)
        requests = [[i] for i in range(20) if i not in (7, 13)] + [[13], [7], [30, 13, 31]]
        tasks = [asyncio.create_task(batcher.submit(r, in_(10))) for r in requests]
        await eventually(lambda: batcher.queue_depth == 23, "everything queued")
        device.release()
        await first
        outcomes = dict(zip(map(tuple, requests), await settle(tasks), strict=True))
        bad_input, broken, mixed = outcomes.pop((13,)), outcomes.pop((7,)), outcomes.pop(
            (30, 13, 31))
        assert isinstance(bad_input, ItemFailed) and bad_input.is_input_error
        assert "13 is not a valid input" in str(bad_input)
        assert isinstance(broken, ItemFailed) and not broken.is_input_error
        assert isinstance(broken.cause, RuntimeError)
        assert isinstance(mixed, ItemFailed) and mixed.item_index == 1
        assert outcomes == {(i,): [2 * i] for i in range(20) if i not in (7, 13)}
        batch = stats[-1]
        assert (batch.size, batch.kind, batch.failed) == (23, "bisect", 3)
        assert batch.runs > 1
        assert batcher.items_failed == 3
        await batcher.drain(1.0)

    run(scenario())


def test_out_of_memory_splits_the_batch_and_lowers_the_cap() -> None:
    async def scenario() -> None:
        device = Device(oom_above=4)
        stats: list[BatchStats] = []
        batcher = await started(device, BatchConfig(max_batch_size=16, max_queue_size=64), stats)
        first = await occupy(batcher, device)
        tasks = [asyncio.create_task(batcher.submit([i], in_(10))) for i in range(16)]
        await eventually(lambda: batcher.queue_depth == 16, "sixteen queued items")
        device.release()
        await first
        assert await asyncio.gather(*tasks) == [[2 * i] for i in range(16)]
        assert batcher.batch_cap == 4
        assert (stats[-1].kind, stats[-1].cap, stats[-1].failed) == ("oom", 4, 0)
        device.batches.clear()
        more = await asyncio.gather(*(batcher.submit([i], in_(10)) for i in range(12)))
        assert more == [[2 * i] for i in range(12)]
        assert max(len(b) for b in device.batches) <= 4  # the cap holds from now on
        await batcher.drain(1.0)

    run(scenario())


def test_oom_is_recognised_by_class_name() -> None:
    assert is_out_of_memory(OutOfMemoryError("boom"))
    assert not is_out_of_memory(MemoryError("host memory"))


def test_isolation_counts_runs_and_handles_a_lying_model() -> None:
    oom = run_isolating(Device(oom_above=4), list(range(16)), 16,
                        clock=time.monotonic, is_oom=is_out_of_memory)
    assert (oom.kind, oom.cap, oom.runs, oom.failures) == ("oom", 4, 7, {})
    assert oom.results == [2 * i for i in range(16)]
    assert sorted(size for size, _ in oom.timings) == [4, 4, 4, 4]
    alone = run_isolating(Device(oom_above=0), [1, 2], 2, clock=time.monotonic,
                          is_oom=is_out_of_memory)
    assert alone.kind == "oom" and set(alone.failures) == {0, 1}  # too big even alone

    def drops_the_last(items: list[int]) -> list[int]:
        return items[:-1] if len(items) > 2 else items

    lying = run_isolating(drops_the_last, [1, 2, 3, 4], 4, clock=time.monotonic,
                          is_oom=is_out_of_memory)
    assert (lying.kind, lying.runs, lying.results) == ("bisect", 3, [1, 2, 3, 4])


def test_a_failing_on_batch_callback_does_not_stop_the_batcher() -> None:
    def explode(stats: BatchStats) -> None:
        raise RuntimeError("metrics are down")

    async def scenario() -> None:
        batcher: Batcher[int, int] = Batcher(Device(), BatchConfig(), on_batch=explode)
        await batcher.start()
        assert await batcher.submit([1], in_(10)) == [2]
        assert await batcher.submit([2], in_(10)) == [4]
        await batcher.drain(1.0)

    run(scenario())


def test_drain_refuses_new_work_and_finishes_accepted_work() -> None:
    async def scenario() -> None:
        device = Device()
        stats: list[BatchStats] = []
        batcher = await started(device, BatchConfig(max_batch_size=2, max_queue_size=16), stats)
        first = await occupy(batcher, device)
        queued = [asyncio.create_task(batcher.submit([i], in_(10))) for i in range(5)]
        await eventually(lambda: batcher.queue_depth == 5, "five queued items")
        drain = asyncio.create_task(batcher.drain(5.0))
        await eventually(lambda: batcher.is_draining, "draining")
        with pytest.raises(Overloaded) as refused:
            await batcher.submit([99], in_(10))
        assert refused.value.reason == "draining"
        device.release()
        assert await drain is True
        assert await first == [2000]
        assert await asyncio.gather(*queued) == [[0], [2], [4], [6], [8]]
        assert batcher.rejected == {"draining": 1}
        assert (batcher.queue_depth, batcher.in_flight) == (0, 0)

    run(scenario())


def test_drain_that_times_out_answers_everything_left() -> None:
    async def scenario() -> None:
        device = Device()
        stats: list[BatchStats] = []
        batcher = await started(device, BatchConfig(max_batch_size=2, max_queue_size=16), stats)
        first = await occupy(batcher, device)
        queued = asyncio.create_task(batcher.submit([1], in_(10)))
        await eventually(lambda: batcher.queue_depth == 1, "one queued item")
        try:
            assert await batcher.drain(0.05) is False
            outcomes = await settle([first, queued])
            assert all(isinstance(o, Overloaded) and o.reason == "draining" for o in outcomes)
        finally:
            device.release()

    run(scenario())


def test_a_cancelled_request_leaves_the_queue() -> None:
    async def scenario() -> None:
        device = Device()
        stats: list[BatchStats] = []
        batcher = await started(device, BatchConfig(max_batch_size=4, max_queue_size=16), stats)
        first = await occupy(batcher, device)
        gone = asyncio.create_task(batcher.submit([41, 42], in_(10)))
        kept = asyncio.create_task(batcher.submit([43], in_(10)))
        await eventually(lambda: batcher.queue_depth == 3, "three queued items")
        gone.cancel()
        await eventually(lambda: batcher.queue_depth == 1, "the cancelled items to leave")
        device.release()
        await first
        assert await kept == [86]
        assert 41 not in device.ran and 42 not in device.ran
        assert batcher.items_abandoned == 2
        await batcher.drain(1.0)

    run(scenario())


def test_misuse_is_reported_clearly() -> None:
    async def scenario() -> None:
        batcher: Batcher[int, int] = Batcher(Device(), BatchConfig())
        with pytest.raises(RuntimeError, match="await start"):
            await batcher.submit([1], in_(10))
        await batcher.start()
        with pytest.raises(BadInput, match="at least one item"):
            await batcher.submit([], in_(10))
        await batcher.drain(1.0)

    run(scenario())
