"""The tap: after a predict request is answered, hand a copy to the mirror and the capture.

``TapMiddleware`` sits inside ``PredictorMiddleware`` (so the request ID is already
set and the body already read, and handed on in the scope) and around KServe's app.
It keeps the request body and the response bytes, and only once the last byte of
the response has been sent does it give an ``Exchange`` to the ``Tap``, whose two
consumers only enqueue: the ``Mirror`` (``_mirror``) sends it on later from its own
tasks, the ``CaptureSink`` (``_capture``) writes it later from its own thread.
Neither can delay, fail or change the answer the client got.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from typing import TYPE_CHECKING

from predictor._http import (
    PREDICT_PATH,
    ASGIApp,
    Message,
    Receive,
    Scope,
    Send,
    header,
    request_body,
)
from predictor.tap._capture import CaptureConfig, CaptureSink
from predictor.tap._exchange import FORWARDED_HEADERS, SHADOW_HEADER, Exchange
from predictor.tap._mirror import Mirror, MirrorConfig
from predictor.tap._record import Identity

if TYPE_CHECKING:
    from predictor._config import ServerConfig
    from predictor.feedback import RecentOutputs

logger = logging.getLogger("predictor")


class Tap:
    """Where answered requests go: a mirror, a capture sink, or both."""

    def __init__(self, mirror: Mirror | None, capture: CaptureSink | None,
                 recent: RecentOutputs | None = None) -> None:
        self.mirror = mirror
        self.capture = capture
        self.recent = recent  # the last answers, for labels (--feedback_token_file)
        self._closed = False

    @classmethod
    def from_config(cls, config: ServerConfig, *, version: str, task: str) -> Tap | None:
        """The tap the flags ask for, or None when neither mirroring nor capture is on."""
        if not config.shadow_url and not config.capture_uri:
            return None
        from predictor._metrics import TapMetrics

        labels = {"model": config.model_name, "version": version, "role": config.role}
        metrics = TapMetrics.create(labels)
        mirror = capture = recent = None
        if config.shadow_url and config.shadow_sample_rate > 0:
            mirror = Mirror(MirrorConfig.from_server(config), metrics)
        if config.capture_uri:
            identity = Identity(model=config.model_name, version=version, role=config.role,
                                task=task)
            capture = CaptureSink(CaptureConfig.from_server(config), identity, metrics)
            if config.feedback_token_file:
                from predictor.feedback import RecentOutputs

                recent = RecentOutputs()
        return cls(mirror, capture, recent)

    def start(self) -> None:
        """Start the capture's writer thread (the mirror starts on first use, on the loop)."""
        if self.capture is not None:
            self.capture.start()

    def observe(self, exchange: Exchange) -> None:
        """Hand an answered request on; never blocks, never raises."""
        try:
            if self.mirror is not None:
                self.mirror.offer(exchange)
            if self.capture is not None:
                self.capture.offer(exchange)
            if self.recent is not None:
                self.recent.add(exchange)
        except Exception:  # a bug here must never reach a client
            logger.exception("tap failed on request %s", exchange.request_id)

    async def close(self, timeout_s: float = 5.0) -> None:
        """Finish or drop pending mirrors, then flush the capture (SIGTERM, shutdown)."""
        if self._closed:
            return
        self._closed = True
        if self.mirror is not None:
            await self.mirror.close(timeout_s)
        if self.capture is not None:
            await asyncio.to_thread(self.capture.close, timeout_s)


class TapMiddleware:
    """ASGI middleware: copies each answered predict request to the tap."""

    def __init__(self, app: ASGIApp, *, tap: Tap, paths: re.Pattern[str] = PREDICT_PATH) -> None:
        """``paths``: the routes copied (an LLM's generation routes with task llm)."""
        self.app = app
        self.tap = tap
        self.paths = paths

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        body = request_body(scope)
        if (scope["type"] != "http" or scope.get("method") != "POST" or body is None
                or not self.paths.match(scope.get("path", ""))):
            await self.app(scope, receive, send)
            return
        started, wall = time.monotonic(), time.time()
        status = [0]
        response: list[bytes] = []

        async def tee(message: Message) -> None:
            if message["type"] == "http.response.start":
                status[0] = int(message["status"])
            elif message["type"] == "http.response.body":
                response.append(bytes(message.get("body", b"")))
            await send(message)

        try:
            await self.app(scope, receive, tee)
        except Exception:
            status[0] = status[0] or 500  # Starlette's error middleware answers 500
            raise
        finally:
            self.tap.observe(_exchange_of(scope, body, status[0] or 500, b"".join(response),
                                          wall, time.monotonic() - started))


def _exchange_of(scope: Scope, body: bytes, status: int, response: bytes, wall: float,
                 latency_s: float) -> Exchange:
    headers = tuple((k.decode("latin-1"), v.decode("latin-1"))
                    for k, v in scope.get("headers", []) if k.lower() in FORWARDED_HEADERS)
    shadow = (header(scope, SHADOW_HEADER.encode()) or b"").strip().lower()
    return Exchange(
        request_id=(header(scope, b"x-request-id") or b"").decode("latin-1"),
        started_at=wall,
        path=str(scope.get("path", "")),
        query=bytes(scope.get("query_string", b"")).decode("latin-1"),
        headers=headers,
        body=body,
        status=status,
        response=response,
        latency_s=latency_s,
        is_shadow=shadow in (b"true", b"1", b"yes"),
    )
