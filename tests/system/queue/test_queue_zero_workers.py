"""Workers scaled to zero: the frontend stays ready, a request waits for a worker to
start within its deadline, and one that cannot wait that long gets 429 with a
Retry-After sized to the start-up time the workers published."""

from __future__ import annotations

import json
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path

import httpx

from tests.support import wait_for
from tests.support.predictor import RunningPredictor, push_fixed_latency
from tests.support.redis import RedisServer

NAME = "queue-zero"


def test_with_no_worker_the_frontend_is_ready_and_requests_wait_or_get_429(
        start_predictor: Callable[..., RunningPredictor], registry_dir: Path,
        redis_server: RedisServer) -> None:
    push_fixed_latency(registry_dir, NAME, latency_ms=5, max_batch_size=8)
    common = ("--queue_url", redis_server.url, "--request_timeout_ms", "60000")
    frontend = start_predictor(NAME, "latest", *common, "--queue_role", "frontend")
    assert httpx.get(f"{frontend.url}/v2/health/ready", timeout=10).status_code == 200
    url = f"{frontend.url}/v1/models/{NAME}:predict"
    version = json.loads((frontend.model_dir / "MANIFEST.json").read_text())["version"]
    keys = f"modelctl:{{{NAME}:{version}}}"
    client = redis_server.client()

    # No worker has ever run: the request is held, and answered once one starts.
    box: list[httpx.Response] = []
    waiting = threading.Thread(target=lambda: box.append(httpx.post(
        url, json={"instances": ["held"]}, timeout=90)), daemon=True)
    waiting.start()
    wait_for(lambda: client.exists(f"{keys}:requests") and client.xlen(f"{keys}:requests"),
             timeout_s=10, what="the request on the stream before any worker exists")
    assert not box
    worker = start_predictor(NAME, "latest", *common, "--queue_role", "worker")
    waiting.join(timeout=60)
    assert box and box[0].status_code == 200 and box[0].json() == {"predictions": ["held"]}

    # The worker dies without saying goodbye (its info stays, and goes stale): the next
    # request that cannot wait for a start-up is refused at once, told when to retry.
    info = client.hgetall(f"{keys}:workers")
    [published] = [json.loads(v) for v in info.values()]
    worker.proc.signal(signal.SIGKILL)
    wait_for(lambda: worker.proc.poll() is not None, timeout_s=10, what="the kill")
    stale_at = published["updated_s"] + 10.0  # _backpressure.STALE_AFTER_S

    def refused() -> httpx.Response | None:
        if time.time() < stale_at:
            return None
        r = httpx.post(url, json={"instances": ["hurry"]},
                       headers={"x-request-timeout-ms": "500"}, timeout=10)
        return r if r.status_code == 429 else None

    r = wait_for(refused, timeout_s=40, interval_s=0.5, what="a 429 once the worker is stale")
    assert "deadline" in r.json()["error"]
    assert int(r.headers["retry-after"]) >= max(1, int(published["startup_s"]) - 1)
    assert httpx.get(f"{frontend.url}/v2/health/ready", timeout=10).status_code == 200
