"""The tap behind the HTTP edge, in process: the body is read once, by the edge.

``PredictorMiddleware`` reads the body (bounded) and hands it on; the tap takes it
from the scope and KServe's app (here a recorder) reads it from the replay, so the
client's ``receive`` is called only as often as the body has chunks.
"""

from __future__ import annotations

import asyncio
from typing import Any

from prometheus_client import CollectorRegistry

from captures import CAPTURE_COLUMNS, capture_schema
from predictor._http import PredictorMiddleware
from predictor._metrics import PredictorMetrics
from predictor._requestlog import RequestLog, RequestLogConfig
from predictor.tap import Exchange, Tap, TapMiddleware


class FakeMirror:
    """A tap consumer that keeps what it is offered."""

    def __init__(self) -> None:
        self.offered: list[Exchange] = []

    def offer(self, exchange: Exchange) -> None:
        self.offered.append(exchange)


async def _app(scope: Any, receive: Any, send: Any) -> None:
    """KServe's place: reads the whole body from receive and echoes it."""
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            break
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"echo:" + body})


def _serve(chunks: list[bytes], *, max_body_bytes: int = 1000,
           ) -> tuple[int, bytes, int, list[Exchange]]:
    """(status, response body, receive calls, exchanges the tap saw) for one POST."""
    mirror = FakeMirror()
    tap = Tap(mirror, None)  # type: ignore[arg-type]  # a fake of the mirror's offer
    metrics = PredictorMetrics.create("m", "1", "stable", registry=CollectorRegistry())
    edge = PredictorMiddleware(TapMiddleware(_app, tap=tap), max_body_bytes=max_body_bytes,
                               body_timeout_s=5.0, metrics=metrics,
                               request_log=RequestLog(RequestLogConfig()))
    calls = 0
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        nonlocal calls
        calls += 1
        if calls > len(chunks):
            await asyncio.sleep(3600)  # the client waits for its answer
        return {"type": "http.request", "body": chunks[calls - 1],
                "more_body": calls < len(chunks)}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {"type": "http", "method": "POST", "path": "/v1/models/m:predict",
             "query_string": b"", "headers": [(b"content-type", b"application/json"),
                                              (b"x-request-id", b"rid-1")]}
    asyncio.run(edge(scope, receive, send))
    status = int(sent[0]["status"])
    body = b"".join(m.get("body", b"") for m in sent[1:])
    return status, body, calls, mirror.offered


def test_the_body_is_read_once_by_the_edge_and_handed_on() -> None:
    status, body, calls, seen = _serve([b'{"instances": ', b'["a"]}'])
    assert (status, body) == (200, b'echo:{"instances": ["a"]}')
    assert calls == 2  # one per chunk: neither the tap nor the app read the client again
    assert [(e.request_id, e.body, e.status, e.response) for e in seen] == \
        [("rid-1", b'{"instances": ["a"]}', 200, b'echo:{"instances": ["a"]}')]


def test_a_body_over_the_limit_is_refused_at_the_edge_and_never_tapped() -> None:
    status, body, _, seen = _serve([b'{"instances": ["' + b"x" * 20, b'"]}'],
                                   max_body_bytes=10)
    assert status == 413
    assert body == b'{"error": "request body exceeds the limit of 10 bytes"}'
    assert seen == []


def test_the_schema_is_the_one_column_list() -> None:
    assert [(f.name, str(f.type)) for f in capture_schema()] == list(CAPTURE_COLUMNS)
