"""What a real predictor process writes per request: by default nothing for a fast 200
(no uvicorn access line, no ``kserve.trace`` line, no "grpc method" line), one line for
an error; with ``--request_log_sample 1`` one line per request."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import httpx
import numpy as np

from tests.support import wait_for
from tests.support.predictor import RunningPredictor, push_fixed_latency

REQUESTS = 30


def _send(server: RunningPredictor) -> None:
    for i in range(REQUESTS):
        assert server.v1([f"x{i}"]).status_code == 200
    missing = httpx.post(f"{server.url}/v1/models/nope:predict", json={"instances": [1]},
                         timeout=10)
    assert missing.status_code == 404


def _log(server: RunningPredictor) -> str:
    return server.proc.log_path.read_text(errors="replace")


def test_by_default_only_errors_get_a_line(
    start_predictor: Callable[..., RunningPredictor], registry_dir: Path
) -> None:
    import tritonclient.grpc as grpcclient

    push_fixed_latency(registry_dir, "quiet-log", latency_ms=1, max_batch_size=4)
    server = start_predictor("quiet-log", "latest", grpc=True)
    _send(server)
    client = grpcclient.InferenceServerClient(f"127.0.0.1:{server.grpc_port}")
    text = grpcclient.InferInput("input", [1], "BYTES")
    text.set_data_from_numpy(np.array([b"g"], dtype=np.object_))
    for _ in range(5):
        client.infer("quiet-log", [text])
    client.close()
    wait_for(lambda: "-> 404" in _log(server), timeout_s=10)
    log = _log(server)
    assert "POST /v1/models/nope:predict -> 404" in log
    assert "-> 200" not in log
    assert "kserve.trace" not in log and "predict_ms" not in log  # KServe's latency line
    assert '"POST /v1/models/quiet-log:predict HTTP/1.1" 200' not in log  # uvicorn access
    assert "grpc method" not in log


def test_a_sample_of_one_logs_every_request(
    start_predictor: Callable[..., RunningPredictor], registry_dir: Path
) -> None:
    push_fixed_latency(registry_dir, "loud-log", latency_ms=1, max_batch_size=4)
    server = start_predictor("loud-log", "latest", "--request_log_sample", "1")
    _send(server)
    wait_for(lambda: "-> 404" in _log(server), timeout_s=10)
    ok = [line for line in _log(server).splitlines()
          if "POST /v1/models/loud-log:predict -> 200 in" in line]
    assert len(ok) == REQUESTS
