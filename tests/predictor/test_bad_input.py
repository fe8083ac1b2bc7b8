"""Bad requests get a 400 (or 404/413) with KServe's error JSON, and serving goes on."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from tests.support.predictor import RunningPredictor, push_fixed_latency

JSON = {"content-type": "application/json"}


@pytest.fixture(scope="module")
def server(
    start_predictor: Callable[..., RunningPredictor], registry_dir: Path
) -> RunningPredictor:
    push_fixed_latency(registry_dir, "bad-input", latency_ms=5, max_batch_size=100)
    return start_predictor("bad-input", "latest", "--max_instances", "8",
                           "--max_input_chars", "100", "--max_body_bytes", "20000")


@pytest.fixture(scope="module")
def embed_server(start_predictor: Callable[..., RunningPredictor]) -> RunningPredictor:
    return start_predictor("demo-embed", "stable", "--max_input_chars", "50")


V1 = "/v1/models/bad-input:predict"
V2 = "/v2/models/bad-input/infer"

CASES: list[tuple[str, str, bytes, dict[str, str], int, str]] = [
    ("malformed json", V1, b'{"instances": [', JSON, 400, "Unrecognized request format"),
    ("missing instances", V1, b'{"inputs": []}', JSON, 400, "missing \"instances\""),
    ("instances not a list", V1, b'{"instances": "x"}', JSON, 400, "list"),
    ("empty list", V1, b'{"instances": []}', JSON, 400, "empty"),
    ("too many instances", V1, b'{"instances": [1,2,3,4,5,6,7,8,9]}', JSON, 400,
     "the limit is 8"),
    ("text too long", V1, b'{"instances": ["' + b"x" * 150 + b'"]}', JSON, 400,
     "the limit is 100"),
    ("not an object", V1, b"[1, 2]", JSON, 400, "JSON object"),
    ("wrong content type", V1, b"instances=1", {"content-type": "text/plain"}, 400,
     "not JSON"),
    ("unknown field", V1, b'{"instances": [1], "extra": 1}', JSON, 400, "unknown fields"),
    ("v2 unknown input name", V2,
     b'{"inputs": [{"name": "nope", "datatype": "BYTES", "shape": [1], "data": ["a"]}]}',
     JSON, 400, "unknown input 'nope'"),
    ("v2 wrong shape", V2,
     b'{"inputs": [{"name": "input", "datatype": "BYTES", "shape": [3], "data": ["a"]}]}',
     JSON, 400, "holds 1 values"),
    ("v2 bad datatype", V2,
     b'{"inputs": [{"name": "input", "datatype": "TEXT", "shape": [1], "data": ["a"]}]}',
     JSON, 400, ""),
    ("v2 missing inputs", V2, b'{"instances": [1]}', JSON, 400, "InferenceRequest.inputs"),
    ("unknown model", "/v1/models/nope:predict", b'{"instances": [1]}', JSON, 404, "nope"),
    ("body over limit", V1, b'{"instances": ["' + b"y" * 30000 + b'"]}', JSON, 413,
     "exceeds the limit"),
    ("bad timeout header", V1, b'{"instances": [1]}', {**JSON, "x-request-timeout-ms": "soon"},
     400, "x-request-timeout-ms"),
]


@pytest.mark.parametrize(("path", "body", "headers", "status", "message"),
                         [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_request_is_refused_and_server_keeps_serving(
    server: RunningPredictor, path: str, body: bytes, headers: dict[str, str], status: int,
    message: str,
) -> None:
    r = httpx.post(server.url + path, content=body, headers=headers, timeout=10)
    assert r.status_code == status, r.text
    assert "error" in r.json()
    assert message in r.json()["error"]
    good = server.v1(["still fine"])
    assert good.status_code == 200
    assert good.json() == {"predictions": ["still fine"]}


@pytest.mark.parametrize(("instances", "message"), [
    ([42], "must be a string"),
    ([["nested", "list"]], "must be a string"),
    ([""], "empty string"),
    (["z" * 60], "the limit is 50"),
    ([{"text": "x", "bogus": 1}], "unknown keys"),
])
def test_text_models_refuse_wrong_types(embed_server: RunningPredictor, instances: list[object],
                                        message: str) -> None:
    r = embed_server.v1(instances)
    assert r.status_code == 400, r.text
    assert message in r.json()["error"]
    assert embed_server.v1(["ok"]).status_code == 200


def test_bad_requests_are_counted_as_4xx(server: RunningPredictor) -> None:
    httpx.post(server.url + V1, content=b"{", headers=JSON, timeout=10)
    metrics = server.metrics()
    assert 'modelctl_requests_total{code="400",model="bad-input"' in metrics
