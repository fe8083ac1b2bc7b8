"""The HTTP side of a multi-model predictor, in front of KServe's app.

- ``POST /v2/repository/index``: every model with its state and reason (Triton's model
  repository extension; KServe has no such route). A body ``{"ready": true}`` lists the
  READY ones only.
- ``POST /v2/repository/models/NAME/load`` and ``.../unload``: they change what is
  served, so they need ``Authorization: Bearer <token>`` (the token of
  ``--repository_token_file``, compared in constant time): 401 without it or with another;
  403 when no token is configured. Answered as KServe answers them
  (``{"name": NAME, "load": true}``).
- Predict routes (V1 and V2): the model the path names is made resident and pinned for
  the request (``ModelHost.using``), then KServe's route serves it; an unknown model is
  404, one that cannot load in time 429 with ``Retry-After``, a failed one 503.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from typing import Any

from predictor._errors import (
    BadInput,
    Overloaded,
    PredictorError,
    RepositoryRefused,
    status_for,
)
from predictor._http import (
    PREDICT_PATH,
    ASGIApp,
    Receive,
    Scope,
    Send,
    header,
    model_of_path,
    request_body,
    request_timeout_ms,
)
from predictor._secrets import check_bearer
from predictor.multi._host import ModelHost

INDEX_PATH = "/v2/repository/index"
ACTION_PATH = re.compile(r"^/v2/repository/models/(?P<name>[^/]+)/(?P<action>load|unload)$")


def check_token(expected: str | None, authorization: str | None, action: str) -> None:
    """Raise unless ``authorization`` carries the bearer ``expected`` (HTTP and gRPC)."""
    if expected is None:
        raise RepositoryRefused(action, "start the predictor with --repository_token_file to "
                                "allow the repository's load and unload")
    check_bearer(expected, authorization, needs=f"model repository {action}",
                 flag="--repository_token_file")


class MultiModelRoutes:
    """The repository routes, and each predict request's model made resident first."""

    def __init__(self, app: ASGIApp, host: ModelHost, *, token: str | None,
                 is_draining: Callable[[], bool]) -> None:
        self.app = app
        self.host = host
        self.token = token
        self.is_draining = is_draining

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path, method = scope.get("path", ""), scope.get("method", "")
        try:
            if method == "POST" and path == INDEX_PATH:
                await _send(send, 200, self._index(scope))
                return
            action = ACTION_PATH.match(path)
            if method == "POST" and action is not None:
                await _send(send, 200, await self._act(scope, action["name"], action["action"]))
                return
            if PREDICT_PATH.match(path):
                await self._predict(scope, receive, send, model_of_path(path))
                return
        except PredictorError as exc:
            status, headers = status_for(exc)
            await _send(send, status, {"error": str(exc)}, headers)
            return
        await self.app(scope, receive, send)

    def _index(self, scope: Scope) -> list[dict[str, Any]]:
        body = request_body(scope) or b""
        try:
            wanted = json.loads(body) if body.strip() else {}
        except ValueError:
            raise BadInput("the index request body must be JSON, e.g. {\"ready\": true}") from None
        if not isinstance(wanted, dict) or not isinstance(wanted.get("ready", False), bool):
            raise BadInput("the index request body is an object with an optional boolean "
                           "\"ready\"")
        rows = self.host.index()
        return [r for r in rows if r["state"] == "READY"] if wanted.get("ready") else rows

    async def _act(self, scope: Scope, name: str, action: str) -> dict[str, Any]:
        authorization = header(scope, b"authorization")
        check_token(self.token, authorization.decode("latin-1") if authorization else None,
                    action)
        if action == "load":
            await self.host.load(name)
        else:
            await self.host.unload(name)
        return {"name": name, action: True}

    async def _predict(self, scope: Scope, receive: Receive, send: Send, name: str) -> None:
        if self.is_draining():
            raise Overloaded("draining", 0.0, "the server is shutting down; retry on another "
                             "replica")
        asked = header(scope, b"x-request-timeout-ms")
        headers = {"x-request-timeout-ms": asked.decode("latin-1")} if asked else {}
        timeout_ms = request_timeout_ms(headers, self.host.config.request_timeout_ms)
        async with self.host.using(name, time.monotonic() + timeout_ms / 1000.0):
            await self.app(scope, receive, send)


async def _send(send: Send, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
    data = json.dumps(body).encode()
    raw = [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())]
    raw += [(k.encode(), v.encode()) for k, v in (headers or {}).items()]
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": data})
