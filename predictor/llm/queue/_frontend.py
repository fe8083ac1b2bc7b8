"""The frontend role for task ``llm``: the same routes as in-process (``LLMRoutes``), with
``QueuedLLM`` in the place of the model. It checks and enqueues each request, then passes
on the pieces a worker writes to the request's token stream (``_tokens.Follower``: one
attempt's pieces, never two spliced).

No weights and no tokenizer: what only the model can check (the prompt against the
context) comes back from the worker as a 400 before any token. The deadline covers the
first token, as in-process; a client that goes away sets the request's cancel key, which
the worker reads with each piece it writes. Readiness follows Redis, never the workers,
who may be scaled to zero.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import AsyncGenerator
from typing import Any

from predictor._config import ServerConfig
from predictor._errors import DeadlineExpired, Forbidden, Overloaded, QueueUnavailable
from predictor.llm._model import Piece
from predictor.llm._params import GenerationRequest
from predictor.llm.queue._tokens import Follower, decode_arrived, request_item
from predictor.queue._backpressure import depth_of
from predictor.queue._client import connect, redis_errors, shown
from predictor.queue._codec import Entry, encode_entry
from predictor.queue._keys import QueueKeys
from predictor.tenants import CURRENT

logger = logging.getLogger("predictor.llm")

READ_BLOCK_MS = 1000
DEPTH_CACHE_S = 0.1
RETRY_AFTER_UNAVAILABLE_S = 2.0


class QueuedLLM:
    """An LLM served by the queue's workers, as ``LLMRoutes`` sees a model."""

    def __init__(self, config: ServerConfig, version: str) -> None:
        self.config = config
        self.name = config.model_name
        self.version = version
        self.keys = QueueKeys(config.model_name, version)
        self.draining = False
        self._client: Any = None
        self._active = 0
        self._depth: tuple[float, int] = (0.0, 0)
        self._pinged: tuple[float, bool] = (0.0, False)

    def _redis(self) -> Any:
        if self._client is None:
            # One connection for each stream being read (a blocking XREAD holds one).
            self._client = connect(self.config.queue_url, socket_timeout_s=2.0,
                                   max_connections=self.config.max_queue_size + 8)
            logger.info("llm frontend on %s, stream %s", shown(self.config.queue_url),
                        self.keys.stream)
        return self._client

    async def healthy(self) -> bool:
        """Ready while not draining and Redis answers a PING (read at most once a second)."""
        if self.draining:
            return False
        now = time.monotonic()
        if now - self._pinged[0] > 1.0:
            try:
                ok = bool(await self._redis().ping())
            except redis_errors():
                ok = False
            self._pinged = (now, ok)
        return self._pinged[1]

    async def drain(self, timeout_s: float) -> None:
        """New requests refused; the streams being passed on finish, for up to ``timeout_s``."""
        self.draining = True
        deadline = time.monotonic() + timeout_s
        while self._active and time.monotonic() < deadline:
            await asyncio.sleep(0.05)

    def stop(self) -> None:
        """Nothing runs here: the workers generate."""

    async def generate(self, request: GenerationRequest, *, timeout_ms: float,
                       arrived: float | None = None) -> AsyncGenerator[Piece, None]:
        """The pieces of one attempt of the request, as a worker writes them."""
        arrived = time.monotonic() if arrived is None else arrived
        if self.draining:
            raise Overloaded("draining", 0.0, "the server is shutting down")
        tenant = CURRENT.get()
        if tenant is not None and tenant.adapter is not None:
            # The workers serve the base model only: never answer with other weights.
            raise Forbidden(f"tenant {tenant.name} uses adapter {tenant.adapter}, and "
                            "adapters are not served in queue mode (yet): serve it in-process")
        client = self._redis()
        await self._admit(client)
        request_id = uuid.uuid4().hex
        now_ms = time.time() * 1000.0
        left_ms = timeout_ms - (time.monotonic() - arrived) * 1000.0
        entry = Entry(request_id, request_id, [request_item(request)], {},
                      deadline_ms=now_ms + left_ms, timeout_ms=timeout_ms,
                      enqueued_ms=now_ms - (time.monotonic() - arrived) * 1000.0, reply_to="")
        try:
            await client.xadd(self.keys.stream, encode_entry(entry))
        except redis_errors():
            raise QueueUnavailable("Redis did not take the request",
                                   RETRY_AFTER_UNAVAILABLE_S) from None
        self._active += 1
        finished = False
        try:
            async for piece in self._follow(client, request_id, request, timeout_ms, arrived):
                finished = piece.finish_reason is not None
                yield piece
                if finished:
                    return
        finally:
            self._active -= 1
            await self._end(client, request_id, cancelled=not finished)

    async def _follow(self, client: Any, request_id: str, request: GenerationRequest,
                      timeout_ms: float, arrived: float) -> AsyncGenerator[Piece, None]:
        follower = Follower(buffered=not request.stream)
        key, last = self.keys.tokens(request_id), "0-0"
        while True:
            block_ms = READ_BLOCK_MS
            # The deadline covers the first token, as in-process: a whole answer is held
            # back to its last piece, but a worker generating it has met the deadline.
            if not follower.seen:
                left_ms = timeout_ms - (time.monotonic() - arrived) * 1000.0
                if left_ms <= 0:
                    raise DeadlineExpired(timeout_ms, (time.monotonic() - arrived) * 1000.0)
                block_ms = max(1, min(READ_BLOCK_MS, int(left_ms)))
            try:
                reply = await client.xread({key: last}, block=block_ms)
            except redis_errors():
                raise QueueUnavailable("lost Redis while waiting for the answer",
                                       RETRY_AFTER_UNAVAILABLE_S) from None
            for _stream, entries in reply or []:
                for entry_id, fields in entries:
                    last = entry_id
                    for piece in follower.take(decode_arrived(fields)):
                        yield piece

    async def _end(self, client: Any, request_id: str, *, cancelled: bool) -> None:
        """The stream is ours to delete; a request left early is cancelled on its worker."""
        with contextlib.suppress(*redis_errors()):
            pipe = client.pipeline(transaction=False)
            if cancelled:
                pipe.set(self.keys.cancel(request_id), b"1",
                         ex=self.config.queue_result_ttl_s)
            pipe.delete(self.keys.tokens(request_id))
            await pipe.execute()

    async def _admit(self, client: Any) -> None:
        """Refuse at the door when the stream holds --max_queue_size requests already."""
        now = time.monotonic()
        if now - self._depth[0] > DEPTH_CACHE_S:
            try:
                groups = await client.xinfo_groups(self.keys.stream)
            except redis_errors():
                raise QueueUnavailable("Redis did not answer XINFO GROUPS",
                                       RETRY_AFTER_UNAVAILABLE_S) from None
            except Exception:  # no stream yet (no worker has ever started): depth 0
                groups = []
            self._depth = (now, depth_of(groups, QueueKeys.GROUP)[0])
        depth = self._depth[1]
        if depth >= self.config.max_queue_size:
            raise Overloaded("queue_full", 1.0,
                             f"the queue is full ({depth} requests waiting or generating, "
                             f"the limit is {self.config.max_queue_size})")
