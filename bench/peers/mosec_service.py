"""Peer 4: Mosec (a Rust HTTP server and batcher feeding Python worker processes), as
Mosec's own examples set it up (``examples/embedding/server.py``, ``examples/echo.py``).

One ``Server`` with one stage: ``append_worker(BenchWorker, num=1,
max_batch_size=..., max_wait_time=...)``. Mosec's Rust side parses HTTP, queues each
request as one task and hands the worker process a list of up to ``max_batch_size``
deserialised bodies once it has that many or the oldest has waited ``max_wait_time``
ms; the worker runs them as one batch of the shared model and answers each. Mosec's
default (de)serialisation is JSON; a request is a V1 body (``{"instances": [...]}``)
and its instances join the batch together. Its batch counts come from Mosec's own
Prometheus histogram ``mosec_service_batch_size`` on ``/metrics`` (``src/metrics.rs``).

    BENCH_PEER_WORKLOAD=fixed-latency BENCH_PEER_MAX_WAIT_MS=50 \\
        bench/.venv-peers/bin/python -m bench.peers.mosec_service \\
        --address 127.0.0.1 --port 8000 --timeout 30000

Mosec parses the command line itself (``mosec/args.py``), so this module's settings
come from the environment, as ``bento_service``'s do: ``BENCH_PEER_WORKLOAD``,
``BENCH_PEER_MODEL_DIR``, ``BENCH_PEER_LATENCY_MS``, ``BENCH_PEER_DEVICE``,
``BENCH_PEER_MAX_BATCH_SIZE`` (100) and ``BENCH_PEER_MAX_WAIT_MS`` (Mosec's own
``max_wait_time``, default 50 here: issue 9's common setting; Mosec's is 10).
"""

from __future__ import annotations

import os
from typing import Any

from mosec import Server, Worker

from bench.peers._workloads import build_model


class BenchWorker(Worker):  # type: ignore[misc]  # mosec ships no type stubs
    """The shared model behind Mosec's batcher; built in the worker process."""

    def __init__(self) -> None:
        super().__init__()
        self.model = build_model(
            os.environ["BENCH_PEER_WORKLOAD"], model_dir=os.environ.get("BENCH_PEER_MODEL_DIR", ""),
            latency_ms=float(os.environ.get("BENCH_PEER_LATENCY_MS", "100")),
            max_batch_size=int(os.environ.get("BENCH_PEER_MAX_BATCH_SIZE", "100")),
            device=os.environ.get("BENCH_PEER_DEVICE", "auto"))

    def forward(self, data: list[Any]) -> list[Any]:
        sizes = [len(body["instances"]) for body in data]
        results = self.model.run([x for body in data for x in body["instances"]])
        out, start = [], 0
        for size in sizes:
            out.append({"predictions": results[start:start + size]})
            start += size
        return out


def main() -> None:
    server = Server()
    server.append_worker(BenchWorker, num=1,
                         max_batch_size=int(os.environ.get("BENCH_PEER_MAX_BATCH_SIZE", "100")),
                         max_wait_time=int(float(os.environ.get("BENCH_PEER_MAX_WAIT_MS", "50"))))
    server.run()


if __name__ == "__main__":
    main()
