"""OpenAI's response shapes: completions, chat completions, their stream chunks, errors,
and the ASGI answer of an error in that shape (``send_openai_error``).

The fields are those of the ``openai`` client's own types (``openai.types.Completion``,
``ChatCompletion``, ``ChatCompletionChunk``), which the tests parse the answers with.
Errors take KServe's OpenAI error body (``kserve/protocol/rest/openai/errors.py``,
``create_error_response``): ``{"error": {"message", "type", "param", "code"}}`` with the
HTTP status as the code.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import orjson

from predictor._errors import PredictorError, status_for

Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]

ERROR_TYPES = {
    400: "BadRequestError",
    401: "AuthenticationError",
    404: "NotFoundError",
    408: "RequestTimeoutError",
    413: "BadRequestError",
    429: "RateLimitError",
    503: "ServiceUnavailableError",
}


def error_body(status: int, message: str) -> bytes:
    return orjson.dumps(
        {
            "error": {
                "message": message,
                "type": ERROR_TYPES.get(status, "InternalServerError"),
                "param": None,
                "code": str(status),
            }
        }
    )


def usage(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }


class Shape:
    """The answers of one request, whole or as stream chunks: ``chat`` or a completion."""

    def __init__(self, *, chat: bool, model: str, request_id: str) -> None:
        self.chat = chat
        self.model = model
        self.id = ("chatcmpl-" if chat else "cmpl-") + request_id
        self.created = int(time.time())

    def _head(self, obj: str) -> dict[str, Any]:
        return {"id": self.id, "object": obj, "created": self.created, "model": self.model}

    def whole(
        self, text: str, finish_reason: str, prompt_tokens: int, completion_tokens: int
    ) -> bytes:
        if self.chat:
            choice: dict[str, Any] = {
                "index": 0,
                "finish_reason": finish_reason,
                "logprobs": None,
                "message": {"role": "assistant", "content": text},
            }
            body = self._head("chat.completion")
        else:
            choice = {"index": 0, "finish_reason": finish_reason, "logprobs": None, "text": text}
            body = self._head("text_completion")
        body["choices"] = [choice]
        body["usage"] = usage(prompt_tokens, completion_tokens)
        return orjson.dumps(body)

    def chunk(self, text: str, finish_reason: str | None = None, *, first: bool = False) -> bytes:
        if self.chat:
            delta: dict[str, Any] = {"content": text}
            if first:
                delta["role"] = "assistant"
            choice: dict[str, Any] = {
                "index": 0,
                "delta": delta,
                "finish_reason": finish_reason,
                "logprobs": None,
            }
            body = self._head("chat.completion.chunk")
        else:
            choice = {"index": 0, "text": text, "finish_reason": finish_reason, "logprobs": None}
            body = self._head("text_completion")
        body["choices"] = [choice]
        return sse(body)

    def usage_chunk(self, prompt_tokens: int, completion_tokens: int) -> bytes:
        """The last chunk when ``stream_options.include_usage``: no choices, the usage."""
        body = self._head("chat.completion.chunk" if self.chat else "text_completion")
        body["choices"] = []
        body["usage"] = usage(prompt_tokens, completion_tokens)
        return sse(body)


def sse(body: dict[str, Any]) -> bytes:
    return b"data: " + orjson.dumps(body) + b"\n\n"


DONE = b"data: [DONE]\n\n"


def stream_error(status: int, message: str) -> bytes:
    """An error once the stream has begun: the status line is sent, so it is an event."""
    return b"data: " + error_body(status, message) + b"\n\n"


def models_body(model: str, created: int) -> dict[str, Any]:
    return {"id": model, "object": "model", "created": created, "owned_by": "modelctl"}


async def respond(send: Send, status: int, body: bytes, content_type: bytes,
                  headers: list[tuple[bytes, bytes]] | None = None) -> None:
    """One whole answer, with its length."""
    await send({"type": "http.response.start", "status": status, "headers": [
        (b"content-type", content_type), (b"content-length", str(len(body)).encode()),
        *(headers or [])]})
    await send({"type": "http.response.body", "body": body})


async def send_openai_error(send: Send, exc: PredictorError) -> int:
    """``exc`` answered in OpenAI's error shape, with the status (and headers, such as
    Retry-After) of the predictor's error table; returns the status."""
    status, extra = status_for(exc)
    headers = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in extra.items()]
    await respond(send, status, error_body(status, str(exc)), b"application/json", headers)
    return status
