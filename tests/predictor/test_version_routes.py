"""The Open Inference Protocol's version routes answer for the registry version served
and 404 for any other, over HTTP (tritonclient, and the ``?model_version=`` query KServe's
handlers take) and gRPC (tritonclient), where KServe answered 501 or ignored the version."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import httpx
import numpy as np
import pytest

from tests.support.predictor import RunningPredictor, push_fixed_latency

MODEL = "versioned"


@pytest.fixture(scope="module")
def server(start_predictor: Callable[..., RunningPredictor],
           registry_dir: Path) -> tuple[RunningPredictor, str]:
    push_fixed_latency(registry_dir, MODEL, latency_ms=1, max_batch_size=4)
    version = str(push_fixed_latency(registry_dir, MODEL, latency_ms=2, max_batch_size=4))
    assert version != "1"  # a second version, so "1" names one the registry has, not served
    return start_predictor(MODEL, "latest", grpc=True), version


def _v2_body(text: str) -> dict[str, object]:
    return {"inputs": [{"name": "input", "datatype": "BYTES", "shape": [1], "data": [text]}]}


def test_http_version_routes_answer_for_the_version_served(
        server: tuple[RunningPredictor, str]) -> None:
    import tritonclient.http as httpclient

    predictor, version = server
    client = httpclient.InferenceServerClient(predictor.url.removeprefix("http://"))
    metadata = client.get_model_metadata(MODEL, model_version=version)
    assert metadata["name"] == MODEL and metadata["versions"] == [version]
    assert client.get_model_metadata(MODEL)["versions"] == [version]
    assert client.is_model_ready(MODEL, model_version=version)
    inp = httpclient.InferInput("input", [1], "BYTES")
    inp.set_data_from_numpy(np.array([b"versioned"], dtype=np.object_), binary_data=False)
    result = client.infer(MODEL, [inp], model_version=version)
    assert result.get_response()["model_version"] == version
    assert not client.is_model_ready(MODEL, model_version="1")  # 404: not the one served

    base = f"{predictor.url}/v2/models/{MODEL}"
    for method, path, body in [("GET", f"/versions/{version}", None),
                               ("GET", f"/versions/{version}/ready", None),
                               ("POST", f"/versions/{version}/infer", _v2_body("a")),
                               ("GET", f"?model_version={version}", None),
                               ("GET", f"/ready?model_version={version}", None),
                               ("POST", f"/infer?model_version={version}", _v2_body("b"))]:
        reply = httpx.request(method, base + path, json=body, timeout=30)
        assert reply.status_code == 200, (path, reply.text)
    for method, path, body in [("GET", "/versions/1", None),
                               ("GET", "/versions/99/ready", None),
                               ("POST", "/versions/1/infer", _v2_body("c")),
                               ("GET", "?model_version=1", None),
                               ("POST", "/infer?model_version=zz", _v2_body("d")),
                               ("GET", f"/versions/{version}?model_version=1", None)]:
        reply = httpx.request(method, base + path, json=body, timeout=30)
        assert reply.status_code == 404, (path, reply.text)
        assert f"serves version {version}" in reply.json()["error"], reply.text
    unknown = httpx.get(f"{predictor.url}/v2/models/nope/versions/1", timeout=10)
    assert unknown.status_code == 404 and "nope" in unknown.json()["error"]


def test_grpc_requests_naming_a_version_are_checked(server: tuple[RunningPredictor, str]) -> None:
    import tritonclient.grpc as grpcclient
    from tritonclient.utils import InferenceServerException

    predictor, version = server
    client = grpcclient.InferenceServerClient(f"127.0.0.1:{predictor.grpc_port}")
    assert client.is_model_ready(MODEL, model_version=version)
    assert list(client.get_model_metadata(MODEL, model_version=version).versions) == [version]
    inp = grpcclient.InferInput("input", [1], "BYTES")
    inp.set_data_from_numpy(np.array([b"over grpc"], dtype=np.object_))
    assert client.infer(MODEL, [inp], model_version=version).as_numpy("output") is not None
    for call in (lambda: client.get_model_metadata(MODEL, model_version="1"),
                 lambda: client.is_model_ready(MODEL, model_version="1"),
                 lambda: client.infer(MODEL, [inp], model_version="1")):
        with pytest.raises(InferenceServerException) as refused:
            call()
        assert refused.value.status() == "StatusCode.NOT_FOUND", refused.value
        assert f"serves version {version}" in refused.value.message()
    assert client.is_model_ready(MODEL)  # and it keeps serving
