"""End to end over HTTP and gRPC with the real embedding model (all-MiniLM-L6-v2)."""

from __future__ import annotations

import concurrent.futures
import math
import re
from collections.abc import Callable
from pathlib import Path

import httpx
import numpy as np
import pytest

from tests.support.predictor import RunningPredictor

TEXTS = ["the cat sat on the mat", "a completely different sentence about finance",
         "short", "Transformers batch requests onto the device."]


@pytest.fixture(scope="module")
def embed(start_predictor: Callable[..., RunningPredictor]) -> RunningPredictor:
    return start_predictor("demo-embed", "stable", "--max_batch_size", "32",
                           "--max_batch_wait_ms", "20", grpc=True)


@pytest.fixture(scope="module")
def reference(embed: RunningPredictor) -> Callable[[str], np.ndarray]:
    """Unbatched embeddings computed in this process from the same artifact."""
    from predictor import create_handler
    from predictor.handlers import RequestOptions

    handler = create_handler("feature-extraction", Path(embed.model_dir))
    handler.load()

    def one(text: str) -> np.ndarray:
        item = handler.parse(text, RequestOptions())
        return np.array(handler.run(handler.prepare([item]))[0])

    return one


def test_v1_predict_returns_normalised_embeddings_and_request_id(embed: RunningPredictor) -> None:
    r = embed.v1(TEXTS[:2], headers={"x-request-id": "req-123"})
    assert r.status_code == 200, r.text
    assert r.headers["x-request-id"] == "req-123"
    predictions = r.json()["predictions"]
    assert len(predictions) == 2
    assert all(len(p) == 384 for p in predictions)
    assert all(math.isclose(float(np.linalg.norm(p)), 1.0, rel_tol=1e-4) for p in predictions)


def test_request_id_is_generated_when_absent(embed: RunningPredictor) -> None:
    r = embed.v1(["hello"])
    assert r.status_code == 200
    assert re.fullmatch(r"[0-9a-f]{32}", r.headers["x-request-id"])


def test_v2_infer_matches_v1(embed: RunningPredictor) -> None:
    body = {"inputs": [{"name": "text", "datatype": "BYTES", "shape": [2], "data": TEXTS[:2]}]}
    r = httpx.post(f"{embed.url}/v2/models/demo-embed/infer", json=body, timeout=30)
    assert r.status_code == 200, r.text
    out = r.json()["outputs"][0]
    assert out["name"] == "embedding" and out["shape"] == [2, 384]
    v1 = embed.v1(TEXTS[:2]).json()["predictions"]
    np.testing.assert_allclose(np.array(out["data"]).reshape(2, 384), np.array(v1), atol=1e-5)


def test_v2_metadata_and_readiness(embed: RunningPredictor) -> None:
    meta = httpx.get(f"{embed.url}/v2/models/demo-embed", timeout=10).json()
    assert meta["inputs"] == [{"name": "text", "datatype": "BYTES", "shape": [-1]}]
    assert httpx.get(f"{embed.url}/v2/models/demo-embed/ready", timeout=10).status_code == 200
    assert httpx.get(f"{embed.url}/v2/health/live", timeout=10).status_code == 200


def test_tritonclient_http_and_grpc_agree_with_v1(embed: RunningPredictor) -> None:
    import tritonclient.grpc as grpcclient
    import tritonclient.http as httpclient

    expected = np.array(embed.v1(TEXTS).json()["predictions"])
    texts = np.array([t.encode() for t in TEXTS], dtype=np.object_)

    http = httpclient.InferenceServerClient(embed.url.removeprefix("http://"))
    inp = httpclient.InferInput("text", [len(TEXTS)], "BYTES")
    inp.set_data_from_numpy(texts, binary_data=False)
    result = http.infer("demo-embed", [inp])
    np.testing.assert_allclose(result.as_numpy("embedding"), expected, atol=1e-5)

    grpc = grpcclient.InferenceServerClient(f"127.0.0.1:{embed.grpc_port}")
    ginp = grpcclient.InferInput("text", [len(TEXTS)], "BYTES")
    ginp.set_data_from_numpy(texts)
    gresult = grpc.infer("demo-embed", [ginp])
    np.testing.assert_allclose(gresult.as_numpy("embedding"), expected, atol=1e-5)
    assert grpc.is_model_ready("demo-embed")


def test_200_concurrent_requests_each_get_their_own_unbatched_result(
    embed: RunningPredictor, reference: Callable[[str], np.ndarray]
) -> None:
    texts = [f"request number {i}: {'word ' * (i % 17)}end" for i in range(200)]

    def send(text: str) -> list[float]:
        r = httpx.post(f"{embed.url}/v1/models/demo-embed:predict",
                       json={"instances": [text]}, timeout=60)
        assert r.status_code == 200, r.text
        return r.json()["predictions"][0]  # type: ignore[no-any-return]

    with concurrent.futures.ThreadPoolExecutor(max_workers=64) as pool:
        results = list(pool.map(send, texts))
    for text, got in zip(texts, results, strict=True):
        np.testing.assert_allclose(np.array(got), reference(text), atol=2e-4)

    metrics = embed.metrics()
    # Some batch held more than one item: the +Inf count exceeds the count in bucket le=1.
    le1 = _sample(metrics, 'modelctl_batch_size_bucket', 'le="1.0"')
    total = _sample(metrics, 'modelctl_batch_size_count', "")
    assert total > le1, f"no batch larger than 1 formed: {le1} of {total} batches had size 1"


def _sample(metrics: str, name: str, label_fragment: str) -> float:
    for line in metrics.splitlines():
        if line.startswith(name) and label_fragment in line and 'role="stable"' in line:
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name}{{{label_fragment}}} not in /metrics")
