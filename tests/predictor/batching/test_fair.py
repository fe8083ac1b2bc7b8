"""The batcher's fair order across flows (tenants), on a real event loop and thread:
start-time fair queuing puts a light flow's item ahead of a heavy flow's backlog, a
weight buys a share, a full queue pushes out the heaviest flow, and one flow is FIFO."""

from __future__ import annotations

import asyncio

from predictor._errors import Overloaded
from predictor.batching import BatchConfig, BatchStats
from predictor.batching._fair import FairOrder, position
from tests.predictor.batching.test_batcher import Device, in_, occupy, run, settle, started


def test_a_light_flow_goes_ahead_of_a_heavy_flows_backlog() -> None:
    async def scenario() -> None:
        device = Device()
        stats: list[BatchStats] = []
        batcher = await started(device, BatchConfig(max_batch_size=2, max_batch_wait_ms=0,
                                                    max_queue_size=64), stats)
        first = await occupy(batcher, device)
        heavy = [asyncio.create_task(batcher.submit([i], in_(10), flow="a")) for i in range(10)]
        await asyncio.sleep(0.01)
        light = asyncio.create_task(batcher.submit([100], in_(10), flow="b"))
        await asyncio.sleep(0.01)
        device.release()
        await settle([first, *heavy, light])
        # b's one item runs in the first batch after the held one, not after a's ten.
        assert 100 in device.batches[1]
        assert [x for x in device.ran if x < 100] == list(range(10))  # a keeps its own order
        assert await batcher.drain(1.0)

    run(scenario())


def test_weights_share_the_device_in_their_ratio() -> None:
    async def scenario() -> None:
        device = Device()
        batcher = await started(device, BatchConfig(max_batch_size=1, max_batch_wait_ms=0,
                                                    max_queue_size=256), [])
        first = await occupy(batcher, device)
        gold = [asyncio.create_task(batcher.submit([i], in_(10), flow="gold", weight=3))
                for i in range(60)]
        base = [asyncio.create_task(batcher.submit([200 + i], in_(10), flow="base"))
                for i in range(60)]
        await asyncio.sleep(0.01)
        device.release()
        await settle([first, *gold, *base])
        head = device.ran[1:41]  # the first 40 after the held one, both flows backlogged
        assert sum(1 for x in head if x < 200) == 30  # 3 : 1
        assert await batcher.drain(1.0)

    run(scenario())


def test_a_full_queue_pushes_out_the_flow_that_sent_more_than_its_share() -> None:
    async def scenario() -> None:
        device = Device()
        batcher = await started(device, BatchConfig(max_batch_size=1, max_batch_wait_ms=0,
                                                    max_queue_size=4), [])
        first = await occupy(batcher, device)
        heavy = [asyncio.create_task(batcher.submit([i], in_(10), flow="a")) for i in range(4)]
        await asyncio.sleep(0.01)
        assert batcher.queue_depth == 4
        light = asyncio.create_task(batcher.submit([100], in_(10), flow="b"))
        await asyncio.sleep(0.01)
        assert isinstance(heavy[-1].exception(), Overloaded)  # a's last, pushed out
        assert "more than its" in str(heavy[-1].exception())
        device.release()
        results = await settle([first, *heavy[:3], light])
        assert results[-1] == [200] and batcher.items_pushed_out == 1
        assert batcher.rejected == {"queue_full": 1}
        assert await batcher.drain(1.0)

    run(scenario())


def test_one_flow_is_plain_fifo_and_tags_only_grow() -> None:
    order = FairOrder()
    tags = [order.tags(None, 2, 1.0) for _ in range(3)]
    assert tags == [[0.0, 1.0], [2.0, 3.0], [4.0, 5.0]]

    class Tagged:
        def __init__(self, tag: float) -> None:
            self.tag = tag

    queue = [Tagged(t) for t in (0.0, 1.0, 2.0)]
    assert position(queue, 2.0) == 3 and position(queue, 0.5) == 1 and position([], 9) == 0
    order.dispatched(queue)
    assert order.start("new") == 2.0  # a new flow starts at V, not at 0
