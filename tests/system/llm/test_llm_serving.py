"""demo-chat served by a real predictor process: seed 1's /sample, OpenAI's routes through
the official ``openai`` client (whole and streamed), continuous batching, cancellation,
deadlines, bad input, and the LLM metrics."""

from __future__ import annotations

import threading
import time
from typing import Any

import httpx
import openai
import pytest

from tests.support.predictor import RunningPredictor
from tests.system.llm.conftest import DEFAULT, LIMIT

pytestmark = pytest.mark.slow
CAPITAL = [{"role": "user", "content": "What is the capital of France?"}]


def _client(chat: RunningPredictor) -> openai.OpenAI:
    return openai.OpenAI(
        base_url=f"{chat.url}/openai/v1", api_key="unused", max_retries=0, timeout=120
    )


def _metric(chat: RunningPredictor, name: str, **labels: str) -> float:
    want = [f'{k}="{v}"' for k, v in labels.items()]
    total = 0.0
    for line in chat.metrics().splitlines():
        if line.startswith(name + "{") and all(w in line for w in want):
            total += float(line.rsplit(" ", 1)[1])
    return total


def test_sample_answers_the_raw_completion_as_text(chat: RunningPredictor) -> None:
    r = httpx.post(f"{chat.url}/sample", content="E equals ", timeout=120)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/plain")
    assert r.text.strip() and "{" not in r.text[:1]
    again = httpx.post(f"{chat.url}/sample", content="E equals ", timeout=120)
    assert again.text == r.text  # greedy: the same prompt, the same answer


def test_the_chat_route_answers_through_the_openai_client(chat: RunningPredictor) -> None:
    client = _client(chat)
    assert [m.id for m in client.models.list().data] == ["demo-chat"]
    assert client.models.retrieve("demo-chat").id == "demo-chat"
    answer = client.chat.completions.create(
        model="demo-chat",
        messages=CAPITAL,  # type: ignore[arg-type]
        temperature=0,
        max_tokens=30,
    )
    choice = answer.choices[0]
    assert "Paris" in (choice.message.content or "") and choice.finish_reason == "stop"
    assert answer.usage is not None and answer.usage.prompt_tokens > 10
    assert 0 < answer.usage.completion_tokens < 30


def test_a_streamed_answer_is_the_whole_answer_in_pieces(chat: RunningPredictor) -> None:
    client = _client(chat)
    whole = client.completions.create(
        model="demo-chat", prompt="The three primary colours are", temperature=0, max_tokens=20
    )
    chunks = list(
        client.completions.create(
            model="demo-chat",
            prompt="The three primary colours are",
            temperature=0,
            max_tokens=20,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    text = "".join(c.choices[0].text for c in chunks if c.choices)
    assert text == whole.choices[0].text and len([c for c in chunks if c.choices]) > 3
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 20
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "length"
    streamed_chat = list(
        client.chat.completions.create(
            model="demo-chat", messages=CAPITAL, temperature=0, max_tokens=30, stream=True
        )
    )  # type: ignore[arg-type]
    assert streamed_chat[0].choices[0].delta.role == "assistant"
    assert "Paris" in "".join(c.choices[0].delta.content or "" for c in streamed_chat)
    raw = httpx.post(
        f"{chat.url}/openai/v1/completions",
        timeout=60,
        json={"model": "demo-chat", "prompt": "Hello", "max_tokens": 2, "stream": True},
    )
    assert raw.headers["content-type"] == "text/event-stream"
    assert raw.text.endswith("data: [DONE]\n\n")


def test_stop_max_tokens_and_the_server_cap(chat: RunningPredictor) -> None:
    client = _client(chat)
    stopped = client.completions.create(
        model="demo-chat", prompt="Count: 1, 2, 3, 4,", temperature=0, max_tokens=30, stop=["7"]
    )
    assert "7" not in stopped.choices[0].text and stopped.choices[0].finish_reason == "stop"
    capped = client.completions.create(
        model="demo-chat", prompt="Once upon a time", temperature=0, max_tokens=10_000
    )
    assert capped.usage is not None and capped.usage.completion_tokens <= LIMIT
    sampled = client.completions.create(
        model="demo-chat", prompt="A colour:", max_tokens=5, temperature=1.2, top_p=0.9, seed=7
    )
    assert sampled.usage is not None and sampled.usage.completion_tokens <= 5
    r = httpx.post(f"{chat.url}/sample", content="Once upon a time", timeout=120)
    tokens = _client(chat).completions.create(
        model="demo-chat", prompt="Once upon a time", temperature=0, max_tokens=DEFAULT
    )
    assert r.text == tokens.choices[0].text  # /sample: greedy, --default_max_tokens


def test_a_short_request_that_arrives_later_finishes_first(chat: RunningPredictor) -> None:
    """Continuous batching: the short sequence joins the running batch between decode
    steps instead of waiting for the long one to end."""
    done: dict[str, tuple[float, str]] = {}
    story = [{"role": "user", "content": "Write a long story about a dragon."}]

    def ask(name: str, max_tokens: int) -> None:
        r = httpx.post(f"{chat.url}/openai/v1/chat/completions", timeout=120, json={
            "model": "demo-chat", "messages": story, "max_tokens": max_tokens, "temperature": 0})
        r.raise_for_status()
        done[name] = (time.monotonic(), r.json()["choices"][0]["finish_reason"])

    long = threading.Thread(target=ask, args=("long", LIMIT))
    long.start()
    _wait_running(chat, 1)
    ask("short", 2)
    long.join()
    assert done["long"][1] == done["short"][1] == "length", done  # both ran to their max_tokens
    assert done["short"][0] < done["long"][0], done


def _wait_running(chat: RunningPredictor, n: int, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while _metric(chat, "modelctl_llm_sequences_running") < n:
        assert time.monotonic() < deadline, "no sequence started running"
        time.sleep(0.05)


def test_a_client_that_disconnects_cancels_its_sequence(chat: RunningPredictor) -> None:
    before = _metric(chat, "modelctl_llm_requests_finished_total", finish_reason="cancelled")
    with httpx.stream(
        "POST",
        f"{chat.url}/openai/v1/completions",
        timeout=60,
        json={
            "model": "demo-chat",
            "prompt": "Tell me everything about the sea.",
            "max_tokens": LIMIT,
            "temperature": 0,
            "stream": True,
        },
    ) as r:
        lines = r.iter_lines()
        assert next(lines).startswith("data: ")
    deadline = time.monotonic() + 30
    while (
        _metric(chat, "modelctl_llm_requests_finished_total", finish_reason="cancelled") <= before
    ):
        assert time.monotonic() < deadline, "the sequence was not cancelled"
        time.sleep(0.1)
    while _metric(chat, "modelctl_llm_sequences_running") > 0:  # its slot and cache are free again
        assert time.monotonic() < deadline
        time.sleep(0.1)


def test_the_deadline_covers_the_first_token(chat: RunningPredictor) -> None:
    r = httpx.post(
        f"{chat.url}/sample", content="Hello", timeout=60, headers={"x-request-timeout-ms": "1"}
    )
    assert r.status_code == 429 and "retry-after" in r.headers, r.text
    assert "deadline" in r.json()["error"]
    assert _metric(chat, "modelctl_llm_requests_finished_total", finish_reason="deadline") >= 1


@pytest.mark.parametrize(
    ("path", "body", "status", "words"),
    [
        ("/openai/v1/completions", b"{oops", 400, "not valid JSON"),
        (
            "/openai/v1/completions",
            b'{"model": "demo-chat", "prompt": "x", "bogus": 1}',
            400,
            "'bogus'",
        ),
        ("/openai/v1/completions", b'{"model": "demo-chat", "prompt": 5}', 400, "'prompt'"),
        (
            "/openai/v1/chat/completions",
            b'{"model": "demo-chat", "messages": "hi"}',
            400,
            "'messages'",
        ),
        ("/openai/v1/completions", b'{"model": "other", "prompt": "x"}', 404, "not served here"),
        ("/sample", b"", 400, "empty"),
        ("/sample", b"\xff\xfe", 400, "UTF-8"),
    ],
)
def test_bad_requests_are_4xx_and_the_server_keeps_serving(
    chat: RunningPredictor, path: str, body: bytes, status: int, words: str
) -> None:
    r = httpx.post(
        f"{chat.url}{path}", content=body, timeout=30, headers={"content-type": "application/json"}
    )
    assert r.status_code == status, r.text
    message = r.json()["error"]
    message = message["message"] if isinstance(message, dict) else message
    assert words in message, message
    if path.startswith("/openai"):
        assert r.json()["error"]["code"] == str(status)
    ok = httpx.post(
        f"{chat.url}/openai/v1/completions",
        timeout=60,
        json={"model": "demo-chat", "prompt": "Hi", "max_tokens": 1},
    )
    assert ok.status_code == 200


def test_a_prompt_longer_than_the_context_is_a_400_naming_it(chat: RunningPredictor) -> None:
    client = _client(chat)
    with pytest.raises(openai.BadRequestError, match="context is 8192 tokens"):
        client.completions.create(model="demo-chat", prompt="hello " * 9000, max_tokens=4)
    with pytest.raises(openai.BadRequestError, match="context is 8192 tokens"):
        client.completions.create(model="demo-chat", prompt="hello " * 8180, max_tokens=40)
    r = httpx.get(f"{chat.url}/openai/v1/completions", timeout=10)
    assert r.status_code == 405 and r.headers["allow"] == "POST"
    r = httpx.post(f"{chat.url}/v1/models/demo-chat:predict", json={"instances": ["x"]}, timeout=10)
    assert r.status_code == 400 and "/sample" in r.json()["error"]


def test_every_llm_metric_is_exported(chat: RunningPredictor) -> None:
    _client(chat).completions.create(
        model="demo-chat", prompt="Hi there", max_tokens=4, temperature=0
    )
    labels: dict[str, Any] = {"model": "demo-chat", "role": "stable"}
    for name in (
        "modelctl_llm_time_to_first_token_seconds_count",
        "modelctl_llm_time_per_output_token_seconds_count",
        "modelctl_llm_e2e_request_latency_seconds_count",
        "modelctl_llm_prompt_tokens_total",
        "modelctl_llm_generation_tokens_total",
    ):
        assert _metric(chat, name, **labels) > 0, name
    text = chat.metrics()
    for name in (
        "modelctl_llm_sequences_running{",
        "modelctl_llm_sequences_waiting{",
        "modelctl_llm_sequences_preempted{",
        "modelctl_llm_kv_cache_blocks{",
    ):
        assert name in text, name
    assert _metric(chat, "modelctl_requests_total", code="200", **labels) > 0  # the edge's
    assert _metric(chat, "modelctl_llm_kv_cache_blocks", state="free") > 0
