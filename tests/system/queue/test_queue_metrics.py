"""A queue worker's batch metrics are the in-process ones, expiries included.

The worker has its own batcher (not the model's), so its expired items were once not
counted. Here its latency model is wrong on purpose: ``--inject_latency_ms`` is added to
every batch but not to the warm-up batch it learns from, so the worker admits requests
that then wait past their deadline behind the first batch and expire in its queue.
"""

from __future__ import annotations

import concurrent.futures
import re
from collections.abc import Callable
from pathlib import Path

import httpx

from tests.support import wait_for
from tests.support.predictor import RunningPredictor, push_fixed_latency
from tests.support.redis import RedisServer

NAME = "queue-metrics"


def _expired(metrics: str) -> float:
    found = re.findall(r'^modelctl_items_expired_total\{[^}]*role="stable"[^}]*\} (\S+)$',
                       metrics, flags=re.MULTILINE)
    return sum(float(v) for v in found)


def test_a_workers_expired_items_are_counted(
        start_predictor: Callable[..., RunningPredictor], registry_dir: Path,
        redis_server: RedisServer) -> None:
    push_fixed_latency(registry_dir, NAME, latency_ms=1, max_batch_size=1)
    common = ("--queue_url", redis_server.url, "--max_batch_size", "1",
              "--max_batch_wait_ms", "1")
    frontend = start_predictor(NAME, "latest", *common, "--queue_role", "frontend")
    worker = start_predictor(NAME, "latest", *common, "--queue_role", "worker",
                             "--inject_latency_ms", "600")
    assert _expired(httpx.get(f"{worker.url}/metrics", timeout=10).text) == 0

    def post(i: int) -> httpx.Response:
        return httpx.post(f"{frontend.url}/v1/models/{NAME}:predict",
                          json={"instances": [i]}, headers={"x-request-timeout-ms": "300"},
                          timeout=30)

    with concurrent.futures.ThreadPoolExecutor(max_workers=4) as pool:
        responses = list(pool.map(post, range(4)))
    codes = [r.status_code for r in responses]
    # Each request is answered once: its result, or 429 when its deadline passed.
    assert set(codes) <= {200, 429} and 429 in codes, codes
    wait_for(lambda: _expired(httpx.get(f"{worker.url}/metrics", timeout=10).text) >= 1,
             timeout_s=20, what="the worker's modelctl_items_expired_total to count")
    assert post(99).status_code in (200, 429)  # and it keeps serving
