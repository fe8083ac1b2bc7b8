"""KServe's V1 predict endpoint without FastAPI's routing and dependency machinery.

Profiling the predictor at 600-700 req/s (py-spy, docs/BENCHMARKS.md) put about two
thirds of its per-request CPU in FastAPI and Starlette: middleware layers, route
matching, dependency solving and response validation, around KServe's few lines of
endpoint code. ``V1FastPath`` runs those same lines (``DataPlane.decode``, the
model's ``__call__``, ``DataPlane.encode``, KServe's response class and KServe's
exception handlers) straight from ASGI for the one route that carries the load,
``POST /v1/models/<this model>:predict``, and answers byte for byte what KServe's
route would have answered (tests/predictor/test_fastpath.py compares both).

Anything it is not sure of goes to KServe's app unchanged: other paths and models,
CloudEvents, a body that is not valid JSON (KServe's own decoder words that error),
and a model that is not ready (KServe's 503). ``--fast_path false`` turns it off.
It never reads the body from ``receive``: ``PredictorMiddleware`` in front has read
it (``request_body``), and a request it hands on still has it to read.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson
from cloudevents.sdk.converters.util import has_binary_headers  # as KServe decides

from predictor._http import ASGIApp, Receive, Scope, Send, request_body

# What KServe's DataPlane.decode parses as JSON.
_JSON_TYPES = frozenset({"application/json", "application/cloudevents+json",
                         "application/ld+json", "application/octet-stream"})
# ORJSONResponse's options (KServe's V1 response class).
_ORJSON_OPTIONS = orjson.OPT_NON_STR_KEYS | orjson.OPT_SERIALIZE_NUMPY


class V1FastPath:
    """ASGI: answers this model's V1 predict requests, hands everything else to ``app``."""

    def __init__(self, app: ASGIApp, *, model: Any, dataplane: Any,
                 exception_handlers: Mapping[Any, Any]) -> None:
        self.app = app
        self.model = model
        self.dataplane = dataplane
        self.exception_handlers = exception_handlers
        self.path = f"/v1/models/{model.name}:predict"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        body = request_body(scope)  # read by PredictorMiddleware; None without it in front
        if (scope["type"] != "http" or scope.get("method") != "POST" or body is None
                or scope.get("path") != self.path or not self.model.ready):
            await self.app(scope, receive, send)
            return
        # Starlette's Request.headers: names as sent (uvicorn lowercases), the last wins.
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        request = self._decoded(headers, body)
        if request is None:  # KServe's app reads the body from receive, still unread
            await self.app(scope, receive, send)
            return
        try:
            request, attributes = self.dataplane.decode_cloudevent(request)
            response, response_headers = await self.model(request, headers=headers)
            response, encode_headers = self.dataplane.encode(
                model_name=self.model.name, response=response, headers=headers,
                req_attributes=attributes)
        except Exception as exc:
            handler, cls = self._handler_for(exc)
            if handler is None:
                raise
            await (await handler(None, exc))(scope, receive, send)
            if cls is Exception:
                # Starlette's ServerErrorMiddleware answers with the catch-all handler and
                # then re-raises, so the server logs the traceback: so do we.
                raise
            return
        response_headers.update(encode_headers)
        response_headers.pop("content-length", None)
        await _send_response(send, response, response_headers)

    @staticmethod
    def _decoded(headers: Mapping[str, str], body: bytes) -> Any:
        """The body as KServe's ``DataPlane.decode`` would hand it on, or None when only
        KServe should answer (binary or JSON CloudEvents, a body that is not JSON)."""
        content_type = headers.get("content-type")
        if content_type == "application/cloudevents+json" or has_binary_headers(headers):
            return None
        if content_type is not None and content_type not in _JSON_TYPES:
            return body  # KServe hands the model the raw bytes
        try:
            return orjson.loads(body)
        except orjson.JSONDecodeError:
            return None  # KServe's decoder words this error

    def _handler_for(self, exc: Exception) -> tuple[Any, type | None]:
        """The app's exception handler for ``exc`` and the class it is registered for,
        looked up the way Starlette does (the nearest class in the MRO)."""
        for cls in type(exc).__mro__:
            if cls in self.exception_handlers:
                return self.exception_handlers[cls], cls
        return None, None


async def _send_response(send: Send, content: Any, headers: Mapping[str, str]) -> None:
    """What KServe's endpoint returns, rendered as Starlette renders it."""
    if isinstance(content, bytes | str):  # KServe's plain Response
        body = content.encode() if isinstance(content, str) else content
        media_type = None
    else:  # KServe's ORJSONResponse
        body = orjson.dumps(content, option=_ORJSON_OPTIONS)
        media_type = b"application/json"
    raw = [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers.items()]
    names = {name for name, _ in raw}
    if b"content-length" not in names:
        raw.append((b"content-length", str(len(body)).encode("latin-1")))
    if media_type is not None and b"content-type" not in names:
        raw.append((b"content-type", media_type))
    await send({"type": "http.response.start", "status": 200, "headers": raw})
    await send({"type": "http.response.body", "body": body})
