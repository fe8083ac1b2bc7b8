"""What an LLM request and its answer are in Redis. Pure.

The request is an ordinary queue ``Entry`` (``predictor.queue._codec``) whose one item is
the checked ``GenerationRequest`` as JSON. The answer is a Redis stream of its own per
request (``QueueKeys.tokens``), one entry per piece of text the worker released, each
marked with the *attempt* that made it: a delivery of the request to a worker. A worker
that dies mid-generation leaves its pieces there; the worker that claims the request
starts again from the first token under a new attempt, and the frontend never splices
the two (``Follower``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from predictor._errors import PredictorError
from predictor.llm._model import Piece
from predictor.llm._params import GenerationRequest
from predictor.queue._codec import decode_record, error_of


def request_item(request: GenerationRequest) -> dict[str, Any]:
    """The request as the JSON item of a queue entry."""
    return dataclasses.asdict(request)


def request_of(item: Any) -> GenerationRequest:
    """The request a frontend checked, back from its JSON item; ValueError if it is not one."""
    if not isinstance(item, dict):
        raise ValueError("an LLM queue item must be an object")
    fields = dict(item)
    try:
        if fields.get("messages") is not None:
            fields["messages"] = tuple(dict(m) for m in fields["messages"])
        fields["stop"] = tuple(fields.get("stop") or ())
        return GenerationRequest(**fields)
    except TypeError as exc:
        raise ValueError(f"not an LLM request: {exc}") from None


def piece_fields(attempt: str, piece: Piece) -> dict[str, str]:
    """The XADD fields of one released piece."""
    return {"attempt": attempt, "text": piece.text, "finish": piece.finish_reason or "",
            "prompt_tokens": str(piece.prompt_tokens),
            "completion_tokens": str(piece.completion_tokens)}


def error_fields(attempt: str, error: bytes) -> dict[str, str | bytes]:
    """The XADD fields of the error that ended an attempt (``error_record``'s bytes)."""
    return {"attempt": attempt, "error": error}


@dataclass(frozen=True)
class Arrived:
    """One entry of a token stream, decoded: a piece, or the error that ended its attempt."""

    attempt: str
    piece: Piece | None
    error: PredictorError | None


def decode_arrived(fields: Mapping[bytes | str, bytes | str]) -> Arrived:
    f = {(k.decode() if isinstance(k, bytes) else k):
         (v.decode() if isinstance(v, bytes) else v) for k, v in fields.items()}
    attempt = f.get("attempt", "")
    if "error" in f:
        record = decode_record(f["error"])
        return Arrived(attempt, None, error_of(record.get("error") or {}))
    return Arrived(attempt, Piece(f.get("text", ""), f.get("finish") or None,
                                  int(f.get("prompt_tokens") or 0),
                                  int(f.get("completion_tokens") or 0)), None)


class Spliced(PredictorError):
    """The worker that streamed part of an answer stopped; another began it again."""


class Follower:
    """Which pieces of a token stream a frontend passes on: one attempt's, never two.

    It follows the first attempt it sees, and a newer one when it appears (a claim: the
    older worker stopped answering). A switch before anything reached the client is
    silent; after, the answer cannot be mended and the stream ends in ``Spliced``.
    A whole answer (``buffered``) reaches the client only at its last piece, so a switch
    is always silent there.
    """

    def __init__(self, *, buffered: bool) -> None:
        self.buffered = buffered
        self.attempt: str | None = None
        self._left: set[str] = set()
        self._held: list[Piece] = []
        self.seen = 0  # pieces taken from any attempt: the first one ends the TTFT deadline
        self.released = 0

    def take(self, arrived: Arrived) -> list[Piece]:
        """The pieces to pass on now; raises the attempt's error, or ``Spliced``."""
        if arrived.attempt in self._left:
            return []  # a straggler of an attempt given up
        if arrived.attempt != self.attempt:
            if self.attempt is not None:
                if self.released:
                    raise Spliced(
                        f"the worker generating this answer stopped after sending part of "
                        f"it ({self.released} pieces); another worker started it again, "
                        "which cannot continue the same text: send the request again")
                self._left.add(self.attempt)
                self._held = []
            self.attempt = arrived.attempt
        if arrived.error is not None:
            raise arrived.error
        assert arrived.piece is not None
        self.seen += 1
        if self.buffered and arrived.piece.finish_reason is None:
            self._held.append(arrived.piece)
            return []
        out, self._held = [*self._held, arrived.piece], []
        self.released += len(out)
        return out
