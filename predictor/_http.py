"""The HTTP edge: request IDs, the request body, per-request metrics, error mapping.

A pure ASGI middleware in front of KServe's FastAPI app. It sees every response,
including the ones KServe produces itself (404 unknown model, 400 bad JSON), so
the request counter is complete. It is the one layer that reads a request body,
once, within ``--max_body_bytes`` and the request timeout: the layers inside it
(the tap, the V1 fast path) take those bytes from the scope (``request_body``), and
KServe's app reads them from a ``receive`` that replays them. ``header`` is the one
lookup of a request header in a scope. Errors become status codes through the table
in ``_errors``.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import math
import re
import time
import uuid
from collections.abc import Awaitable, Callable, MutableMapping
from typing import TYPE_CHECKING, Any

from predictor._errors import BadInput, BodyTooLarge, BodyTooSlow, PredictorError, status_for

if TYPE_CHECKING:
    from predictor._metrics import PredictorMetrics
    from predictor._requestlog import RequestLog

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

PREDICT_PATH = re.compile(r"^/(v1/models/[^/]+:predict|v2/models/[^/]+(/versions/[^/]+)?/infer)$")
BODY_METHODS = {"POST", "PUT", "PATCH"}
# Where PredictorMiddleware leaves the body it read, for the layers inside it.
_BODY = "modelctl.body"


def header(scope: Scope, name: bytes) -> bytes | None:
    """The first value of the request header ``name`` (lower case), or None."""
    for key, value in scope.get("headers", []):
        if key.lower() == name:
            return bytes(value)
    return None


def _with_header(scope: Scope, name: bytes, value: bytes) -> Scope:
    """A copy of ``scope`` whose header ``name`` (lower case) is ``value`` alone."""
    headers = [(k, v) for k, v in scope["headers"] if k.lower() != name]
    return {**scope, "headers": [*headers, (name, value)]}


def request_body(scope: Scope) -> bytes | None:
    """The body PredictorMiddleware read for this request, or None if it read none
    (not a POST, PUT or PATCH, or no PredictorMiddleware in front)."""
    body: bytes | None = scope.get(_BODY)
    return body


async def _send_json(send: Send, status: int, body: dict[str, Any],
                     headers: list[tuple[bytes, bytes]]) -> None:
    payload = json.dumps(body).encode()
    await send({
        "type": "http.response.start",
        "status": status,
        "headers": [(b"content-type", b"application/json"),
                    (b"content-length", str(len(payload)).encode()), *headers],
    })
    await send({"type": "http.response.body", "body": payload})


def _is_v2_json_without_content_type(scope: Scope) -> bool:
    """A V2 body with no binary part is JSON whatever its content-type says.

    Clients such as tritonclient send JSON bodies without ``content-type:
    application/json``; FastAPI would then hand KServe raw bytes, which it rejects
    unless the binary-extension header is present.
    """
    path = scope.get("path", "")
    if not path.endswith("/infer") or header(scope, b"inference-header-content-length"):
        return False
    content_type = (header(scope, b"content-type") or b"").split(b";")[0].strip().lower()
    return content_type != b"application/json"


class RequestIds:
    """Unique request IDs without a urandom call per request (uuid4 showed in profiles):
    a random 64-bit prefix per process and a counter, 32 hex digits like a uuid4."""

    def __init__(self) -> None:
        self._prefix = uuid.uuid4().hex[:16]
        self._counter = itertools.count()

    def next(self) -> str:
        return f"{self._prefix}{next(self._counter):016x}"


def model_of_path(path: str) -> str:
    """The model a predict path names (``/v1/models/NAME:predict``, ``/v2/models/NAME/...``)."""
    rest = path.split("/models/", 1)[-1]
    return rest.split("/", 1)[0].removesuffix(":predict")


def request_timeout_ms(headers: dict[str, str], timeout_ms: float) -> float:
    """The request's timeout: x-request-timeout-ms, bounded by the server's timeout."""
    raw = headers.get("x-request-timeout-ms")
    limit_ms = timeout_ms
    if raw is not None:
        try:
            asked = float(raw)
        except ValueError:
            raise BadInput(f"x-request-timeout-ms must be a number, got {raw!r}") from None
        if not math.isfinite(asked) or asked <= 0:
            raise BadInput("x-request-timeout-ms must be a positive number")
        limit_ms = min(asked, timeout_ms)
    return limit_ms


class _Bound:
    """One model's request series, children bound to its labels once."""

    def __init__(self, metrics: PredictorMetrics) -> None:
        self.metrics = metrics
        self.inflight = metrics.inflight.labels(**metrics.labels)
        self.duration = metrics.request_duration.labels(**metrics.labels)
        self._by_code: dict[int, Any] = {}

    def count(self, status: int) -> None:
        child = self._by_code.get(status)
        if child is None:
            child = self.metrics.requests.labels(**self.metrics.labels, code=str(status))
            self._by_code[status] = child
        child.inc()


class PredictorMiddleware:
    """Request IDs, the body size limit and deadline, predict-route metrics and the
    request log (``_requestlog``)."""

    def __init__(self, app: ASGIApp, *, max_body_bytes: int, body_timeout_s: float,
                 metrics: PredictorMetrics, request_log: RequestLog,
                 metrics_for: Callable[[str], PredictorMetrics | None] | None = None,
                 predict_paths: re.Pattern[str] = PREDICT_PATH) -> None:
        """``metrics_for``: a multi-model predictor's series of the model a path names
        (None, or no such model: ``metrics``). ``predict_paths``: the routes counted and
        timed as predictions (an LLM's generation routes with task llm)."""
        self.app = app
        self.predict_paths = predict_paths
        self.request_log = request_log
        self.max_body_bytes = max_body_bytes
        self.body_timeout_s = body_timeout_s
        self.metrics = metrics
        self._metrics_for = metrics_for
        # Bound children once: labels() on every request showed up in the profile.
        self._bound: dict[int, _Bound] = {}
        self._ids = RequestIds()

    def _series(self, path: str) -> _Bound:
        metrics = self.metrics
        if self._metrics_for is not None:
            metrics = self._metrics_for(model_of_path(path)) or metrics
        bound = self._bound.get(id(metrics))
        if bound is None:
            bound = self._bound[id(metrics)] = _Bound(metrics)
        return bound

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request_id = (header(scope, b"x-request-id") or b"").decode("latin-1")
        if not request_id or len(request_id) > 200:
            request_id = self._ids.next()
            scope = _with_header(scope, b"x-request-id", request_id.encode())
        if _is_v2_json_without_content_type(scope):
            scope = _with_header(scope, b"content-type", b"application/json")
        id_header = (b"x-request-id", request_id.encode("latin-1"))
        status = [500]

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                status[0] = int(message["status"])
                headers = [h for h in message.get("headers", []) if h[0].lower() != b"x-request-id"]
                message = {**message, "headers": [*headers, id_header]}
            await send(message)

        is_predict = bool(self.predict_paths.match(scope.get("path", "")))
        started = time.monotonic()
        series = self._series(scope["path"]) if is_predict else None
        if series is not None:
            series.inflight.inc()
        try:
            if scope.get("method") in BODY_METHODS:
                try:
                    body = await self._read_body(scope, receive)
                    if is_predict:
                        check_body(scope, body)
                except BadInput as exc:
                    status[0] = await send_error(send, exc, (id_header,))
                    return
                # Read once, here: inner layers take the bytes, KServe a replay of them.
                scope = {**scope, _BODY: body}
                receive = _replay_body(body, receive)
            await self.app(scope, receive, send_with_id)
        finally:
            seconds = time.monotonic() - started
            if series is not None:
                series.inflight.dec()
                series.count(status[0])
                series.duration.observe(seconds)
            self.request_log.record(request_id, scope.get("method", ""), scope["path"],
                                    status[0], seconds)

    async def _read_body(self, scope: Scope, receive: Receive) -> bytes:
        """The whole body; BadInput when it is malformed, too large or too slow."""
        declared = header(scope, b"content-length")
        if declared is not None:
            try:
                length = int(declared)
            except ValueError:
                raise BadInput("Content-Length is not a number") from None
            if length < 0:
                raise BadInput("Content-Length is negative")
            if length > self.max_body_bytes:
                raise BodyTooLarge(f"request body of {length} bytes exceeds the limit of "
                                   f"{self.max_body_bytes} bytes")
        chunks: list[bytes] = []
        size = 0
        try:
            # One timeout for the whole body (a slow drip cannot hold a slot forever);
            # asyncio.timeout costs far less per request than wait_for's extra task.
            async with asyncio.timeout(self.body_timeout_s):
                while True:
                    message = await receive()
                    if message["type"] == "http.disconnect":
                        raise BadInput("client disconnected before sending the whole body")
                    chunk = message.get("body", b"")
                    size += len(chunk)
                    if size > self.max_body_bytes:
                        raise BodyTooLarge(f"request body exceeds the limit of "
                                           f"{self.max_body_bytes} bytes")
                    chunks.append(chunk)
                    if not message.get("more_body", False):
                        return chunks[0] if len(chunks) == 1 else b"".join(chunks)
        except TimeoutError:
            raise BodyTooSlow(
                f"request body not received within {self.body_timeout_s:.0f} s") from None


async def send_error(send: Send, exc: PredictorError,
                     headers: tuple[tuple[bytes, bytes], ...] = ()) -> int:
    """Answer ``exc`` as the error table says, with KServe's error JSON; its status."""
    status, table_headers = status_for(exc)
    extra = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in table_headers.items()]
    await _send_json(send, status, {"error": str(exc)}, [*extra, *headers])
    return status


class _RepeatedKey(Exception):
    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def _refuse_repeats(pairs: list[tuple[str, Any]]) -> None:
    if len({key for key, _ in pairs}) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _RepeatedKey(key)
            seen.add(key)


# Python's C scanner with a hook per object: ~2 us for a typical body, linear in its size.
_PAIRS_SCANNER = json.JSONDecoder(object_pairs_hook=_refuse_repeats)


def check_body(scope: Scope, body: bytes) -> None:
    """Raise BadInput for a predict body that must be refused before KServe decodes it."""
    declared = header(scope, b"inference-header-content-length")
    if declared is not None and str(scope.get("path", "")).endswith("/infer"):
        problem = _binary_extension_problem(declared, body)
        if problem is not None:
            raise BadInput(problem)
    key = duplicate_key(scope, body)
    if key is not None:
        raise BadInput(f"the JSON body repeats the key {key!r} in one object: send each key once")


def _binary_extension_problem(declared: bytes, body: bytes) -> str | None:
    """KServe's decoder of the V2 binary extension answers 500 to bytes it cannot read
    (a non-numeric header, a tensor shorter than its datatype needs): decode the body
    the same way first, and call what fails there bad input."""
    if not declared.isdigit() or int(declared) > len(body):
        return (f"inference-header-content-length must be a number of bytes within the "
                f"body's {len(body)}")
    from kserve import InferRequest

    try:
        InferRequest.from_bytes(body, int(declared), "request")
    except Exception as exc:  # whatever the bytes provoke in KServe's decoder
        detail = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        return f"the binary tensor request cannot be decoded: {detail}"
    return None


def duplicate_key(scope: Scope, body: bytes) -> str | None:
    """A key that one JSON object of the body repeats, or None (also for non-JSON bodies).

    Parsers disagree on repeated keys (orjson and Python keep the last one, others the
    first), so a proxy that inspected the body could have seen a different request from
    the one the model would run: such bodies are refused instead.
    """
    declared = header(scope, b"inference-header-content-length")
    if declared is not None and declared.isdigit():
        body = body[: int(declared)]  # V2 binary extension: JSON header, then raw tensors
    try:
        _PAIRS_SCANNER.decode(body.decode("utf-8"))
    except _RepeatedKey as repeated:
        return repeated.key
    except (ValueError, RecursionError):
        return None  # not JSON (or too deep): the protocol layer answers that
    return None


def _replay_body(body: bytes, receive: Receive) -> Receive:
    """A receive() that hands the app ``body`` (already read) and then the real stream."""
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


async def predictor_error_handler(request: Any, exc: Exception) -> Any:
    """FastAPI exception handler: a domain error → KServe's error JSON with its status."""
    from fastapi.responses import JSONResponse

    assert isinstance(exc, PredictorError)
    status, headers = status_for(exc)
    return JSONResponse(status_code=status, content={"error": str(exc)}, headers=headers)


async def validation_error_handler(request: Any, exc: Exception) -> Any:
    """FastAPI's request validation (V2 bodies) → 400 with KServe's error JSON, not 422."""
    from fastapi.responses import JSONResponse

    errors: list[dict[str, Any]] = list(getattr(exc, "errors", list)())
    # V2's body is declared as InferenceRequest | bytes: the bytes branch only adds noise.
    relevant = [e for e in errors if "bytes" not in [str(p) for p in e.get("loc", ())]] or errors
    parts = []
    for error in relevant[:5]:
        where = ".".join(str(p) for p in error.get("loc", ()) if p not in ("body",))
        parts.append(f"{where}: {error.get('msg', 'invalid')}" if where else error.get("msg", ""))
    message = "invalid request: " + ("; ".join(parts) or "the body does not match the protocol")
    return JSONResponse(status_code=400, content={"error": message})
