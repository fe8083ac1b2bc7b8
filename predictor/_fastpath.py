"""KServe's V1 predict and V2 infer endpoints without FastAPI's routing, validation and
dependency machinery.

Profiling the predictor at 600-700 req/s (py-spy, docs/BENCHMARKS.md) put about two
thirds of its per-request CPU in FastAPI and Starlette: middleware layers, route
matching, dependency solving and response validation, around KServe's few lines of
endpoint code. ``FastPath`` runs those same lines straight from ASGI for the two
routes that carry the load, and answers byte for byte what KServe's route would have
answered (tests/predictor/test_fastpath.py sends every request of a matrix to both):

- ``POST /v1/models/<this model>:predict``: ``V1Endpoints.predict``
  (kserve/protocol/rest/v1_endpoints.py): ``DataPlane.decode``, the model's
  ``__call__``, ``DataPlane.encode``, KServe's ``ORJSONResponse``;
- ``POST /v2/models/<this model>/infer``: ``V2Endpoints.infer``
  (kserve/protocol/rest/v2_endpoints.py): the body validated as KServe's
  ``InferenceRequest`` (what FastAPI does for its ``request_body`` parameter),
  ``InferRequest.from_inference_request``, the model, ``DataPlane.encode``, and the
  response validated as ``InferenceResponse`` and rendered as FastAPI renders a
  returned model (``jsonable_encoder``, then the app's ``ORJSONResponse``, then the
  endpoint's ``raw_response`` headers appended).

Anything it is not sure of goes to KServe's app unchanged: other paths and models,
CloudEvents, a body that is not valid JSON or (V2) not a valid ``InferenceRequest``
(KServe's decoder and FastAPI's validation word those errors), V2's binary tensor
extension, and a model that is not ready (KServe's 503). ``--fast_path false`` turns
it off. It never reads the body from ``receive``: ``PredictorMiddleware`` in front has
read it (``request_body``), and a request it hands on still has it to read.
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
# ORJSONResponse's options (KServe's app's default response class).
_ORJSON_OPTIONS = orjson.OPT_NON_STR_KEYS | orjson.OPT_SERIALIZE_NUMPY
_BINARY_HEADER = "inference-header-content-length"


class FastPath:
    """ASGI: answers this model's V1 predict and V2 infer requests, hands everything
    else to ``app``."""

    def __init__(self, app: ASGIApp, *, model: Any, dataplane: Any,
                 exception_handlers: Mapping[Any, Any]) -> None:
        from kserve.protocol.infer_type import InferRequest
        from kserve.protocol.rest.v2_datamodels import InferenceRequest, InferenceResponse

        self.app = app
        self.model = model
        self.dataplane = dataplane
        self.exception_handlers = exception_handlers
        self.v1_path = f"/v1/models/{model.name}:predict"
        self.v2_path = f"/v2/models/{model.name}/infer"
        self._infer_request = InferRequest
        self._v2_request = InferenceRequest
        self._v2_response = InferenceResponse

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        body = request_body(scope)  # read by PredictorMiddleware; None without it in front
        path = scope.get("path")
        if (scope["type"] != "http" or scope.get("method") != "POST" or body is None
                or path not in (self.v1_path, self.v2_path) or not self.model.ready):
            await self.app(scope, receive, send)
            return
        if path == self.v1_path:
            await self._v1(scope, receive, send, body)
        else:
            await self._v2(scope, receive, send, body)

    async def _v1(self, scope: Scope, receive: Receive, send: Send, body: bytes) -> None:
        # Starlette's dict(request.headers.items()): names as sent (uvicorn lowercases),
        # the last of a repeated one wins.
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
            await self._error(scope, receive, send, exc)
            return
        response_headers.update(encode_headers)
        response_headers.pop("content-length", None)
        await _send_v1(send, response, response_headers)

    async def _v2(self, scope: Scope, receive: Receive, send: Send, body: bytes) -> None:
        # dict(raw_request.headers): dict() of a Mapping looks each name up, and
        # Starlette's Headers.__getitem__ returns the first of a repeated one.
        headers: dict[str, str] = {}
        for k, v in scope["headers"]:
            headers.setdefault(k.decode("latin-1"), v.decode("latin-1"))
        request = self._v2_validated(headers, body)
        if request is None:
            await self.app(scope, receive, send)
            return
        try:
            infer_request = self._infer_request.from_inference_request(request,
                                                                        self.model.name)
            response, response_headers = await self.model(infer_request, headers=headers)
            response, encode_headers = self.dataplane.encode(
                model_name=self.model.name, response=response, headers=headers,
                req_attributes={})
            # FastAPI's jsonable_encoder of a model is its model_dump(mode="json",
            # by_alias=True) with every field, None ones included.
            content = response if isinstance(response, bytes) else \
                self._v2_response.model_validate(response).model_dump(mode="json",
                                                                       by_alias=True)
        except Exception as exc:
            await self._error(scope, receive, send, exc)
            return
        response_headers.update(encode_headers)
        response_headers.pop("content-length", None)
        response_headers.pop("content-type", None)
        if isinstance(content, bytes):
            await _send_raw(send, content, response_headers)
        else:
            await _send_v2(send, content, response_headers)

    def _v2_validated(self, headers: Mapping[str, str], body: bytes) -> Any:
        """The body as FastAPI hands KServe's V2 endpoint its ``InferenceRequest``, or
        None when only KServe should answer: the binary extension, a binary CloudEvent
        (KServe would answer one), or a body that is not a valid request."""
        if _BINARY_HEADER in headers or has_binary_headers(headers):
            return None
        try:
            return self._v2_request.model_validate(orjson.loads(body))
        except Exception:  # orjson's or pydantic's: FastAPI words the 400
            return None

    async def _error(self, scope: Scope, receive: Receive, send: Send,
                     exc: Exception) -> None:
        handler, cls = self._handler_for(exc)
        if handler is None:
            raise exc
        await (await handler(None, exc))(scope, receive, send)
        if cls is Exception:
            # Starlette's ServerErrorMiddleware answers with the catch-all handler and
            # then re-raises, so the server logs the traceback: so do we.
            raise exc

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


def _raw(headers: Mapping[str, str]) -> list[tuple[bytes, bytes]]:
    return [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers.items()]


async def _send_v1(send: Send, content: Any, headers: Mapping[str, str]) -> None:
    """What KServe's V1 endpoint returns, rendered as Starlette renders it: the
    response's own headers first, then the length and type Starlette adds."""
    if isinstance(content, bytes | str):  # KServe's plain Response
        body = content.encode() if isinstance(content, str) else content
        media_type = None
    else:  # KServe's ORJSONResponse
        body = orjson.dumps(content, option=_ORJSON_OPTIONS)
        media_type = b"application/json"
    raw = _raw(headers)
    names = {name for name, _ in raw}
    if b"content-length" not in names:
        raw.append((b"content-length", str(len(body)).encode("latin-1")))
    if media_type is not None and b"content-type" not in names:
        raw.append((b"content-type", media_type))
    await send({"type": "http.response.start", "status": 200, "headers": raw})
    await send({"type": "http.response.body", "body": body})


async def _send_v2(send: Send, content: Any, headers: Mapping[str, str]) -> None:
    """FastAPI's rendering of a model the V2 endpoint returned: ``ORJSONResponse(content)``
    (its length and type first), then the ``raw_response`` headers appended."""
    body = orjson.dumps(content, option=_ORJSON_OPTIONS)
    raw = [(b"content-length", str(len(body)).encode("latin-1")),
           (b"content-type", b"application/json"), *_raw(headers)]
    await send({"type": "http.response.start", "status": 200, "headers": raw})
    await send({"type": "http.response.body", "body": body})


async def _send_raw(send: Send, body: bytes, headers: Mapping[str, str]) -> None:
    """The V2 endpoint's binary answer: FastAPI's ``raw_response``, whose content-length
    FastAPI deleted, with the headers set and the bytes as its body (no length: the
    server frames it)."""
    await send({"type": "http.response.start", "status": 200, "headers": _raw(headers)})
    await send({"type": "http.response.body", "body": body})
