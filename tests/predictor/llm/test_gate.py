"""The admission gate in front of the real engine (transformers' continuous batching over
demo-chat, SmolLM2-135M): which sequence enters next, the cap, push-out, cancellation."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from predictor.llm._engine import Output, Sampling, TransformersEngine
from predictor.llm._gate import AdmissionGate

TOKENS = 3  # each sequence's max_tokens: short, so that the test is quick


@pytest.fixture(scope="module")
def engine(registry_dir: Path,
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[TransformersEngine]:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from registry import Registry
    from scripts.demo_models import ensure_demo

    ensure_demo(str(registry_dir), "demo-chat")
    model_dir = tmp_path_factory.mktemp("gate") / "demo-chat"
    Registry.open(str(registry_dir)).fetch("demo-chat", "stable", model_dir)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model: Any = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    served = TransformersEngine(model, eos_token_ids=frozenset([tokenizer.eos_token_id]),
                                vocab_size=len(tokenizer), cache_bytes=64 * 2**20)
    served.start()
    yield served
    served.stop()


class Run:
    """Sequences through a gate, with the order of their first outputs and ends."""

    def __init__(self, gate: AdmissionGate) -> None:
        self.gate = gate
        self.started: list[str] = []
        self.ended: dict[str, Output] = {}
        self.most_running = 0
        self._done: dict[str, asyncio.Event] = {}

    def submit(self, name: str, flow: str | None, weight: float = 1.0) -> None:
        done = self._done[name] = asyncio.Event()

        def on_output(output: Output) -> None:
            self.most_running = max(self.most_running, self.gate.running)
            if name not in self.started and output.finished != "rejected":
                self.started.append(name)
            if output.finished is not None:
                self.ended[name] = output
                done.set()

        sampling = Sampling(max_tokens=TOKENS, ignore_eos=True)
        self.gate.submit(name, [1, 2, 3, 4], sampling, on_output, flow=flow, weight=weight)

    async def wait(self, *names: str) -> None:
        async with asyncio.timeout(120):
            for name in names:
                await self._done[name].wait()


def test_a_light_tenant_enters_ahead_of_a_heavy_backlog(engine: TransformersEngine) -> None:
    async def scenario() -> list[str]:
        run = Run(AdmissionGate(engine, max_running=1, fair=True))
        for i in range(4):
            run.submit(f"heavy-{i}", "heavy")
        run.submit("light-0", "light")
        assert run.gate.held == 4  # one runs; the rest wait at the gate, not in the engine
        await run.wait("heavy-0", "heavy-1", "heavy-2", "heavy-3", "light-0")
        assert run.most_running == 1
        assert all(out.finished == "length" and len(out.token_ids) == TOKENS
                   for out in run.ended.values())
        return run.started

    assert asyncio.run(scenario()) == ["heavy-0", "light-0", "heavy-1", "heavy-2", "heavy-3"]


def test_a_tenant_under_its_share_enters_past_the_cap(engine: TransformersEngine) -> None:
    """Every slot is the heavy tenant's: the light one, due one of the two, does not wait
    for a heavy generation to end; the batch grows to three until the heavy ones end."""
    async def scenario() -> list[str]:
        run = Run(AdmissionGate(engine, max_running=2, fair=True))
        for i in range(4):
            run.submit(f"heavy-{i}", "heavy")
        run.submit("light-0", "light")
        assert run.gate.share("light") == 1.0 and run.gate.share("heavy") == 1.0
        await run.wait("heavy-0", "heavy-1", "heavy-2", "heavy-3", "light-0")
        assert run.most_running == 3
        return run.started

    assert asyncio.run(scenario()) == ["heavy-0", "heavy-1", "light-0", "heavy-2", "heavy-3"]


def test_without_tenants_it_is_first_come_first_served(engine: TransformersEngine) -> None:
    async def scenario() -> list[str]:
        run = Run(AdmissionGate(engine, max_running=2, fair=False))
        names = [f"s-{i}" for i in range(5)]
        for name in names:
            run.submit(name, None)
        await run.wait(*names)
        assert run.most_running <= 2
        return run.started

    assert asyncio.run(scenario()) == [f"s-{i}" for i in range(5)]


def test_weights_share_the_entries(engine: TransformersEngine) -> None:
    """Two backlogged tenants of weights 3 and 1 enter 3 : 1 (equal costs)."""
    async def scenario() -> list[str]:
        run = Run(AdmissionGate(engine, max_running=1, fair=True))
        run.submit("first", None)  # holds the engine while both backlogs queue
        names = []
        for i in range(6):
            run.submit(f"a-{i}", "a", weight=3.0)
            run.submit(f"b-{i}", "b", weight=1.0)
            names += [f"a-{i}", f"b-{i}"]
        await run.wait("first", *names)
        return run.started[1:9]

    order = asyncio.run(scenario())
    assert sum(name.startswith("a") for name in order) == 6, order  # 6 of a's to 2 of b's


def test_a_full_queue_pushes_out_the_last_tagged(engine: TransformersEngine) -> None:
    async def scenario() -> None:
        run = Run(AdmissionGate(engine, max_running=1, fair=True))
        for i in range(3):
            run.submit(f"heavy-{i}", "heavy")
        assert run.gate.push_out("light")  # heavy-2, tagged last, makes room
        assert run.ended["heavy-2"].finished == "rejected"
        assert run.ended["heavy-2"].error and "fair share" in run.ended["heavy-2"].error
        run.submit("light-0", "light")
        assert not run.gate.push_out("heavy")  # heavy's next would be tagged last itself
        await run.wait("heavy-0", "heavy-1", "light-0")
        assert run.started == ["heavy-0", "light-0", "heavy-1"]

    asyncio.run(scenario())


def test_a_cancelled_sequence_leaves_the_queue_or_the_engine(engine: TransformersEngine) -> None:
    async def scenario() -> None:
        run = Run(AdmissionGate(engine, max_running=1, fair=True))
        slow = Sampling(max_tokens=200, ignore_eos=True)
        run.gate.submit("long", [1, 2, 3], slow, lambda output: None, flow="a")
        run.submit("waiting", "a")
        run.submit("next", "b")
        run.gate.cancel("waiting")  # from the queue: it never runs
        assert run.gate.held == 1
        run.gate.cancel("long")  # from the engine: its slot goes to the next one
        await run.wait("next")
        assert run.started == ["next"] and "waiting" not in run.ended
        assert run.gate.running == 0 and run.gate.held == 0
        stats = run.gate.stats()
        assert stats.waiting == 0

    asyncio.run(scenario())


def test_the_stats_count_the_sequences_held_as_waiting(engine: TransformersEngine) -> None:
    async def scenario() -> tuple[int, int]:
        run = Run(AdmissionGate(engine, max_running=1, fair=False))
        for i in range(4):
            run.submit(f"s-{i}", None)
        seen = run.gate.stats().waiting
        await run.wait(*(f"s-{i}" for i in range(4)))
        return seen, run.gate.stats().waiting

    seen, after = asyncio.run(scenario())
    assert seen >= 3 and after == 0

