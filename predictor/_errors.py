"""The predictor's branch of the error tree, and the one table that maps it to status codes.

    PlatformError                      (common; captures.CaptureSetupError: at start, the
    │                                  capture directory cannot be created; LabelError:
    │                                  the feedback route answers it as BadInput, 400)
    └── PredictorError                 anything not below: 500 (gRPC INTERNAL)
        ├── Overloaded                 refused at once: 429 + Retry-After (draining: 503)
        ├── DeadlineExpired            dropped in the queue before it ran: 429 + Retry-After
        ├── ItemFailed                 one of the request's items raised: 400 or 500
        │   └── RemoteItemFailed       the same, raised on a queue worker (queue mode)
        ├── BadInput                   the request itself is malformed: 400
        │   ├── BodyTooLarge           the body is over --max_body_bytes: 413
        │   └── BodyTooSlow            the body did not arrive within the timeout: 408
        ├── RepositoryRefused          a model repository load or unload: 403 (gRPC
        │                              PERMISSION_DENIED); the model keeps serving
        ├── Unauthorized               no or a wrong bearer token or tenant key: 401
        ├── Forbidden                  a tenant asked for a model it may not use: 403
        ├── Throttled                  a tenant is over one of its limits: 429 + Retry-After
        ├── InjectedFailure            --inject_error_rate: 500
        ├── QueueUnavailable           queue mode: Redis cannot be reached: 503 + Retry-After
        ├── StoreUnavailable           the label files' store refused a write: 503 + Retry-After
        ├── DeadLettered               queue mode: the request's entry was moved to the
        │                              dead-letter stream after too many deliveries: 500
        ├── ArtifactError              at start: the model directory cannot be served
        └── TLSMisconfigured           at start: a TLS certificate without its key, or
                                       a key without its certificate

``status_for`` is the one table from these errors to HTTP status codes (and the
headers that go with them); ``grpc_error_for`` is its twin for gRPC, derived from it.
The edges consult them (``_http``: the body checks and the app's exception handler;
``_model``: gRPC requests and their metrics; ``_repository``: gRPC's load and unload);
the batcher and the handlers only raise. An error at start ends the process with exit
code 2 (``_server.serve``). Two refusals never become errors: a request head over its
limits (431, or 408 when too slow), answered by ``_head`` before the ASGI app sees
the request, and FastAPI's request validation of V2 bodies (400,
``_http.validation_error_handler``).
"""

from __future__ import annotations

import math
from typing import Literal

from common import PlatformError

OverloadReason = Literal["queue_full", "deadline", "draining", "memory"]

_MAX_CAUSE_CHARS = 200


class PredictorError(PlatformError):
    """Something went wrong serving a prediction request."""


class Overloaded(PredictorError):
    """The request was refused before it entered the queue.

    ``reason`` is ``"queue_full"``, ``"deadline"`` (it could not finish in time),
    ``"draining"`` (the server is shutting down) or ``"memory"`` (multi-model: the model
    is not resident and no room can be made for it now); ``retry_after_s`` is the
    predicted time until the queue has drained (the server rounds it up).
    """

    def __init__(self, reason: OverloadReason, retry_after_s: float, message: str) -> None:
        super().__init__(message)
        self.reason: OverloadReason = reason
        self.retry_after_s = retry_after_s


class DeadlineExpired(PredictorError):
    """An item of the request could no longer finish before the deadline, so the
    request was dropped from the queue before it cost device time."""

    def __init__(self, timeout_ms: float, waited_ms: float) -> None:
        super().__init__(
            f"deadline of {timeout_ms:.0f} ms expired after waiting {waited_ms:.0f} ms "
            "in the queue"
        )
        self.timeout_ms = timeout_ms
        self.waited_ms = waited_ms


class ItemFailed(PredictorError):
    """The model raised for one item of the request (isolated from its batch).

    ``is_input_error`` says whether the input was at fault (400) or not (500);
    ``cause`` is the original exception and ``item_index`` the item's position
    in the request.
    """

    def __init__(self, item_index: int, cause: BaseException, *, is_input_error: bool) -> None:
        text = f"{type(cause).__name__}: {cause}"
        if len(text) > _MAX_CAUSE_CHARS:
            text = text[: _MAX_CAUSE_CHARS - 3] + "..."
        super().__init__(f"item {item_index} failed: {text}")
        self.item_index = item_index
        self.cause = cause
        self.is_input_error = is_input_error


class RemoteItemFailed(ItemFailed):
    """An item failed on a queue worker; the worker's message travels as it was worded."""

    def __init__(self, item_index: int, message: str, *, is_input_error: bool) -> None:
        PredictorError.__init__(self, message)
        self.item_index = item_index
        self.cause = RuntimeError(message)
        self.is_input_error = is_input_error


class BadInput(PredictorError):
    """The request is malformed (no items, wrong types, too large, ...)."""


class BodyTooLarge(BadInput):
    """The request body is larger than ``--max_body_bytes`` (declared or as sent)."""


class BodyTooSlow(BadInput):
    """The request body did not arrive in full within the request timeout."""


class RepositoryRefused(PredictorError):
    """A model repository ``load`` or ``unload`` (HTTP or gRPC), refused.

    The predictor serves the one model it verified and loaded at start; KServe's
    repository extension would let any caller, unauthenticated, unload it for good.
    """

    def __init__(self, action: str, why: str = "") -> None:
        super().__init__(
            f"model repository {action} is refused: " + (why or (
                "this predictor serves the one model it loaded at start and does not load "
                "or unload models while it runs (roll out a new version instead)"))
        )
        self.action = action


class ModelUnknown(PredictorError):
    """No model of that name (multi-model: in the model directory), or not that version
    of it (``_versions``): 404."""


class ModelUnavailable(PredictorError):
    """Multi-model: the model cannot serve now: its load failed (the reason says why; it is
    not retried until asked for by the repository's load) or it is being unloaded: 503."""

    def __init__(self, message: str, retry_after_s: float | None = None) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class Unauthorized(PredictorError):
    """A repository load or unload without the bearer token it needs, or a request
    without a tenant's API key where tenants are on: 401."""

    def __init__(self, message: str, realm: str = "model repository") -> None:
        super().__init__(message)
        self.realm = realm


class Forbidden(PredictorError):
    """A tenant asked for a model it may not use: 403."""


class Throttled(PredictorError):
    """A tenant is over one of its limits (``--tenants_file``): 429 with Retry-After."""

    def __init__(self, message: str, retry_after_s: float) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class InjectedFailure(PredictorError):
    """A failure injected on purpose (--inject_error_rate): answered 500."""


class QueueUnavailable(PredictorError):
    """Queue mode: Redis did not answer; the request was not (known to be) enqueued."""

    def __init__(self, message: str, retry_after_s: float = 1.0) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class StoreUnavailable(PredictorError):
    """Where the predictor writes (the label files' store) refused or did not answer: 503
    with Retry-After; nothing was stored."""

    def __init__(self, message: str, retry_after_s: float = 2.0) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class DeadLettered(PredictorError):
    """Queue mode: the request was delivered to workers more than --queue_max_deliveries
    times without an answer (each worker stopped while running it) and was moved to the
    dead-letter stream: 500."""


class ArtifactError(PredictorError):
    """The model directory cannot be served (no manifest, bad checksums, bad weights)."""


class TLSMisconfigured(PredictorError):
    """Only one of the TLS certificate and key is set."""


# Errors whose status does not depend on the error's own fields, nearest class first.
_FIXED_STATUS: tuple[tuple[type[PredictorError], int], ...] = (
    (BodyTooLarge, 413),
    (BodyTooSlow, 408),
    (BadInput, 400),
    # Understood and refused, whoever asks: a 4xx, so no error rate counts it.
    (RepositoryRefused, 403),
    (Forbidden, 403),
    (ModelUnknown, 404),
)


def status_for(exc: PredictorError) -> tuple[int, dict[str, str]]:
    """The edge table: a predictor error's HTTP status and the headers that go with it."""
    if isinstance(exc, Overloaded):
        if exc.reason == "draining":
            return 503, {}
        return 429, _retry_after(exc.retry_after_s)
    if isinstance(exc, QueueUnavailable | StoreUnavailable):
        return 503, _retry_after(exc.retry_after_s)
    if isinstance(exc, ModelUnavailable):
        return 503, {} if exc.retry_after_s is None else _retry_after(exc.retry_after_s)
    if isinstance(exc, Unauthorized):
        return 401, {"www-authenticate": f'Bearer realm="{exc.realm}"'}
    if isinstance(exc, Throttled):
        return 429, _retry_after(exc.retry_after_s)
    if isinstance(exc, DeadlineExpired):
        # Dropped in the queue by overload: a refusal like the 429 at the door, not a
        # server error (the rollout's error rate must not count shed load).
        return 429, _retry_after(exc.waited_ms / 1000.0)
    if isinstance(exc, ItemFailed):
        return (400 if exc.is_input_error else 500), {}
    for cls, status in _FIXED_STATUS:
        if isinstance(exc, cls):
            return status, {}
    return 500, {}


def grpc_error_for(exc: PredictorError) -> Exception:
    """The same table for gRPC: the status a gRPC client understands for ``exc``."""
    from grpc_interceptor import exceptions as grpc_exc

    by_status: dict[int, type[Exception]] = {
        400: grpc_exc.InvalidArgument,
        401: grpc_exc.Unauthenticated,
        403: grpc_exc.PermissionDenied,
        404: grpc_exc.NotFound,
        429: grpc_exc.ResourceExhausted,
        503: grpc_exc.Unavailable,
    }
    status, _ = status_for(exc)
    return by_status.get(status, grpc_exc.Internal)(str(exc))


def _retry_after(seconds: float) -> dict[str, str]:
    return {"retry-after": str(max(1, math.ceil(seconds)))}
