"""Fair share between tenants inside one LLM server: a real demo-chat predictor, two
tenants, the ``openai`` client. The heavy tenant keeps eight streams going against a
server that runs two sequences and lets four wait; the light tenant asks now and then.

transformers' own scheduler is first come, first served, so without the admission gate
(``predictor/llm/_gate.py``) the light tenant would queue behind the heavy backlog and
get 429s with it. With it, the light tenant's sequences enter next, pushing the heavy
tenant's newest out when the queue is full; every light request is answered, the heavy
tenant gets 429s, and the light tenant waits less for its first token.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from common.tenants import hash_key, new_key
from tests.support.predictor import RunningPredictor
from tests.system.llm.conftest import CACHE

MODEL = "demo-chat"
HEAVY, LIGHT = new_key(), new_key()
TOKENS = 24


@pytest.fixture(scope="module")
def server(registry_dir: Path, start_predictor: Callable[..., RunningPredictor],
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningPredictor]:
    from scripts.demo_models import ensure_demo

    ensure_demo(str(registry_dir), MODEL)
    tenants = tmp_path_factory.mktemp("fair") / "tenants.yaml"
    tenants.write_text(yaml.safe_dump({"tenants": {
        "heavy": {"keys": [hash_key(HEAVY)]}, "light": {"keys": [hash_key(LIGHT)]}}}))
    served = start_predictor(MODEL, "stable", *CACHE, "--tenants_file", str(tenants),
                             "--enable_grpc", "false", "--max_batch_size", "2",
                             "--max_queue_size", "4", "--request_timeout_ms", "60000",
                             ready_timeout_s=300)
    yield served
    served.proc.stop()


async def _stream(client: Any, outcomes: list[tuple[str, float | None]], tenant: str) -> None:
    """One streamed completion: (tenant, seconds to its first token), or None on a 429."""
    import openai

    sent = time.monotonic()
    try:
        stream = await client.completions.create(
            model=MODEL, prompt="Tell me about the sea.", max_tokens=TOKENS, temperature=0,
            stream=True, extra_body={"ignore_eos": True})
        first = None
        async for _ in stream:
            first = first or time.monotonic() - sent
        outcomes.append((tenant, first))
    except openai.RateLimitError:
        outcomes.append((tenant, None))


async def _flood(url: str, seconds: float) -> list[tuple[str, float | None]]:
    import openai

    heavy = openai.AsyncOpenAI(base_url=f"{url}/openai/v1", api_key=HEAVY, max_retries=0)
    light = openai.AsyncOpenAI(base_url=f"{url}/openai/v1", api_key=LIGHT, max_retries=0)
    outcomes: list[tuple[str, float | None]] = []
    stop_at = time.monotonic() + seconds

    async def heavy_loop() -> None:
        while time.monotonic() < stop_at:
            await _stream(heavy, outcomes, "heavy")
            await asyncio.sleep(0.05)

    async def light_loop() -> None:
        await asyncio.sleep(2.0)  # the heavy backlog first
        while time.monotonic() < stop_at:
            await _stream(light, outcomes, "light")
            await asyncio.sleep(0.5)

    await asyncio.gather(*(heavy_loop() for _ in range(8)), light_loop())
    await heavy.close()
    await light.close()
    return outcomes


def test_a_light_tenant_goes_ahead_of_a_flooding_one(server: RunningPredictor) -> None:
    outcomes = asyncio.run(_flood(server.url, 25.0))
    heavy = [t for tenant, t in outcomes if tenant == "heavy"]
    light = [t for tenant, t in outcomes if tenant == "light"]
    served_heavy = [t for t in heavy if t is not None]
    assert len(light) >= 3, outcomes
    assert None not in light, outcomes  # every light request answered
    assert heavy.count(None) > 0 and served_heavy, outcomes  # heavy gets 429s and service
    # First in line at the gate: the light tenant waits for one slot, the heavy tenant
    # behind its own backlog.
    light_wait = statistics.median(t for t in light if t is not None)
    assert light_wait < statistics.median(served_heavy), (light, served_heavy)
    metrics = server.metrics()
    assert 'tenant="light"' in metrics and 'code="429"' in metrics
