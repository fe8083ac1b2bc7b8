"""Peer 1: a plain KServe custom predictor, without batching (what KServe users get today).

A ``kserve.Model`` whose ``predict`` runs one item per forward pass, one at a time:
items go through a single-thread executor (the "device"), so the event loop stays
free to accept requests while the model works, as the KServe custom-predictor docs
show for an async ``predict``. One process, KServe's own ``ModelServer`` on
``/v1/models/NAME:predict``; only its REST server is bound to ``--http_host``
(the stock one always binds 0.0.0.0). ``POST /bench/stats`` answers the items and
batches run so far.

    python -m bench.peers.kserve_plain --model_name bench --workload fixed-latency \\
        --http_host 127.0.0.1 --http_port 8080 --enable_grpc false

Runs in the project's virtualenv (it has kserve). KServe parses ``--http_port``,
``--enable_grpc`` and its other flags from the same command line.
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from bench.peers._workloads import WORKLOADS, BatchCounter, BatchModel, build_model


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--model_name", default="bench")
    parser.add_argument("--workload", choices=WORKLOADS, required=True)
    parser.add_argument("--model_dir", default="")
    parser.add_argument("--latency_ms", type=float, default=100.0)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--http_host", default="127.0.0.1")
    args, _kserve_flags = parser.parse_known_args(argv)
    return args


def _model_class() -> type[Any]:
    """Built on first use: importing kserve parses the command line."""
    import kserve

    class UnbatchedModel(kserve.Model):
        """Runs each instance alone through the model, one at a time."""

        def __init__(self, name: str, model: BatchModel, counter: BatchCounter) -> None:
            super().__init__(name)
            self._model = model
            self._counter = counter
            self._device = ThreadPoolExecutor(max_workers=1, thread_name_prefix="device")
            self.ready = True

        def _run_one(self, instance: Any) -> Any:
            result = self._model.run([instance])[0]
            self._counter.record(1)
            return result

        async def predict(self, payload: Any, headers: Any = None) -> dict[str, Any]:
            loop = asyncio.get_running_loop()
            predictions = []
            for instance in payload["instances"]:
                predictions.append(await loop.run_in_executor(self._device, self._run_one,
                                                              instance))
            return {"predictions": predictions}

    return UnbatchedModel


def _server_class() -> type[Any]:
    from kserve import ModelServer
    from kserve.constants.constants import FASTAPI_APP_IMPORT_STRING
    from kserve.protocol.rest.server import RESTServer

    class LoopbackModelServer(ModelServer):
        """KServe's single-process ModelServer.start, with the REST host configurable."""

        def __init__(self, host: str, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            self._host = host

        def start(self, models: list[Any]) -> None:
            self._register_and_check_atleast_one_model_is_ready(models)
            self._rest_server = RESTServer(
                FASTAPI_APP_IMPORT_STRING, self.dataplane, self.model_repository_extension,
                self.http_port, access_log_format=self.access_log_format, workers=1,
                grace_period=self.grace_period, event_loop=self.event_loop,
                timeout_keep_alive=self.timeout_keep_alive,
            )
            self._rest_server.config.host = self._host
            self.servers.append(self._rest_server.start())
            self.setup_event_loop()
            self.register_signal_handler()
            asyncio.run(self._serve())

    return LoopbackModelServer


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    counter = BatchCounter()
    model = build_model(args.workload, model_dir=args.model_dir, latency_ms=args.latency_ms,
                        device=args.device)
    from kserve.model_server import app

    async def stats() -> dict[str, int]:
        return counter.snapshot()

    app.add_api_route("/bench/stats", stats, methods=["GET", "POST"])
    server = _server_class()(args.http_host, enable_grpc=False, workers=1)
    server.start([_model_class()(args.model_name, model, counter)])


if __name__ == "__main__":
    main()
