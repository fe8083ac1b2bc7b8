"""Peer 3: a BentoML service with an adaptive-batching API, as BentoML's docs show.

``predict`` is ``@bentoml.api(batchable=True, max_batch_size=..., max_latency_ms=...)``:
BentoML's dispatcher merges concurrent requests' ``instances`` lists along dimension
0, runs one batch at a time, and answers 503 for requests it predicts would miss
``max_latency_ms``. One worker (``workers=1``), the shared model. ``POST
/bench/stats`` answers the items and batches run so far.

    BENCH_PEER_WORKLOAD=fixed-latency BENCH_PEER_MAX_LATENCY_MS=200 \\
        bench/.venv-peers/bin/bentoml serve bench.peers.bento_service:BenchPeer \\
        --host 127.0.0.1 --port 3000

Configured from the environment, read when the module is imported: BentoML's worker
process imports the service by module path, and the decorator arguments are fixed
when the class is defined, so there is no later point to pass them in.

- ``BENCH_PEER_WORKLOAD``: ``fixed-latency`` or ``embedding``
- ``BENCH_PEER_MODEL_DIR``: the encoder's directory (embedding)
- ``BENCH_PEER_LATENCY_MS``: fixed-latency sleep per batch (default 100)
- ``BENCH_PEER_DEVICE``: ``auto``, ``cpu`` or ``cuda``
- ``BENCH_PEER_MAX_BATCH_SIZE`` (default 100), ``BENCH_PEER_MAX_LATENCY_MS`` (default 200)
"""

from __future__ import annotations

import os
from typing import Any

import bentoml

from bench.peers._workloads import BatchCounter, build_model

_ENV = os.environ
MAX_BATCH_SIZE = int(_ENV.get("BENCH_PEER_MAX_BATCH_SIZE", "100"))
MAX_LATENCY_MS = int(float(_ENV.get("BENCH_PEER_MAX_LATENCY_MS", "200")))


@bentoml.service(workers=1, traffic={"timeout": 60})
class BenchPeer:
    """The shared model behind one adaptive-batching API."""

    def __init__(self) -> None:
        self.model = build_model(
            _ENV.get("BENCH_PEER_WORKLOAD", "fixed-latency"),
            model_dir=_ENV.get("BENCH_PEER_MODEL_DIR", ""),
            latency_ms=float(_ENV.get("BENCH_PEER_LATENCY_MS", "100")),
            max_batch_size=MAX_BATCH_SIZE,
            device=_ENV.get("BENCH_PEER_DEVICE", "auto"),
        )
        self.counter = BatchCounter()

    @bentoml.api(route="/predict", batchable=True, max_batch_size=MAX_BATCH_SIZE,
                 max_latency_ms=MAX_LATENCY_MS)
    def predict(self, instances: list[Any]) -> list[Any]:
        results = self.model.run(instances)
        self.counter.record(len(instances))
        return results

    @bentoml.api(route="/bench/stats")
    def stats(self) -> dict[str, int]:
        return self.counter.snapshot()
