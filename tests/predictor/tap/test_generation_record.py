"""Capture records of generations (task llm): the answers are built by the server's own
shapes (``predictor.llm._openai``), so the record reads what the routes really send."""

from __future__ import annotations

import json

import orjson

from predictor.llm._openai import DONE, Shape, error_body, stream_error
from predictor.tap import Exchange, Identity, build_record

IDENTITY = Identity(model="demo-chat", version="2", role="stable", task="llm")
CHAT = "/openai/v1/chat/completions"
COMPLETIONS = "/openai/v1/completions"


def _exchange(path: str, body: bytes, response: bytes, status: int = 200,
              request_id: str = "r1") -> Exchange:
    return Exchange(request_id=request_id, started_at=1.7e9, path=path, query="",
                    headers=(("content-type", "application/json"),), body=body,
                    status=status, response=response, latency_s=0.5, is_shadow=False)


def _chat_body(stream: bool) -> bytes:
    return orjson.dumps({"model": "demo-chat", "stream": stream, "max_tokens": 8,
                         "stream_options": {"include_usage": True} if stream else None,
                         "messages": [{"role": "user", "content": "Capital of France?"}]})


def _streamed(shape: Shape, pieces: list[str], end: bytes = DONE) -> bytes:
    chunks = [shape.chunk(text, None, first=i == 0) for i, text in enumerate(pieces)]
    return b"".join([*chunks, shape.chunk("", "length"), shape.usage_chunk(5, 3), end])


def test_a_streamed_and_a_whole_chat_answer_record_the_same_input_and_text() -> None:
    shape = Shape(chat=True, model="demo-chat", request_id="r1")
    whole = build_record(_exchange(CHAT, _chat_body(False),
                                   shape.whole("The capital is Paris.", "stop", 5, 3)),
                         IDENTITY, with_input=True)
    streamed = build_record(_exchange(CHAT, _chat_body(True),
                                      _streamed(shape, ["The capital", " is", " Paris."])),
                            IDENTITY, with_input=True)
    for record in (whole, streamed):
        assert record["protocol"] == "openai-chat" and record["task"] == "llm"
        assert record["status"] == 200 and record["items"] == 1 and record["error"] is None
        assert json.loads(record["output"]) == ["The capital is Paris."]
    assert whole["input_hash"] == streamed["input_hash"]
    assert json.loads(whole["input"])["messages"][0]["content"] == "Capital of France?"
    assert "stream" not in json.loads(whole["input"])


def test_a_streamed_completion_joins_its_text_chunks() -> None:
    shape = Shape(chat=False, model="demo-chat", request_id="r2")
    body = orjson.dumps({"model": "demo-chat", "prompt": "E equals ", "stream": True})
    record = build_record(_exchange(COMPLETIONS, body, _streamed(shape, ["m", "c", "^2"])),
                          IDENTITY, with_input=False)
    assert record["protocol"] == "openai-completions"
    assert json.loads(record["output"]) == ["mc^2"] and record["input"] is None


def test_sample_records_the_raw_prompt_and_completion() -> None:
    record = build_record(_exchange("/sample", b"E equals ", b"mc squared"), IDENTITY,
                          with_input=True)
    assert record["protocol"] == "sample"
    assert json.loads(record["input"]) == {"prompt": "E equals "}
    assert json.loads(record["output"]) == ["mc squared"]


def test_a_stream_that_fails_after_its_200_is_recorded_with_the_event_status() -> None:
    shape = Shape(chat=True, model="demo-chat", request_id="r3")
    failed = shape.chunk("The", None, first=True) + stream_error(503, "draining") + DONE
    record = build_record(_exchange(CHAT, _chat_body(True), failed), IDENTITY, with_input=False)
    assert (record["status"], record["output"], record["error"]) == (503, None, "draining")


def test_a_stream_cut_off_before_done_is_not_a_whole_answer() -> None:
    shape = Shape(chat=True, model="demo-chat", request_id="r4")
    cut = shape.chunk("The", None, first=True) + shape.chunk(" capital")
    record = build_record(_exchange(CHAT, _chat_body(True), cut), IDENTITY, with_input=False)
    assert record["status"] == 499 and record["output"] is None
    assert "[DONE]" in record["error"]


def test_an_openai_error_is_recorded_by_its_message() -> None:
    record = build_record(
        _exchange(CHAT, b'{"model": "demo-chat", "messages": 3}',
                  error_body(400, "field 'messages': Input should be a valid list"), status=400),
        IDENTITY, with_input=True)
    assert record["status"] == 400 and record["output"] is None and record["items"] is None
    assert record["error"] == "field 'messages': Input should be a valid list"


def test_a_body_that_is_not_json_is_hashed_as_sent() -> None:
    record = build_record(_exchange(CHAT, b"{not json", error_body(400, "bad json"), status=400),
                          IDENTITY, with_input=True)
    assert record["input"] is None and len(record["input_hash"]) == 64
