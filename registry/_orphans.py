"""Quiet the one aiohttp task whose failure no one collects, on s3fs's event loop.

aiohttp's ``ClientRequest.write_bytes`` (aiohttp 3.14, ``client_reqrep.py``) runs as a
task of its own beside the response. With ``Expect: 100-continue``, which botocore sends
on uploads of a megabyte or more, it first calls ``writer.send_headers()``, *before* the
``try`` that hands an ``OSError`` to the connection's protocol; a connection the server
closed just then (S3 restarting, a pooled connection cut) fails the task with
``ClientConnectionResetError``, and nothing awaits it. The request itself fails on its
own (the response side sees the closed connection; botocore retries, then the registry
reports one line), so when the task is collected asyncio prints "Task exception was
never retrieved" and its traceback to stderr, before that line.

``quiet_orphaned_writes`` gives the loop an exception handler that logs exactly that
case at DEBUG and hands every other context to the handler it had (or asyncio's
default), so any other unretrieved exception is still reported.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

logger = logging.getLogger(__name__)
_WRITER = "ClientRequest.write_bytes"


def is_orphaned_write(context: dict[str, Any]) -> bool:
    """An aiohttp request writer that failed on a closed connection."""
    import aiohttp

    task = context.get("future")
    coro = task.get_coro() if isinstance(task, asyncio.Task) else None
    return (isinstance(context.get("exception"), aiohttp.ClientConnectionError)
            and getattr(coro, "__qualname__", "") == _WRITER)


def quiet_orphaned_writes(loop: asyncio.AbstractEventLoop) -> None:
    """Install the handler on ``loop`` once (s3fs shares one loop per process)."""
    previous = loop.get_exception_handler()
    if getattr(previous, "quiets_orphaned_writes", False):
        return

    def handler(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        if is_orphaned_write(context):
            logger.debug("aiohttp's request writer failed after its request did: %s",
                         context.get("exception"))
        elif previous is not None:
            previous(loop, context)
        else:
            loop.default_exception_handler(context)

    handler.quiets_orphaned_writes = True  # type: ignore[attr-defined]
    loop.set_exception_handler(handler)
