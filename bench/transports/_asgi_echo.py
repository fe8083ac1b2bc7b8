"""The app both servers run: read the body, answer a small JSON document. Standard
library only, so granian's own virtualenv can import it."""

from __future__ import annotations

import json
from typing import Any

ANSWER = json.dumps({"predictions": ["hi"]}).encode()
HEADERS = [(b"content-type", b"application/json"),
           (b"content-length", str(len(ANSWER)).encode())]


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
    more = True
    while more:
        message = await receive()
        more = message.get("more_body", False)
    await send({"type": "http.response.start", "status": 200, "headers": HEADERS})
    await send({"type": "http.response.body", "body": ANSWER})
