"""The one table from predictor errors to HTTP status codes, and its gRPC twin."""

from __future__ import annotations

import pytest

from predictor._errors import (
    ArtifactError,
    BadInput,
    BodyTooLarge,
    BodyTooSlow,
    DeadlineExpired,
    InjectedFailure,
    ItemFailed,
    Overloaded,
    PredictorError,
    RepositoryRefused,
    grpc_error_for,
    status_for,
)

CASES: list[tuple[PredictorError, int, dict[str, str], str]] = [
    (Overloaded("queue_full", 0.2, "full"), 429, {"retry-after": "1"}, "ResourceExhausted"),
    (Overloaded("deadline", 2.5, "late"), 429, {"retry-after": "3"}, "ResourceExhausted"),
    (Overloaded("draining", 0.0, "bye"), 503, {}, "Unavailable"),
    (DeadlineExpired(1000, 2100), 429, {"retry-after": "3"}, "ResourceExhausted"),
    (ItemFailed(0, ValueError("x"), is_input_error=True), 400, {}, "InvalidArgument"),
    (ItemFailed(0, RuntimeError("x"), is_input_error=False), 500, {}, "Internal"),
    (BadInput("no"), 400, {}, "InvalidArgument"),
    (BodyTooLarge("big"), 413, {}, "Internal"),
    (BodyTooSlow("slow"), 408, {}, "Internal"),
    (RepositoryRefused("unload"), 403, {}, "PermissionDenied"),
    (InjectedFailure("boom"), 500, {}, "Internal"),
    (ArtifactError("bad"), 500, {}, "Internal"),
    (PredictorError("other"), 500, {}, "Internal"),
]


@pytest.mark.parametrize(("exc", "status", "headers", "grpc"), CASES,
                         ids=[f"{type(c[0]).__name__}-{c[1]}" for c in CASES])
def test_each_error_has_one_status(exc: PredictorError, status: int, headers: dict[str, str],
                                   grpc: str) -> None:
    assert status_for(exc) == (status, headers)
    mapped = grpc_error_for(exc)
    assert type(mapped).__name__ == grpc and str(exc) in str(mapped)
