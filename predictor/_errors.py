"""The predictor's branch of the error tree.

    PlatformError                      (registry)
    └── PredictorError
        ├── Overloaded                 refused at once: 429 + Retry-After (draining: 503)
        ├── DeadlineExpired            dropped in the queue before it ran: 429 + Retry-After
        ├── ItemFailed                 one of the request's items raised: 400 or 500
        ├── BadInput                   the request itself is malformed: 400
        └── RepositoryRefused          a model repository load or unload: 403 (gRPC
                                       PERMISSION_DENIED); the model keeps serving

The HTTP layer maps these to status codes in one table (gRPC has its twin); the
batcher only raises.
"""

from __future__ import annotations

from typing import Literal

from registry import PlatformError

OverloadReason = Literal["queue_full", "deadline", "draining"]

_MAX_CAUSE_CHARS = 200


class PredictorError(PlatformError):
    """Something went wrong serving a prediction request."""


class Overloaded(PredictorError):
    """The request was refused before it entered the queue.

    ``reason`` is ``"queue_full"``, ``"deadline"`` (it could not finish in time)
    or ``"draining"`` (the server is shutting down); ``retry_after_s`` is the
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


class BadInput(PredictorError):
    """The request is malformed (no items, wrong types, too large, ...)."""


class RepositoryRefused(PredictorError):
    """A model repository ``load`` or ``unload`` (HTTP or gRPC), refused.

    The predictor serves the one model it verified and loaded at start; KServe's
    repository extension would let any caller, unauthenticated, unload it for good.
    """

    def __init__(self, action: str) -> None:
        super().__init__(
            f"model repository {action} is refused: this predictor serves the one model it "
            "loaded at start and does not load or unload models while it runs (roll out a "
            "new version instead)"
        )
        self.action = action
