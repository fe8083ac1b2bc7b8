"""The OpenAI and /sample bodies: what is accepted, and a 400 naming the field otherwise."""

from __future__ import annotations

import json

import pytest

from predictor import BadInput
from predictor.llm import parse_chat, parse_completion, parse_sample


def _body(**fields: object) -> bytes:
    return json.dumps(fields).encode()


def test_a_completion_takes_openai_fields() -> None:
    req = parse_completion(
        _body(
            model="m",
            prompt="hi",
            max_tokens=5,
            temperature=0,
            top_p=0.5,
            stop=["\n", "."],
            seed=3,
            stream=True,
            stream_options={"include_usage": True},
            user="u",
            n=1,
            ignore_eos=True,
        )
    )
    assert (req.prompt, req.max_tokens, req.temperature, req.top_p) == ("hi", 5, 0.0, 0.5)
    assert req.stop == ("\n", ".") and req.seed == 3 and req.stream and req.include_usage
    assert req.ignore_eos and req.sampling(5).ignore_eos
    assert parse_completion(_body(model="m", prompt=["one"])).prompt == "one"
    assert parse_completion(_body(model="m", prompt="x")).temperature == 1.0  # OpenAI's default


def test_chat_messages_and_max_completion_tokens() -> None:
    req = parse_chat(
        _body(
            model="m",
            max_completion_tokens=7,
            messages=[
                {"role": "developer", "content": "be brief"},
                {
                    "role": "user",
                    "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}],
                },
            ],
        )
    )
    assert req.messages == (
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "ab"},
    )
    assert req.max_tokens == 7 and req.prompt is None


@pytest.mark.parametrize(
    ("body", "words"),
    [
        (b"{not json", "not valid JSON"),
        (b"[1, 2]", "JSON object"),
        (_body(prompt="x"), "'model' is required"),
        (_body(model="m", prompt="x", bogus=1), "unknown or unsupported field 'bogus'"),
        (_body(model="m", prompt=1), "'prompt'"),
        (_body(model="m", prompt="x", max_tokens="9"), "'max_tokens'"),
        (_body(model="m", prompt="x", max_tokens=0), "'max_tokens'"),
        (_body(model="m", prompt="x", temperature=3), "'temperature'"),
        (_body(model="m", prompt="x", top_p=0), "'top_p'"),
        (_body(model="m", prompt="x", n=2), "'n'"),
        (_body(model="m", prompt="x", logprobs=2), "'logprobs'"),
        (_body(model="m", prompt="x", presence_penalty=0.5), "'presence_penalty'"),
        (_body(model="m", prompt="x", stop=["a", "b", "c", "d", "e"]), "at most 4"),
        (_body(model="m", prompt="x", stream="yes"), "'stream'"),
        (_body(model="m", prompt=["a", "b"]), "'prompt'"),
    ],
)
def test_bad_completion_bodies_are_refused_by_name(body: bytes, words: str) -> None:
    with pytest.raises(BadInput, match=words.replace("(", r"\(")):
        parse_completion(body)


def test_bad_chat_bodies_are_refused_by_name() -> None:
    with pytest.raises(BadInput, match="'messages'"):
        parse_chat(_body(model="m", messages=[]))
    with pytest.raises(BadInput, match=r"'messages\.0\.role'"):
        parse_chat(_body(model="m", messages=[{"role": "robot", "content": "x"}]))
    with pytest.raises(BadInput, match="'tools'"):
        parse_chat(_body(model="m", messages=[{"role": "user", "content": "x"}], tools=[]))


def test_sample_takes_the_raw_prompt() -> None:
    req = parse_sample(b"E equals ", "demo-chat")
    assert req.prompt == "E equals " and req.temperature == 0.0 and req.max_tokens is None
    for bad in (b"", b"  \n", b"\xff\xfe"):
        with pytest.raises(BadInput):
            parse_sample(bad, "demo-chat")


def test_importing_the_llm_package_loads_neither_kserve_nor_torch() -> None:
    """Test collection imports every test module in one process: KServe's gRPC protos
    loaded there clash with tritonclient's in the tests that use both."""
    import subprocess
    import sys

    code = ("import sys, predictor.llm, capacity.llm; "
            "print(sorted(m for m in ('kserve', 'torch') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out == "[]"
