"""The repository extension of a multi-model predictor, over HTTP and gRPC: the index,
and load and unload behind a bearer token; an unload waits for the requests in flight,
then gives the memory back."""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import psutil
import pytest

from tests.predictor.test_repository_routes import kserve_repository_request
from tests.support import wait_for
from tests.support.multi import TOKEN, Multi, fill_models_dir

MIB = 2**20


def test_load_and_unload_need_the_token_and_do_what_they_say(
        tmp_path: Path, start_multi: Callable[..., Multi]) -> None:
    models = fill_models_dir(tmp_path, {"a": {"latency_ms": 5, "hold_mb": 2},
                                        "b": {"latency_ms": 5, "hold_mb": 2}})
    multi = start_multi(models, "--memory_budget_mb", "20")
    for token in (None, "wrong-token-0123456789"):
        for action in ("load", "unload"):
            refused = multi.repository("a", action, token=token)
            assert refused.status_code == 401, refused.text
            assert refused.headers["www-authenticate"].startswith("Bearer")
            assert TOKEN not in refused.text
    assert multi.states() == {"a": "UNAVAILABLE", "b": "UNAVAILABLE"}
    loaded = multi.repository("a", "load")
    assert (loaded.status_code, loaded.json()) == (200, {"name": "a", "load": True})
    assert multi.states() == {"a": "READY", "b": "UNAVAILABLE"}
    ready = httpx.post(f"{multi.url}/v2/repository/index", json={"ready": True}, timeout=10)
    assert [row["name"] for row in ready.json()] == ["a"]
    bad = httpx.post(f"{multi.url}/v2/repository/index", content=b"{", timeout=10)
    assert bad.status_code == 400
    assert multi.repository("nope", "load").status_code == 404
    unloaded = multi.repository("a", "unload")
    assert (unloaded.status_code, unloaded.json()) == (200, {"name": "a", "unload": True})
    assert multi.index()["a"] | {"host_bytes": 0} == {
        "name": "a", "version": "1", "state": "UNAVAILABLE", "reason": "unloaded",
        "host_bytes": 0, "device_bytes": 0}
    # A model directory added while serving is found (KServe's agent writes them so).
    (models / "late").symlink_to(models / "b", target_is_directory=True)
    assert multi.v1("late", ["x"]).status_code == 200
    # And one removed leaves, resident or not (KServe's agent deletes the directory, then
    # calls unload without a token: 401, so the predictor must notice by itself).
    (models / "late").unlink()
    assert multi.repository("late", "unload", token=None).status_code == 401
    wait_for(lambda: "late" not in multi.index(), timeout_s=20, what="late to leave")
    assert multi.v1("late", ["x"]).status_code == 404
    assert multi.metric("modelctl_model_evictions_total", model="late", reason="removed") == 1


def test_without_a_token_file_load_and_unload_are_refused(
        tmp_path: Path, start_multi: Callable[..., Multi]) -> None:
    models = fill_models_dir(tmp_path, {"a": {"latency_ms": 5}})
    multi = start_multi(models, "--memory_budget_mb", "20", token=False)
    for action in ("load", "unload"):
        refused = multi.repository("a", action)
        assert refused.status_code == 403 and "--repository_token_file" in refused.text
    assert multi.v1("a", ["x"]).status_code == 200  # on demand still works


def test_an_unload_lets_requests_in_flight_finish_then_frees_the_memory(
        tmp_path: Path, start_multi: Callable[..., Multi]) -> None:
    models = fill_models_dir(tmp_path, {"big": {"latency_ms": 400, "hold_mb": 300,
                                                "max_batch_size": 4}})
    multi = start_multi(models, "--memory_budget_mb", "400")
    process = psutil.Process(multi.proc.popen.pid)
    before = process.memory_info().rss
    assert multi.v1("big", ["warm"]).status_code == 200
    loaded = process.memory_info().rss
    assert loaded - before > 250 * MIB
    with ThreadPoolExecutor(8) as pool:
        flying = [pool.submit(multi.v1, "big", [f"r{i}"]) for i in range(8)]
        time.sleep(0.2)  # in the batcher or on the device
        unloaded = multi.repository("big", "unload")
        replies = [f.result() for f in flying]
    assert unloaded.status_code == 200
    assert [r.status_code for r in replies] == [200] * 8
    assert [r.json()["predictions"] for r in replies] == [[f"r{i}"] for i in range(8)]
    assert multi.states() == {"big": "UNAVAILABLE"}
    after = process.memory_info().rss
    assert after < loaded - 250 * MIB, (before, loaded, after)  # given back to the system


def test_grpc_loads_on_demand_and_guards_the_repository(
        tmp_path: Path, start_multi: Callable[..., Multi]) -> None:
    import grpc
    import numpy as np
    import tritonclient.grpc as grpcclient

    models = fill_models_dir(tmp_path, {"g": {"latency_ms": 5, "output_prefix": "g:"}})
    multi = start_multi(models, "--memory_budget_mb", "20", grpc=True)
    client = grpcclient.InferenceServerClient(f"127.0.0.1:{multi.grpc_port}")
    assert client.is_server_ready() and not client.is_model_ready("g")
    inp = grpcclient.InferInput("input", [1], "BYTES")
    inp.set_data_from_numpy(np.array([b"cold"], dtype=np.object_))
    result = client.infer("g", [inp])  # loads it first
    assert result.as_numpy("output").tolist() == [b"g:cold"]
    assert client.is_model_ready("g")
    client.close()
    with grpc.insecure_channel(f"127.0.0.1:{multi.grpc_port}") as channel:
        unload = channel.unary_unary("/inference.GRPCInferenceService/RepositoryModelUnload")
        for metadata in ((), (("authorization", "Bearer wrong-token-0123456789"),)):
            with pytest.raises(grpc.RpcError) as refused:
                unload(kserve_repository_request("g"), timeout=10, metadata=metadata)
            assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
        assert multi.states() == {"g": "READY"}
        unload(kserve_repository_request("g"), timeout=10,
               metadata=(("authorization", f"Bearer {TOKEN}"),))
        assert multi.states() == {"g": "UNAVAILABLE"}
        load = channel.unary_unary("/inference.GRPCInferenceService/RepositoryModelLoad")
        load(kserve_repository_request("g"), timeout=10,
             metadata=(("authorization", f"Bearer {TOKEN}"),))
        assert multi.states() == {"g": "READY"}


def test_a_newer_version_loads_beside_the_old_one_which_serves_until_it_is_ready(
        tmp_path: Path, start_multi: Callable[..., Multi]) -> None:
    from registry import Registry

    models = fill_models_dir(tmp_path, {"r": {"latency_ms": 300, "output_prefix": "v1:",
                                              "max_batch_size": 8}})
    multi = start_multi(models, "--memory_budget_mb", "20")
    assert multi.v1("r", ["x"]).json() == {"predictions": ["v1:x"]}
    # KServe's agent would download the new version into the model's directory.
    src = tmp_path / "src-v2"
    src.mkdir()
    (src / "task.json").write_text('{"latency_ms": 1, "output_prefix": "v2:", "load_ms": 500}')
    registry = Registry.open(str(tmp_path / "registry"))
    version = registry.push(src, "r", "fixed-latency").version
    registry.fetch("r", version, tmp_path / "r-v2")
    (models / "r").rename(tmp_path / "r-v1")
    (tmp_path / "r-v2").rename(models / "r")
    with ThreadPoolExecutor(6) as pool:
        flying = [pool.submit(multi.v1, "r", [f"old{i}"]) for i in range(4)]
        time.sleep(0.1)
        reloading = pool.submit(multi.repository, "r", "load")
        time.sleep(0.2)  # the new version is loading: requests keep going to the old one
        during = multi.v1("r", ["during"])
        assert reloading.result().status_code == 200
        old = [f.result() for f in flying]
    assert [r.json()["predictions"] for r in old] == [[f"v1:old{i}"] for i in range(4)]
    assert during.json() == {"predictions": ["v1:during"]}
    assert multi.v1("r", ["after"]).json() == {"predictions": ["v2:after"]}
    assert multi.index()["r"]["version"] == str(version)
    assert multi.metric("modelctl_requests_total", model="r", version=str(version),
                        code="200") == 1


def test_each_model_answers_for_its_own_version_resident_or_not(
        tmp_path: Path, start_multi: Callable[..., Multi]) -> None:
    models = fill_models_dir(tmp_path, {"a": {"latency_ms": 5}, "b": {"latency_ms": 5}})
    multi = start_multi(models, "--memory_budget_mb", "20")
    base = f"{multi.url}/v2/models"
    cold = httpx.get(f"{base}/a/versions/1/ready", timeout=10)
    assert cold.status_code == 503, cold.text  # its version, not resident: KServe's answer
    assert httpx.get(f"{base}/a/versions/2/ready", timeout=10).status_code == 404
    body = {"inputs": [{"name": "input", "datatype": "BYTES", "shape": [1], "data": ["x"]}]}
    served = httpx.post(f"{base}/a/versions/1/infer", json=body, timeout=30)
    assert served.status_code == 200 and served.json()["model_version"] == "1", served.text
    assert httpx.get(f"{base}/a/versions/1", timeout=10).json()["versions"] == ["1"]
    other = httpx.post(f"{base}/b/infer?model_version=7", json=body, timeout=30)
    assert other.status_code == 404 and "serves version 1" in other.json()["error"]
    assert multi.states() == {"a": "READY", "b": "UNAVAILABLE"}  # the 404 loaded nothing
