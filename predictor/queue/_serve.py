"""The worker process: load the model, serve health and /metrics only, run the worker.

No predict endpoint: a request sent to a worker gets 404 with a message naming the
frontends. SIGTERM stops reading, finishes and acknowledges what is in hand, then exits.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import time
from collections.abc import Callable, Iterator
from typing import Any, Protocol

import orjson

from predictor._config import ServerConfig
from predictor.queue._client import connect, shown
from predictor.queue._keys import QueueKeys
from predictor.queue._worker import QueueWorker

logger = logging.getLogger("predictor.queue")


def consumer_name() -> str:
    """Unique per process: host, PID and a random tail (a restarted PID is a new consumer)."""
    return f"{socket.gethostname()}-{os.getpid()}-{os.urandom(3).hex()}"


class Worker(Protocol):
    """What the worker process runs: ``QueueWorker``, or an LLM's ``LLMQueueWorker``."""

    config: ServerConfig
    is_ready: bool

    async def start(self) -> None: ...

    async def stop(self, timeout_s: float) -> None: ...


# (Redis client, queue keys, consumer name, start-up seconds) -> the worker to run.
MakeWorker = Callable[[Any, QueueKeys, str, float], Worker]


class WorkerApp:
    """ASGI: /v2/health/live, /v2/health/ready, /metrics; 404 for anything else."""

    def __init__(self, worker: Worker) -> None:
        self.worker = worker

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        path = scope.get("path", "")
        status, body, kind = 404, orjson.dumps({"error": (
            "this is a queue worker: it serves no predict endpoint; send requests to a "
            "frontend (--queue_role frontend)")}), b"application/json"
        if path == "/v2/health/live":
            status, body = 200, orjson.dumps({"live": True})
        elif path in ("/v2/health/ready", f"/v2/models/{self.worker.config.model_name}/ready"):
            ready = self.worker.is_ready
            status, body = (200 if ready else 503), orjson.dumps({"ready": ready})
        elif path == "/metrics":
            from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest

            status, body, kind = 200, generate_latest(REGISTRY), CONTENT_TYPE_LATEST.encode()
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", kind),
                                (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})


def serve_worker(config: ServerConfig, model: Any) -> int:
    """Run the worker until SIGTERM; ``model`` is a loaded ``BatchingModel``."""
    return run_worker(config, model.version, lambda client, keys, consumer, startup_s:
                      QueueWorker(model, client, keys, consumer, startup_s=startup_s))


def run_worker(config: ServerConfig, version: str, make: MakeWorker) -> int:
    """Run the worker ``make`` builds until SIGTERM; the process exit code."""
    import uvloop

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(_run(config, version, make))


async def _run(config: ServerConfig, version: str, make: MakeWorker) -> int:
    import psutil
    import uvicorn

    startup_s = max(0.0, time.time() - psutil.Process().create_time())
    client = connect(config.queue_url, socket_timeout_s=5.0)
    worker = make(client, QueueKeys(config.model_name, version), consumer_name(), startup_s)
    logger.info("worker on %s", shown(config.queue_url))
    await worker.start()

    class Server(uvicorn.Server):
        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            yield  # SIGTERM is ours: drain the worker first, then stop serving

    server = Server(uvicorn.Config(WorkerApp(worker), host=config.http_host,
                                   port=config.http_port, lifespan="off", log_level="warning",
                                   access_log=False))
    loop = asyncio.get_running_loop()
    stopping: list[asyncio.Task[None]] = []

    async def stop() -> None:
        logger.info("SIGTERM: the worker stops reading")
        await worker.stop(config.drain_timeout_s)
        server.should_exit = True

    def on_signal() -> None:
        if not stopping:
            stopping.append(loop.create_task(stop()))

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal)
    logger.info("serving health and metrics of %s on http://%s:%d", config.model_name,
                config.http_host, config.http_port)
    await server.serve()
    if stopping:
        await stopping[0]
    with contextlib.suppress(Exception):
        await client.aclose()
    return 0
