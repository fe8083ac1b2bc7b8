"""SIGTERM on an LLM predictor: the stream that runs finishes whole, readiness goes
false, a new sequence is refused with 503, and the process exits 0."""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from tests.support.predictor import RunningPredictor
from tests.system.llm.conftest import CACHE

pytestmark = pytest.mark.slow


def test_sigterm_lets_the_running_stream_finish(
        registry_dir: Path, start_predictor: Callable[..., RunningPredictor]) -> None:
    from scripts.demo_models import ensure_demo

    ensure_demo(str(registry_dir), "demo-chat")
    chat = start_predictor("demo-chat", "stable", *CACHE, "--drain_timeout_s", "60",
                           ready_timeout_s=300)
    events: list[str] = []
    finished = threading.Event()

    def stream() -> None:
        with httpx.stream("POST", f"{chat.url}/openai/v1/chat/completions", timeout=120, json={
                "model": "demo-chat", "stream": True, "temperature": 0, "max_tokens": 40,
                "messages": [{"role": "user", "content": "Write a long story about a dragon."}],
        }) as r:
            for line in r.iter_lines():
                if line:
                    events.append(line)
        finished.set()

    reader = threading.Thread(target=stream)
    reader.start()
    deadline = time.monotonic() + 60
    while len(events) < 3:  # the sequence is running
        assert time.monotonic() < deadline, events
        time.sleep(0.05)
    chat.proc.signal(signal.SIGTERM)
    refused = None
    while refused is None and not finished.is_set():
        try:
            r = httpx.post(f"{chat.url}/sample", content="Hello", timeout=10)
        except httpx.TransportError:
            break  # already exited: the stream must have finished first
        if r.status_code == 503:
            refused = r
        time.sleep(0.05)
    reader.join(timeout=120)
    assert events[-1] == "data: [DONE]", events[-3:]
    assert '"finish_reason":"length"' in events[-2], events[-3:]  # all 40 tokens came
    assert refused is not None and refused.status_code == 503
    assert chat.proc.wait(timeout_s=60) == 0
