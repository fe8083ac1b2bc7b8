"""The token stream's codec and the rule that passes on one attempt's pieces, never two."""

from __future__ import annotations

import asyncio

import pytest

from common.tenants import Tenant
from predictor._config import ServerConfig
from predictor._errors import BadInput, DeadLettered, Forbidden
from predictor.llm._model import Piece
from predictor.llm._params import parse_chat, parse_completion, parse_sample
from predictor.llm.queue import Arrived, Follower, QueuedLLM, Spliced, decode_arrived
from predictor.llm.queue._tokens import error_fields, piece_fields, request_item, request_of
from predictor.queue._codec import error_record
from predictor.tenants import CURRENT


def _bytes(fields: dict[str, object]) -> dict[bytes, bytes]:
    """As redis-py returns them."""
    return {k.encode(): v if isinstance(v, bytes) else str(v).encode() for k, v in fields.items()}


def _piece(attempt: str, text: str, finish: str | None = None) -> Arrived:
    return Arrived(attempt, Piece(text, finish), None)


def test_a_request_travels_as_json_and_comes_back_equal() -> None:
    chat = parse_chat(b'{"model": "m", "messages": [{"role": "user", "content": "hi"}],'
                      b' "stop": ["x"], "max_tokens": 5, "stream": true}')
    plain = parse_completion(b'{"model": "m", "prompt": "E equals ", "seed": 3}')
    for request in (chat, plain, parse_sample(b"E equals ", "m")):
        assert request_of(request_item(request)) == request
    with pytest.raises(ValueError):
        request_of({"model": "m", "nonsense": 1})
    with pytest.raises(ValueError):
        request_of(["not", "an", "object"])


def test_pieces_and_errors_decode_from_redis_fields() -> None:
    got = decode_arrived(_bytes(piece_fields("a1", Piece("Paris", "stop", 12, 7))))
    assert got == Arrived("a1", Piece("Paris", "stop", 12, 7), None)
    assert decode_arrived(_bytes(piece_fields("a1", Piece("Par")))).piece == Piece("Par")
    bad = decode_arrived(_bytes(error_fields("a2", error_record("r", BadInput("too long")))))
    assert isinstance(bad.error, BadInput) and str(bad.error) == "too long"
    dead = decode_arrived(_bytes(error_fields("a3", error_record("r", DeadLettered("gone")))))
    assert isinstance(dead.error, DeadLettered)


def test_a_stream_passes_pieces_on_as_they_come() -> None:
    f = Follower(buffered=False)
    assert f.take(_piece("a", "The ")) == [Piece("The ")]
    assert f.take(_piece("a", "end", "stop")) == [Piece("end", "stop")]


def test_a_whole_answer_is_held_to_its_last_piece() -> None:
    f = Follower(buffered=True)
    assert f.take(_piece("a", "The ")) == []
    assert (f.seen, f.released) == (1, 0)  # generating: the first-token deadline is met
    assert f.take(_piece("a", "end", "stop")) == [Piece("The "), Piece("end", "stop")]


def test_a_whole_answer_switches_to_a_new_attempt_silently() -> None:
    f = Follower(buffered=True)
    f.take(_piece("a", "The "))  # the first worker dies here
    assert f.take(_piece("b", "The ")) == []
    assert f.take(_piece("a", "late")) == []  # a straggler of the attempt given up
    assert f.take(_piece("b", "end", "stop")) == [Piece("The "), Piece("end", "stop")]


def test_a_stream_switches_silently_only_before_it_sent_anything() -> None:
    f = Follower(buffered=False)
    with pytest.raises(BadInput):  # an attempt's error ends the answer
        f.take(Arrived("a", None, BadInput("too long")))
    g = Follower(buffered=False)
    g.take(_piece("a", "The "))
    with pytest.raises(Spliced, match="started it again"):
        g.take(_piece("b", "The "))


def test_a_queue_frontend_refuses_a_tenant_whose_adapter_it_cannot_serve() -> None:
    """The workers run the base model only: a tenant with an adapter gets 403, never the
    base model's answer in place of its own weights (and nothing is enqueued)."""
    config = ServerConfig(model_name="demo-chat", queue_url="redis://127.0.0.1:1/0",
                          queue_role="frontend")
    frontend = QueuedLLM(config, "1")

    async def ask() -> None:
        CURRENT.set(Tenant("acme", adapter="demo-chat-acme"))
        async for _ in frontend.generate(parse_sample(b"hi", "demo-chat"), timeout_ms=1000):
            pass

    with pytest.raises(Forbidden, match="not served in queue mode"):
        asyncio.run(ask())
    assert frontend._client is None  # refused before Redis was even dialled
