"""Peer 2: Ray Serve with ``@serve.batch`` (one replica), as Ray's batching guide shows.

One deployment, one replica, ``max_ongoing_requests`` high enough for batches to
form (Ray asks for at least ``max_batch_size * max_concurrent_batches``). Each V1
instance is one call of the ``@serve.batch`` method, which runs the shared model
on a single-thread executor so that the replica's event loop keeps accepting
requests while a batch runs; ``max_concurrent_batches=1`` (Ray's default) keeps
one batch on the device at a time. ``POST /bench/stats`` answers the items and
batches run so far.

    bench/.venv-peers/bin/python -m bench.peers.ray_serve --workload fixed-latency \\
        --http_port 8000 --batch_wait_timeout_s 0.05

Runs in the peers' virtualenv (``bench/peers/setup.sh``) with the repository root on
``PYTHONPATH`` (Ray's worker processes import ``bench.peers`` too). SIGTERM shuts
Serve and the local Ray cluster down.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from bench.peers._workloads import WORKLOADS, BatchCounter, build_model


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--workload", choices=WORKLOADS, required=True)
    parser.add_argument("--model_dir", default="")
    parser.add_argument("--latency_ms", type=float, default=100.0)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--http_host", default="127.0.0.1")
    parser.add_argument("--http_port", type=int, default=8000)
    parser.add_argument("--max_batch_size", type=int, default=100)
    parser.add_argument("--batch_wait_timeout_s", type=float, default=0.05)
    parser.add_argument("--max_ongoing_requests", type=int, default=1000)
    return parser.parse_args(argv)


def build_app(args: argparse.Namespace) -> Any:
    """The bound Serve application for these settings."""
    from ray import serve
    from starlette.requests import Request

    @serve.deployment(num_replicas=1, max_ongoing_requests=args.max_ongoing_requests,
                      ray_actor_options={"num_cpus": 0})
    class BatchedModel:
        def __init__(self, workload: str, model_dir: str, latency_ms: float, device: str,
                     max_batch_size: int) -> None:
            self.model = build_model(workload, model_dir=model_dir, latency_ms=latency_ms,
                                     max_batch_size=max_batch_size, device=device)
            self.counter = BatchCounter()
            self.device = ThreadPoolExecutor(max_workers=1, thread_name_prefix="device")

        def _run(self, items: list[Any]) -> list[Any]:
            results = self.model.run(items)
            self.counter.record(len(items))
            return results

        @serve.batch(max_batch_size=args.max_batch_size,
                     batch_wait_timeout_s=args.batch_wait_timeout_s, max_concurrent_batches=1)
        async def predict_batch(self, items: list[Any]) -> list[Any]:
            return await asyncio.get_running_loop().run_in_executor(self.device, self._run, items)

        async def __call__(self, request: Request) -> dict[str, Any]:
            if request.url.path.endswith("/bench/stats"):
                return self.counter.snapshot()
            body = await request.json()
            predictions = await asyncio.gather(
                *(self.predict_batch(item) for item in body["instances"]))
            return {"predictions": list(predictions)}

    return BatchedModel.bind(  # type: ignore[attr-defined]  # added by @serve.deployment
        args.workload, args.model_dir, args.latency_ms, args.device, args.max_batch_size)


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    import ray
    from ray import serve

    ray.init(include_dashboard=False, logging_level="WARNING", log_to_driver=False)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda signum, frame: stop.set())
    try:
        serve.start(http_options={"host": args.http_host, "port": args.http_port})
        serve.run(build_app(args), name="bench", route_prefix="/")
        print(f"ray serve ready on http://{args.http_host}:{args.http_port}", flush=True)
        stop.wait()
    finally:
        serve.shutdown()
        ray.shutdown()


if __name__ == "__main__":
    main()
