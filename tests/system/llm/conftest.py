"""One real LLM predictor on demo-chat (SmolLM2-135M-Instruct) for the module's tests."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.support.predictor import RunningPredictor

LIMIT = 48  # --max_new_tokens_limit: a larger max_tokens is capped to it
DEFAULT = 24  # --default_max_tokens: /sample's length
# Each predictor's own KV cache: left to the engine, it takes 90 percent of the memory
# free (13 GB here), and the rest of the suite shares this machine with it.
CACHE = ("--kv_cache_memory_mb", "512")


@pytest.fixture(scope="module")
def chat(registry_dir: Path,
         start_predictor: Callable[..., RunningPredictor]) -> Iterator[RunningPredictor]:
    from scripts.demo_models import ensure_demo

    ensure_demo(str(registry_dir), "demo-chat")
    served = start_predictor(
        "demo-chat",
        "stable",
        *CACHE,
        "--max_new_tokens_limit",
        str(LIMIT),
        "--default_max_tokens",
        str(DEFAULT),
        ready_timeout_s=300,
    )
    yield served
    served.proc.stop()  # the module's own: not held for the rest of the session
