"""SIGTERM drains under load; a version that fails verification is never served."""

from __future__ import annotations

import concurrent.futures
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import httpx

from tests.support import wait_for
from tests.support.predictor import RunningPredictor, push_fixed_latency


def test_sigterm_under_load_answers_every_accepted_request(
    start_predictor: Callable[..., RunningPredictor], registry_dir: Path
) -> None:
    push_fixed_latency(registry_dir, "drain", latency_ms=100, max_batch_size=8)
    server = start_predictor("drain", "latest", "--max_batch_size", "8",
                             "--max_batch_wait_ms", "5")

    def send(i: int) -> tuple[int, object]:
        try:
            r = httpx.post(f"{server.url}/v1/models/drain:predict",
                           json={"instances": [i]}, timeout=30)
        except httpx.TransportError as exc:  # refused once the listener has closed
            return -1, type(exc).__name__
        return r.status_code, r.json()

    with concurrent.futures.ThreadPoolExecutor(max_workers=48) as pool:
        futures = [pool.submit(send, i) for i in range(48)]
        wait_for(lambda: "modelctl_batch_size_count" in server.metrics(), timeout_s=10)
        server.proc.signal(signal.SIGTERM)
        results = [f.result() for f in futures]
    assert server.proc.wait(timeout_s=30) == 0
    for i, (code, body) in enumerate(results):
        # Accepted requests are answered in full; the rest are refused, never lost.
        assert code in (200, 503, -1), (i, code, body)
        if code == 200:
            assert body == {"predictions": [i]}
    assert sum(1 for code, _ in results if code == 200) >= 8


def test_serve_refuses_a_version_whose_checksum_fails(
    registry_dir: Path, tmp_path: Path
) -> None:
    from registry import Registry

    version = push_fixed_latency(registry_dir, "tampered", latency_ms=1, max_batch_size=4)
    reg = Registry.open(str(registry_dir))
    model_dir = tmp_path / "m"
    reg.fetch("tampered", version, model_dir)
    (model_dir / "task.json").write_text('{"latency_ms": 2, "max_batch_size": 4}')
    proc = subprocess.run(
        [sys.executable, "-m", "predictor", "--model_name", "tampered", "--model_dir",
         str(model_dir), "--http_host", "127.0.0.1", "--enable_grpc", "false"],
        capture_output=True, text=True, timeout=60,
    )
    assert proc.returncode != 0
    assert "task.json" in proc.stderr
    assert "refusing to load" in proc.stderr


def test_classification_and_generation_serve(
    start_predictor: Callable[..., RunningPredictor]
) -> None:
    cls = start_predictor("demo-classify", "stable")
    r = httpx.post(f"{cls.url}/v1/models/demo-classify:predict", timeout=30,
                   json={"instances": ["good", "bad"], "parameters": {"return_all_scores": True}})
    assert r.status_code == 200, r.text
    for p in r.json()["predictions"]:
        assert p["label"] in {"negative", "neutral", "positive"}
        assert abs(sum(p["scores"].values()) - 1.0) < 1e-4
    cls.proc.stop()

    gen = start_predictor("demo-generate", "stable")
    body = {"instances": [{"text": "hello there", "max_new_tokens": 4},
                          {"text": "a longer prompt about batching", "max_new_tokens": 2}]}
    r = httpx.post(f"{gen.url}/v1/models/demo-generate:predict", json=body, timeout=60)
    assert r.status_code == 200, r.text
    outs = r.json()["predictions"]
    assert len(outs) == 2 and all(isinstance(o, str) for o in outs)
    seeded = {"instances": [{"text": "once", "do_sample": True, "seed": 7, "max_new_tokens": 5}]}
    a = httpx.post(f"{gen.url}/v1/models/demo-generate:predict", json=seeded, timeout=60).json()
    b = httpx.post(f"{gen.url}/v1/models/demo-generate:predict", json=seeded, timeout=60).json()
    assert a == b
    gen.proc.stop()
