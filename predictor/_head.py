"""Limits on the request head (request line and headers), which uvicorn leaves open.

uvicorn's httptools protocol buffers a request's headers without any size limit and
waits for them without any deadline: one client could grow the process by the size
of its headers (the body limit never sees them), or hold connections open for ever
by sending a head a byte at a time. ``head_limited_protocol`` returns that protocol
with both bounded: a head larger than ``max_head_bytes`` is answered 431, a head not
complete ``head_timeout_s`` after its first byte is answered 408, and the connection
is closed; a new connection that sends nothing at all is closed after the same time.
These answers never reach the ASGI app, so they are not in the request metrics.
"""

from __future__ import annotations

import json
from typing import Any

MAX_HEAD_BYTES = 64 * 1024  # Envoy's default header limit is 60 KiB
_REASONS = {408: b"Request Timeout", 431: b"Request Header Fields Too Large"}


def head_end(tail: bytes, data: bytes) -> int:
    """How many bytes of ``data`` belong to the head, if it ends in ``data`` (else -1).

    ``tail`` is the end of what came before (at most 3 bytes), for a blank line
    split across two reads.
    """
    if tail:
        joined = (tail + data[:3]).find(b"\r\n\r\n")
        if joined >= 0:
            return joined + 4 - len(tail)
    found = data.find(b"\r\n\r\n")
    return -1 if found < 0 else found + 4


def head_limited_protocol(max_head_bytes: int, head_timeout_s: float) -> type[Any]:
    """uvicorn's httptools protocol class with the head bounded in bytes and time."""
    if max_head_bytes < 1 or head_timeout_s <= 0:
        raise ValueError("max_head_bytes must be >= 1 and head_timeout_s > 0")
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    class HeadLimitedProtocol(HttpToolsProtocol):
        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            self._head_bytes = 0
            self._head_tail = b""
            self._in_head = True
            self._refused = False
            self._head_timer: Any = self.loop.call_later(head_timeout_s, self._head_timed_out)

        def data_received(self, data: bytes) -> None:
            if self._refused:
                return
            if self._in_head:
                if self._head_timer is None:  # the first byte of the next request's head
                    self._head_timer = self.loop.call_later(head_timeout_s,
                                                            self._head_timed_out)
                end = head_end(self._head_tail, data)
                self._head_bytes += len(data) if end < 0 else end
                if self._head_bytes > max_head_bytes:
                    self._refuse(431, f"the request head exceeds {max_head_bytes} bytes")
                    return
                self._head_tail = data[-3:] if end < 0 else b""
            super().data_received(data)

        def on_headers_complete(self) -> None:
            self._in_head = False
            self._head_bytes = 0
            self._head_tail = b""
            self._cancel_head_timer()
            super().on_headers_complete()

        def on_message_complete(self) -> None:
            super().on_message_complete()
            self._in_head = True  # its timer starts with the next request's first byte

        def connection_lost(self, exc: Exception | None) -> None:
            self._cancel_head_timer()
            super().connection_lost(exc)

        def _cancel_head_timer(self) -> None:
            if self._head_timer is not None:
                self._head_timer.cancel()
                self._head_timer = None

        def _head_timed_out(self) -> None:
            self._head_timer = None
            if not self._in_head or self.transport.is_closing():
                return
            if self.cycle is not None and not self.cycle.response_complete:
                # A response is still going out on this connection: never cut into it.
                self._head_timer = self.loop.call_later(head_timeout_s, self._head_timed_out)
                return
            if self._head_bytes == 0:
                self._refused = True
                self.transport.close()  # an idle connection: nothing to answer
                return
            self._refuse(408, f"request head not received within {head_timeout_s:g} s")

        def _refuse(self, status: int, message: str) -> None:
            self._refused = True
            self._cancel_head_timer()
            body = json.dumps({"error": message}).encode()
            head = (b"HTTP/1.1 %d %s\r\ncontent-type: application/json\r\n"
                    b"content-length: %d\r\nconnection: close\r\n\r\n"
                    % (status, _REASONS[status], len(body)))
            self.transport.write(head + body)
            self.transport.close()

    return HeadLimitedProtocol
