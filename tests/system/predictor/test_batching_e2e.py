"""Overload, deadlines, bisection, OOM splitting and metrics against real processes."""

from __future__ import annotations

import concurrent.futures
import threading
from collections.abc import Callable
from pathlib import Path

import httpx

from tests.support import wait_for
from tests.support.predictor import RunningPredictor, push_fixed_latency


def _post(server: RunningPredictor, instances: list[object],
          headers: dict[str, str] | None = None) -> httpx.Response:
    return httpx.post(f"{server.url}/v1/models/{server.name}:predict",
                      json={"instances": instances}, headers=headers or {}, timeout=60)


def test_full_queue_is_refused_at_once_with_429_and_retry_after(
    start_predictor: Callable[..., RunningPredictor], registry_dir: Path
) -> None:
    push_fixed_latency(registry_dir, "overload", latency_ms=400, max_batch_size=4)
    server = start_predictor("overload", "latest", "--max_batch_size", "4",
                             "--max_queue_size", "8", "--max_batch_wait_ms", "1")
    with concurrent.futures.ThreadPoolExecutor(max_workers=40) as pool:
        responses = list(pool.map(lambda i: _post(server, [i]), range(40)))
    codes = [r.status_code for r in responses]
    assert set(codes) <= {200, 429}, codes
    assert codes.count(429) > 0 and codes.count(200) >= 8
    refused = [r for r in responses if r.status_code == 429]
    assert all(int(r.headers["retry-after"]) >= 1 for r in refused)
    # "At once": a refusal never waits for a batch, so it returns before any answer
    # that did (each of those took at least one 400 ms batch).
    fastest_ok = min(r.elapsed for r in responses if r.status_code == 200)
    assert all(r.elapsed < fastest_ok for r in refused)
    for i, r in enumerate(responses):
        if r.status_code == 200:
            assert r.json() == {"predictions": [i]}
    assert 'reason="queue_full"' in server.metrics()


def test_request_that_cannot_meet_its_deadline_is_refused_or_dropped(
    start_predictor: Callable[..., RunningPredictor], registry_dir: Path
) -> None:
    push_fixed_latency(registry_dir, "deadline", latency_ms=300, max_batch_size=2)
    server = start_predictor("deadline", "latest", "--max_batch_size", "2",
                             "--max_batch_wait_ms", "1")
    # Keep the device busy, then ask for an answer sooner than one batch can take.
    with concurrent.futures.ThreadPoolExecutor(max_workers=8) as pool:
        busy = [pool.submit(_post, server, [i]) for i in range(6)]
        wait_for(lambda: "modelctl_batch_size_count" in server.metrics(), timeout_s=10)
        hurried = _post(server, ["hurry"], headers={"x-request-timeout-ms": "100"})
        assert all(f.result().status_code == 200 for f in busy)
    assert hurried.status_code in (429, 503), hurried.text
    assert "deadline" in hurried.json()["error"]
    assert _post(server, ["relaxed"]).status_code == 200


def test_poison_item_fails_only_its_own_request(
    start_predictor: Callable[..., RunningPredictor], registry_dir: Path
) -> None:
    push_fixed_latency(registry_dir, "bisect", latency_ms=50, max_batch_size=64)
    server = start_predictor("bisect", "latest", "--max_batch_size", "64",
                             "--max_batch_wait_ms", "100")
    barrier = threading.Barrier(17)

    def send(i: int) -> httpx.Response:
        barrier.wait()
        return _post(server, [{"poison": True}] if i == 7 else [f"item-{i}"])

    with concurrent.futures.ThreadPoolExecutor(max_workers=17) as pool:
        futures = [pool.submit(send, i) for i in range(16)]
        barrier.wait()
        responses = [f.result() for f in futures]
    for i, r in enumerate(responses):
        if i == 7:
            assert r.status_code == 400, r.text
            assert "PoisonItemError" in r.json()["error"]
        else:
            assert r.status_code == 200, r.text
            assert r.json() == {"predictions": [f"item-{i}"]}


def test_simulated_oom_splits_batches_and_lowers_the_cap(
    start_predictor: Callable[..., RunningPredictor], registry_dir: Path
) -> None:
    push_fixed_latency(registry_dir, "oom", latency_ms=20, max_batch_size=64, oom_above=4)
    server = start_predictor("oom", "latest", "--max_batch_size", "32",
                             "--max_batch_wait_ms", "100")
    r = _post(server, [f"x{i}" for i in range(20)])
    assert r.status_code == 200, r.text
    assert r.json()["predictions"] == [f"x{i}" for i in range(20)]
    cap_line = next(line for line in server.metrics().splitlines()
                    if line.startswith("modelctl_batch_cap{"))
    assert float(cap_line.rsplit(" ", 1)[1]) <= 4


def test_injected_errors_and_metric_labels(
    start_predictor: Callable[..., RunningPredictor], registry_dir: Path
) -> None:
    version = push_fixed_latency(registry_dir, "flaky", latency_ms=5, max_batch_size=100)
    server = start_predictor("flaky", "latest", "--inject_error_rate", "0.5", "--role", "canary")
    codes = [_post(server, [i]).status_code for i in range(40)]
    assert set(codes) == {200, 500}
    metrics = server.metrics()
    assert (f'modelctl_requests_total{{code="500",model="flaky",role="canary",'
            f'version="{version}"}}') in metrics
