"""KServe's model repository load and unload are refused, over HTTP and gRPC, and the
model keeps serving (before, one unauthenticated unload took it down for good)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from tests.support.predictor import RunningPredictor, push_fixed_latency


def assert_still_serving(server: RunningPredictor) -> None:
    assert httpx.get(f"{server.url}/v2/health/ready", timeout=10).status_code == 200
    assert httpx.get(f"{server.url}/v2/models/{server.name}/ready", timeout=10).status_code == 200
    r = server.v1(["still here"])
    assert r.status_code == 200, r.text
    assert r.json() == {"predictions": ["still here"]}


def test_http_load_and_unload_are_refused_and_the_model_keeps_serving(
    start_predictor: Callable[..., RunningPredictor], registry_dir: Path
) -> None:
    push_fixed_latency(registry_dir, "repo-http", latency_ms=1, max_batch_size=4)
    server = start_predictor("repo-http", "latest")
    # Unload first: before the fix it answered 200 and readiness went 503 for good.
    for name, action in [("repo-http", "unload"), ("repo-http", "load"),
                         ("repo-http", "unload"), ("another-model", "unload")]:
        r = httpx.post(f"{server.url}/v2/repository/models/{name}/{action}", timeout=10)
        assert r.status_code == 403, (action, r.status_code, r.text)
        assert r.headers["content-type"] == "application/json"
        error = r.json()["error"]
        assert f"model repository {action} is refused" in error
        assert_still_serving(server)
    # KServe 0.21 routes neither a V1 load (the path only matches GET /v1/models/{name})
    # nor the repository index.
    for path in ("/v1/models/repo-http:load", "/v1/models/repo-http:unload",
                 "/v2/repository/index"):
        assert httpx.post(f"{server.url}{path}", timeout=10).status_code in (404, 405), path
    assert_still_serving(server)


def kserve_repository_request(model_name: str) -> bytes:
    """KServe's Repository{Load,Unload}Request on the wire: field 1, model_name.

    tritonclient's request puts model_name in field 2 (field 1 is Triton's
    repository_name), so KServe reads an empty name from it; and KServe's own stubs
    cannot share a process with tritonclient's. Hence the bytes by hand.
    """
    name = model_name.encode()
    assert len(name) < 128  # one-byte varint length
    return b"\x0a" + bytes([len(name)]) + name


def test_grpc_load_and_unload_are_refused_and_the_model_keeps_serving(
    start_predictor: Callable[..., RunningPredictor], registry_dir: Path
) -> None:
    import grpc
    import numpy as np
    import tritonclient.grpc as grpcclient
    from tritonclient.utils import InferenceServerException

    push_fixed_latency(registry_dir, "repo-grpc", latency_ms=1, max_batch_size=4)
    server = start_predictor("repo-grpc", "latest", grpc=True)
    # In KServe's wire format, as a client built from KServe's proto sends it: before the
    # fix, unload answered INTERNAL yet unloaded the model (readiness 503 for good).
    with grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}") as channel:
        for method, action in [("RepositoryModelUnload", "unload"),
                               ("RepositoryModelLoad", "load")]:
            call = channel.unary_unary(f"/inference.GRPCInferenceService/{method}")
            with pytest.raises(grpc.RpcError) as raw:
                call(kserve_repository_request("repo-grpc"), timeout=10)
            assert raw.value.code() == grpc.StatusCode.PERMISSION_DENIED, raw.value
            assert f"model repository {action} is refused" in str(raw.value.details())
            assert_still_serving(server)
    client = grpcclient.InferenceServerClient(f"127.0.0.1:{server.grpc_port}")
    for call, action in [(client.unload_model, "unload"), (client.load_model, "load"),
                         (client.unload_model, "unload")]:
        with pytest.raises(InferenceServerException) as refused:
            call("repo-grpc")
        assert refused.value.status() == "StatusCode.PERMISSION_DENIED", refused.value
        assert f"model repository {action} is refused" in refused.value.message()
        assert client.is_server_ready() and client.is_model_ready("repo-grpc")
        inp = grpcclient.InferInput("input", [1], "BYTES")
        inp.set_data_from_numpy(np.array([b"over grpc"], dtype=np.object_))
        result = client.infer("repo-grpc", [inp])
        assert result.as_numpy("output").tolist() == [b"over grpc"]
        assert_still_serving(server)
    client.close()
