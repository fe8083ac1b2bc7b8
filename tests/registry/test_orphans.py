"""The aiohttp request writer that fails on a closed connection, unawaited, prints nothing
on s3fs's loop once an S3 registry is open; any other unretrieved exception still does.

The orphan is made as aiohttp makes it, deterministically: a real connection (aiohttp's
own protocol and writer), the request's headers buffered as ``ClientRequest.send``
buffers them for ``Expect: 100-continue``, the connection closed, then aiohttp's own
``ClientRequest.write_bytes`` run as a task and dropped. The reliability test
(``test_s3_killed_mid_push_leaves_nothing_and_a_retry_succeeds``) meets the same task
about one run in ten, when S3 restarts under a push.
"""

from __future__ import annotations

import asyncio
import gc
import logging

import pytest


async def _orphan_a_failed_writer() -> None:
    from aiohttp.client_proto import ResponseHandler
    from aiohttp.client_reqrep import ClientRequest
    from aiohttp.http_writer import StreamWriter
    from yarl import URL

    loop = asyncio.get_running_loop()
    server = await asyncio.start_server(lambda reader, writer: None, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    transport, protocol = await loop.create_connection(lambda: ResponseHandler(loop),
                                                       "127.0.0.1", port)
    request = ClientRequest("PUT", URL(f"http://127.0.0.1:{port}/bucket/part"), loop=loop,
                            data=b"x" * 1024, expect100=True)
    writer = StreamWriter(protocol, loop)
    await writer.write_headers("PUT /bucket/part HTTP/1.1", request.headers)

    class Connection:  # what write_bytes uses of aiohttp's Connection
        def __init__(self) -> None:
            self.protocol = protocol

        def close(self) -> None:
            transport.close()

    transport.close()
    await asyncio.sleep(0.05)  # the connection is lost, as when the server went away
    task = loop.create_task(request.write_bytes(writer, Connection()))
    await asyncio.sleep(0.05)
    assert task.done()  # failed; its exception is left unretrieved, as aiohttp leaves it
    del task
    gc.collect()
    server.close()


async def _orphan_another_failure() -> None:
    async def fails() -> None:
        raise ValueError("an unrelated bug")

    task = asyncio.get_running_loop().create_task(fails())
    await asyncio.sleep(0.01)
    del task
    gc.collect()


def _never_retrieved(caplog: pytest.LogCaptureFixture) -> list[str]:
    """The exception type of each "Task exception was never retrieved" asyncio logged."""
    return [r.exc_info[1].__class__.__name__ if r.exc_info and r.exc_info[1] else ""
            for r in caplog.records
            if r.name == "asyncio" and "never retrieved" in r.getMessage()]


def test_the_orphaned_writer_is_quiet_once_an_s3_registry_is_open(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    from fsspec.asyn import get_loop, sync

    from registry._s3_store import S3Store

    loop = get_loop()
    before = loop.get_exception_handler()
    try:
        loop.set_exception_handler(None)
        with caplog.at_level(logging.DEBUG):
            sync(loop, _orphan_a_failed_writer)
            # What the push printed before its one line:
            assert _never_retrieved(caplog) == ["ClientConnectionResetError"]
            caplog.clear()
            monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
            S3Store.from_url("s3://bucket/prefix")  # installs the handler on s3fs's loop
            installed = loop.get_exception_handler()
            S3Store.from_url("s3://bucket/other")
            assert installed is not None and loop.get_exception_handler() is installed
            sync(loop, _orphan_a_failed_writer)
            assert _never_retrieved(caplog) == []
            assert any("request writer failed" in r.getMessage() for r in caplog.records
                       if r.levelno == logging.DEBUG)
            sync(loop, _orphan_another_failure)
            assert _never_retrieved(caplog) == ["ValueError"]  # anything else still is
    finally:
        loop.set_exception_handler(before)
