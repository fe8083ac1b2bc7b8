"""One real LLM predictor on demo-chat (SmolLM2-135M-Instruct) for the module's tests."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.predictor import RunningPredictor

LIMIT = 48  # --max_new_tokens_limit: a larger max_tokens is capped to it
DEFAULT = 24  # --default_max_tokens: /sample's length


@pytest.fixture(scope="module")
def chat(registry_dir: Path, start_predictor: Callable[..., RunningPredictor]) -> RunningPredictor:
    from scripts.demo_models import ensure_demo

    ensure_demo(str(registry_dir), "demo-chat")
    return start_predictor(
        "demo-chat",
        "stable",
        "--max_new_tokens_limit",
        str(LIMIT),
        "--default_max_tokens",
        str(DEFAULT),
        ready_timeout_s=300,
    )
