"""The capture record of a generation (task ``llm``): ``/sample`` and OpenAI's routes.

Same columns as every capture (``_record``), filled for text in and text out:

- ``protocol``: ``sample``, ``openai-completions`` or ``openai-chat``;
- ``input``: canonical JSON of what decides the text: ``{"prompt": ...}`` for ``/sample``,
  the OpenAI body without ``stream`` and ``stream_options`` (how the text travels, not
  what it is), so a streamed and a whole request for the same thing hash the same;
- ``output``: ``[text]``, one item (``n`` is 1), the whole answer: a streamed answer is
  its chunks' text joined, the way the ``openai`` client joins ``delta.content``;
- a stream that began with 200 and then failed is recorded with the status its error
  event carries (``predictor/llm/_openai.py``, ``stream_error``) and its message, and a
  stream cut off before ``data: [DONE]`` (the client went away) with 499, nginx's "client
  closed request": in both the client did not get a whole answer.
"""

from __future__ import annotations

import json
from typing import Any

SAMPLE = "sample"
COMPLETIONS = "openai-completions"
CHAT = "openai-chat"
CLIENT_CLOSED = 499
# OpenAI body fields that change how the answer travels, not the text.
_TRANSPORT_FIELDS = ("stream", "stream_options")


def protocol_of(path: str) -> str:
    if path.endswith("/v1/chat/completions"):
        return CHAT
    if path.endswith("/v1/completions"):
        return COMPLETIONS
    return SAMPLE


def generation_input(protocol: str, body: bytes) -> Any:
    """The value whose canonical JSON is hashed (and kept with ``--capture_inputs``);
    None when the body is not a JSON object (the answer was then a 400)."""
    if protocol == SAMPLE:
        return {"prompt": body.decode("utf-8", "replace")}
    try:
        request = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(request, dict):
        return None
    return {k: v for k, v in request.items() if k not in _TRANSPORT_FIELDS}


def generation_output(protocol: str, status: int, response: bytes) -> tuple[int, Any, str | None]:
    """``(status, [text] or None, error or None)`` of an answered generation; the status is
    the HTTP one unless a stream failed after its 200 (see the module's docstring)."""
    if not 200 <= status < 300:
        return status, None, None  # the caller records the error body
    if protocol == SAMPLE:
        return status, [response.decode("utf-8", "replace")], None
    if response.startswith(b"data:"):
        return _stream(protocol, status, response)
    try:
        body = json.loads(response)
        choice = body["choices"][0]
        text = choice["message"]["content"] if protocol == CHAT else choice["text"]
    except (ValueError, UnicodeDecodeError, KeyError, IndexError, TypeError):
        return status, None, "response not captured (not an OpenAI completion body)"
    return status, [text if isinstance(text, str) else ""], None


def _stream(protocol: str, status: int, response: bytes) -> tuple[int, Any, str | None]:
    parts: list[str] = []
    for event in response.split(b"\n\n"):
        data = event.strip()
        if not data.startswith(b"data:"):
            continue
        data = data[len(b"data:"):].strip()
        if data == b"[DONE]":
            return status, ["".join(parts)], None
        try:
            chunk = json.loads(data)
        except (ValueError, UnicodeDecodeError):
            return status, None, "response not captured (an event is not JSON)"
        if not isinstance(chunk, dict):
            continue
        if isinstance(chunk.get("error"), dict):
            error = chunk["error"]
            code = str(error.get("code", ""))
            return (int(code) if code.isdigit() else 500), None, str(error.get("message", ""))
        for choice in chunk.get("choices") or []:
            text = (choice.get("delta") or {}).get("content") if protocol == CHAT \
                else choice.get("text")
            if isinstance(text, str):
                parts.append(text)
    return CLIENT_CLOSED, None, "stream cut off before data: [DONE] (the client went away)"
