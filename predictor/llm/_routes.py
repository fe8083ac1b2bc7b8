"""The LLM's HTTP routes, in front of KServe's app (health, metadata and /metrics stay KServe's).

- ``POST /sample`` (seed 1): the body is the raw prompt; the answer is the raw
  completion as ``text/plain``, held open until it is ready or the deadline passes.
- OpenAI's, where KServe serves them (``kserve/protocol/rest/openai/endpoints.py``,
  ``register_openai_endpoints``): ``POST {prefix}/v1/completions``, ``POST
  {prefix}/v1/chat/completions``, ``GET {prefix}/v1/models`` and ``GET
  {prefix}/v1/models/{name}``, the prefix ``KSERVE_OPENAI_ROUTE_PREFIX`` (default
  ``/openai``, a leading ``/`` added as KServe adds it). KServe 0.21 builds those routes
  on vLLM's protocol classes (``kserve/protocol/rest/openai/types``): without vLLM, as
  on a CPU image, its server logs "OpenAI endpoints not registered" and has none, so
  they are ours, on the same paths, with the same error body.
  ``stream: true`` answers server-sent events ending ``data: [DONE]``.

A client that disconnects, mid-stream or while it waits for a whole answer, cancels its
sequence (the engine frees its cache): the generation runs in a task that a watcher of
``http.disconnect`` cancels.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable
from typing import Any

import orjson

from predictor._errors import ModelUnknown, PredictorError, status_for
from predictor._http import _BODY, ASGIApp, Receive, Scope, Send, request_timeout_ms, send_error
from predictor.llm._model import Generating, Piece
from predictor.llm._openai import (
    DONE,
    Shape,
    error_body,
    models_body,
    respond,
    send_openai_error,
    stream_error,
)
from predictor.llm._params import GenerationRequest, parse_chat, parse_completion, parse_sample
from predictor.tenants import note_tokens

SAMPLE_PATH = "/sample"


def openai_prefix(env: dict[str, str] | None = None) -> str:
    """KServe's ``OPENAI_ROUTE_PREFIX``: ``KSERVE_OPENAI_ROUTE_PREFIX``, default ``/openai``."""
    prefix = (os.environ if env is None else env).get("KSERVE_OPENAI_ROUTE_PREFIX", "/openai")
    if prefix and not prefix.startswith("/"):
        prefix = f"/{prefix}"
    return prefix.rstrip("/")


def generation_paths(prefix: str) -> re.Pattern[str]:
    """The routes that generate: counted and timed as predict routes are."""
    return re.compile(rf"^({re.escape(SAMPLE_PATH)}|{re.escape(prefix)}/v1/(chat/)?completions)$")


class LLMRoutes:
    """``/sample`` and the OpenAI routes for one model; anything else goes to ``app``."""

    def __init__(self, app: ASGIApp, model: Generating, prefix: str | None = None) -> None:
        self.app = app
        self.model = model
        self.prefix = openai_prefix() if prefix is None else prefix
        self.created = int(time.time())
        self._completions = f"{self.prefix}/v1/completions"
        self._chat = f"{self.prefix}/v1/chat/completions"
        self._models = f"{self.prefix}/v1/models"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path, method = scope["path"], scope["method"]
        if path in (SAMPLE_PATH, self._completions, self._chat):
            allowed = "POST"
        elif path == self._models or path.startswith(self._models + "/"):
            allowed = "GET"
        else:
            await self.app(scope, receive, send)
            return
        if method != allowed:
            message = f"use {allowed} on this route"
            body = orjson.dumps({"error": message}) if path == SAMPLE_PATH else error_body(
                405, message)
            await respond(send, 405, body, b"application/json", [(b"allow", allowed.encode())])
        elif path == SAMPLE_PATH:
            await self._sample(scope, receive, send)
        elif allowed == "POST":
            await self._openai(scope, receive, send, chat=path == self._chat)
        else:
            await self._list(path, send)

    # -- /sample -----------------------------------------------------------------------------
    async def _sample(self, scope: Scope, receive: Receive, send: Send) -> None:
        arrived = time.monotonic()
        try:
            request = parse_sample(scope.get(_BODY, b""), self.model.name)
            timeout = request_timeout_ms(_headers(scope), self.model.config.request_timeout_ms)
            pieces = await _until_disconnect(
                receive, _collect(_counted(self.model.generate(request, timeout_ms=timeout,
                                                               arrived=arrived)))
            )
        except PredictorError as exc:
            await send_error(send, exc)
            return
        if pieces is None:
            return  # the client went away; its sequence is cancelled
        await respond(
            send, 200, "".join(p.text for p in pieces).encode(), b"text/plain; charset=utf-8"
        )

    # -- OpenAI --------------------------------------------------------------------------------
    async def _openai(self, scope: Scope, receive: Receive, send: Send, *, chat: bool) -> None:
        arrived = time.monotonic()
        headers = _headers(scope)
        try:
            body = scope.get(_BODY, b"")
            request = parse_chat(body) if chat else parse_completion(body)
            if request.model != self.model.name:
                raise ModelUnknown(
                    f"model {request.model!r} is not served here: this server "
                    f"serves {self.model.name!r}"
                )
            timeout = request_timeout_ms(headers, self.model.config.request_timeout_ms)
        except PredictorError as exc:
            await send_openai_error(send, exc)
            return
        shape = Shape(chat=chat, model=self.model.name, request_id=headers.get("x-request-id", ""))
        pieces = _counted(self.model.generate(request, timeout_ms=timeout, arrived=arrived))
        if request.stream:
            await _stream(receive, send, shape, request, pieces)
            return
        try:
            whole = await _until_disconnect(receive, _collect(pieces))
        except PredictorError as exc:
            await send_openai_error(send, exc)
            return
        if whole is not None:
            last = whole[-1]
            await respond(
                send,
                200,
                shape.whole(
                    "".join(p.text for p in whole),
                    last.finish_reason or "stop",
                    last.prompt_tokens,
                    last.completion_tokens,
                ),
                b"application/json",
            )

    async def _list(self, path: str, send: Send) -> None:
        card = models_body(self.model.name, self.created)
        if path == self._models:
            await respond(
                send, 200, orjson.dumps({"object": "list", "data": [card]}), b"application/json"
            )
            return
        asked = path[len(self._models) + 1 :]
        if asked != self.model.name:
            await send_openai_error(send, ModelUnknown(f"model {asked!r} is not served here"))
            return
        await respond(send, 200, orjson.dumps(card), b"application/json")


async def _stream(
    receive: Receive,
    send: Send,
    shape: Shape,
    request: GenerationRequest,
    pieces: AsyncGenerator[Piece, None],
) -> None:
    """Server-sent events: the status line waits for the first token, so that a refusal
    (429, 400 for a prompt too long) is still an HTTP status; later errors are an event."""
    try:
        first = await _until_disconnect(receive, anext(pieces))
    except StopAsyncIteration:
        first = Piece("", "stop")
    except PredictorError as exc:
        await send_openai_error(send, exc)
        return
    if first is None:
        return

    async def events() -> None:
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [
                    (b"content-type", b"text/event-stream"),
                    (b"cache-control", b"no-cache"),
                ],
            }
        )
        piece: Piece | None = first
        is_first = True

        async def body(data: bytes) -> None:
            await send({"type": "http.response.body", "body": data, "more_body": True})

        while piece is not None:
            if piece.text or is_first:
                await body(shape.chunk(piece.text, None, first=is_first))
                is_first = False
            if piece.finish_reason is not None:
                await body(shape.chunk("", piece.finish_reason))
                if request.include_usage:
                    await body(shape.usage_chunk(piece.prompt_tokens, piece.completion_tokens))
                break
            try:
                piece = await anext(pieces)
            except StopAsyncIteration:
                piece = None
            except PredictorError as exc:
                status, _ = status_for(exc)
                await body(stream_error(status, str(exc)))
                break
        await send({"type": "http.response.body", "body": DONE, "more_body": False})

    try:
        await _until_disconnect(receive, events())
    finally:
        await pieces.aclose()  # a client gone mid-stream: the sequence is cancelled


async def _counted(pieces: AsyncGenerator[Piece, None]) -> AsyncGenerator[Piece, None]:
    """``pieces``, telling the tenant check how many tokens the generation has made: the
    last piece's count, or until then the pieces so far (each holds at least one)."""
    seen = 0
    try:
        async for piece in pieces:
            seen += 1
            note_tokens(max(seen, piece.completion_tokens))
            yield piece
    finally:
        await pieces.aclose()  # a client gone: the sequence is cancelled


async def _collect(pieces: AsyncIterator[Piece]) -> list[Piece]:
    out = [piece async for piece in pieces]
    return out or [Piece("", "stop")]


async def _until_disconnect(receive: Receive, work: Awaitable[Any]) -> Any:
    """``work``'s result, or None when the client disconnects first (``work`` is cancelled)."""
    task = asyncio.ensure_future(work)
    watcher = asyncio.ensure_future(_disconnected(receive))
    try:
        done, _ = await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        watcher.cancel()
    if task in done:
        return task.result()
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError, PredictorError):
        await task
    return None


async def _disconnected(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


def _headers(scope: Scope) -> dict[str, str]:
    return {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
