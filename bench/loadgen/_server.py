"""A tiny HTTP/1.1 server for measuring and testing the load generator itself.

It costs next to nothing per request (uvloop + httptools, no framework), so a run
against it measures the generator, and its routes play the servers a generator must
cope with:

    /ok...                 200 at once
    /close...              200 at once, then closes the connection
    /cycle/200,429,500/... the listed statuses in turn (a counter per path)
    /status...             the status in header x-want-status, else the body's "status"
    /slow/<ms>/...         one request at a time, <ms> each: a queue builds
    /hang...               never answers
    /count/<path>          GET: how many requests <path> has received
    /healthz               200

Run: ``python -m bench.loadgen._server --port 8099``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from collections import Counter
from typing import cast

import httptools
import uvloop

_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 429: "Too Many Requests"}


class _State:
    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        self.cycles: Counter[str] = Counter()
        self.slow_lock = asyncio.Lock()


class _Handler(asyncio.Protocol):
    def __init__(self, state: _State) -> None:
        self.state = state
        self.parser = httptools.HttpRequestParser(self)
        self.transport: asyncio.Transport | None = None
        self._reset()

    def _reset(self) -> None:
        self.url = b""
        self.headers: dict[bytes, bytes] = {}
        self.body: list[bytes] = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement asyncio.Transport without subclassing it
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            self.respond(400, b'{"error":"bad request"}', keep_alive=False)

    def on_url(self, url: bytes) -> None:
        self.url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers[name.lower()] = value

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        path = httptools.parse_url(self.url).path.decode()
        headers, body = self.headers, b"".join(self.body)
        keep_alive = self.parser.should_keep_alive()
        self._reset()
        self.route(path, headers, body, keep_alive)

    def route(self, path: str, headers: dict[bytes, bytes], body: bytes, keep_alive: bool) -> None:
        state = self.state
        if path == "/healthz":
            self.respond(200, b"{}", keep_alive)
            return
        if path.startswith("/count/"):
            count = state.counts[path[len("/count") :]]
            self.respond(200, json.dumps({"count": count}).encode(), keep_alive)
            return
        state.counts[path] += 1
        if path.startswith("/ok"):
            self.respond(200, b'{"ok":true}', keep_alive)
        elif path.startswith("/close"):
            self.respond(200, b'{"ok":true}', keep_alive=False)
        elif path.startswith("/cycle/"):
            codes = [int(c) for c in path.split("/")[2].split(",")]
            turn = state.cycles[path]
            state.cycles[path] += 1
            self.respond(codes[turn % len(codes)], b"{}", keep_alive)
        elif path.startswith("/status"):
            self.respond(_wanted_status(headers, body), b"{}", keep_alive)
        elif path.startswith("/slow/"):
            delay_s = int(path.split("/")[2]) / 1000
            asyncio.get_running_loop().create_task(self._slow(delay_s, keep_alive))
        elif not path.startswith("/hang"):
            self.respond(404, b'{"error":"no such route"}', keep_alive)

    async def _slow(self, delay_s: float, keep_alive: bool) -> None:
        async with self.state.slow_lock:
            await asyncio.sleep(delay_s)
        self.respond(200, b'{"ok":true}', keep_alive)

    def respond(self, code: int, body: bytes, keep_alive: bool) -> None:
        if self.transport is None or self.transport.is_closing():
            return
        extra = b"Retry-After: 1\r\n" if code == 429 else b""
        if not keep_alive:
            extra += b"Connection: close\r\n"
        reason = _REASONS.get(code, "Status").encode()
        self.transport.write(
            b"HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n%s\r\n%s"
            % (code, reason, len(body), extra, body)
        )
        if not keep_alive:
            self.transport.close()


def _wanted_status(headers: dict[bytes, bytes], body: bytes) -> int:
    if b"x-want-status" in headers:
        return int(headers[b"x-want-status"])
    try:
        return int(json.loads(body or b"{}").get("status", 200))
    except (ValueError, AttributeError):
        return 400


async def serve(host: str, port: int) -> None:
    """Serve until the process is stopped."""
    state = _State()
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: _Handler(state), host, port, backlog=4096)
    print(f"listening on http://{host}:{port}", flush=True)
    async with server:
        await server.serve_forever()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    uvloop.run(serve(args.host, args.port))


if __name__ == "__main__":
    main()
