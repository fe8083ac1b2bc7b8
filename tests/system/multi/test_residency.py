"""Many models on one predictor, loaded on demand, evicted least recently used: real
``python -m predictor --multi_model`` processes on model directories of verified
registry versions."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

from scripts.demo_models import build_classify, build_embed
from tests.support import wait_for
from tests.support.multi import Multi, fill_models_dir

MIB = 2**20


def test_eight_models_under_a_budget_for_three_in_lru_order(
        tmp_path: Path, start_multi: Callable[..., Multi]) -> None:
    names = [f"m{i}" for i in range(8)]
    models = fill_models_dir(tmp_path, {n: {"latency_ms": 5, "hold_mb": 10,
                                            "output_prefix": f"{n}:"} for n in names})
    multi = start_multi(models, "--memory_budget_mb", "35", "--min_residency_s", "0")
    assert set(multi.states().values()) == {"UNAVAILABLE"}
    assert {r["reason"] for r in multi.index().values()} == {"not loaded"}

    def ask(name: str) -> None:
        reply = multi.v1(name, [f"to {name}"])
        assert reply.status_code == 200, reply.text
        assert reply.json() == {"predictions": [f"{name}:to {name}"]}

    for name in names[:3]:
        ask(name)
    assert [n for n, s in multi.states().items() if s == "READY"] == ["m0", "m1", "m2"]
    ask("m3")  # m0 is the least recently used
    assert [n for n, s in multi.states().items() if s == "READY"] == ["m1", "m2", "m3"]
    assert multi.index()["m0"]["reason"] == "evicted (least recently used)"
    ask("m1")  # now m2 is the least recently used
    ask("m4")
    assert [n for n, s in multi.states().items() if s == "READY"] == ["m1", "m3", "m4"]
    for name in [*names[5:], "m0"]:
        ask(name)
    index = multi.index()
    assert sum(row["state"] == "READY" for row in index.values()) == 3
    assert all(row["host_bytes"] == 10 * MIB for row in index.values())  # measured
    assert multi.metric("modelctl_model_evictions_total", model="m0", reason="lru") == 1
    assert multi.metric("modelctl_model_resident_bytes", model="m0", memory="host") == 10 * MIB
    assert multi.metric("modelctl_model_resident_bytes", model="m2", memory="host") == 0
    assert multi.metric("modelctl_model_loads_total", model="m0", outcome="ok") == 2
    assert multi.metric("modelctl_requests_total", model="m1", code="200") == 2


def test_concurrent_first_requests_load_a_cold_model_once(
        tmp_path: Path, start_multi: Callable[..., Multi]) -> None:
    models = fill_models_dir(tmp_path, {"slow": {"latency_ms": 5, "load_ms": 1500,
                                                 "hold_mb": 1}})
    multi = start_multi(models, "--memory_budget_mb", "20")
    with ThreadPoolExecutor(12) as pool:
        asked = [pool.submit(multi.v1, "slow", [f"r{i}"]) for i in range(12)]
        wait_for(lambda: multi.index()["slow"]["state"] != "UNAVAILABLE", timeout_s=10,
                 interval_s=0.05, what="the load to start")
        assert multi.index()["slow"] | {"reason": ""} == {
            "name": "slow", "version": "1", "state": "LOADING", "reason": "",
            "host_bytes": 0, "device_bytes": 0}
        replies = [f.result() for f in asked]
    assert [r.status_code for r in replies] == [200] * 12
    assert [r.json()["predictions"] for r in replies] == [[f"r{i}"] for i in range(12)]
    assert multi.metric("modelctl_model_loads_total", model="slow", outcome="ok") == 1
    # Each of the twelve found it cold; the first started the load, the rest joined it.
    assert multi.metric("modelctl_model_cold_starts_total", model="slow") == 12
    assert multi.metric("modelctl_model_load_seconds_count", model="slow") == 1
    # Known but cold again after an unload: per-model readiness says so.
    assert httpx.get(f"{multi.url}/v2/models/slow/ready", timeout=10).status_code == 200
    assert multi.repository("slow", "unload").status_code == 200
    assert httpx.get(f"{multi.url}/v2/models/slow/ready", timeout=10).status_code == 503
    assert httpx.get(f"{multi.url}/v2/models/absent/ready", timeout=10).status_code == 404
    assert httpx.get(f"{multi.url}/v2/health/ready", timeout=10).status_code == 200


def test_real_classifiers_answer_as_before_their_eviction(
        tmp_path: Path, start_multi: Callable[..., Multi]) -> None:
    built = {f"cls{seed}": (lambda d, s=seed: build_classify(d, seed=s)) for seed in range(3)}
    models = fill_models_dir(tmp_path, {}, built)
    size = sum(p.stat().st_size for p in (models / "cls0").glob("*.safetensors"))
    # Room for two of the three (estimated from the weight files, then measured).
    budget_mb = 2.5 * size / MIB
    multi = start_multi(models, "--memory_budget_mb", f"{budget_mb:.1f}",
                        "--min_residency_s", "0")
    texts = ["a fine day", "a dreadful day"]
    first = {name: multi.v1(name, texts).json()["predictions"] for name in built}
    assert first["cls0"] != first["cls1"]  # three different models, each its own answer
    index = multi.index()
    assert [n for n, row in index.items() if row["state"] == "READY"] == ["cls1", "cls2"]
    assert abs(index["cls0"]["host_bytes"] - size) < 0.05 * size  # measured ~ the weights
    again = multi.v1("cls0", texts)  # evicted, loaded again, the same answer
    assert again.status_code == 200 and again.json()["predictions"] == first["cls0"]
    labels = {p["label"] for row in first.values() for p in row}
    assert labels <= {"negative", "neutral", "positive"}


def test_the_real_minilm_takes_turns_with_a_classifier_and_answers_the_same(
        tmp_path: Path, start_multi: Callable[..., Multi]) -> None:
    built = {"minilm": build_embed, "cls": lambda d: build_classify(d, seed=7)}
    models = fill_models_dir(tmp_path, {}, built, task={"minilm": "feature-extraction"})
    sizes = {n: sum(p.stat().st_size for p in (models / n).glob("*.safetensors"))
             for n in built}
    # Room for the embedder or the classifier, not both.
    budget_mb = (max(sizes.values()) + 0.5 * min(sizes.values())) / MIB
    multi = start_multi(models, "--memory_budget_mb", f"{budget_mb:.1f}",
                        "--min_residency_s", "0")
    first = multi.v1("minilm", ["the same sentence"]).json()["predictions"]
    assert len(first[0]) == 384  # MiniLM's embedding
    assert multi.v1("cls", ["a fine day"]).status_code == 200
    assert multi.states() == {"cls": "READY", "minilm": "UNAVAILABLE"}
    again = multi.v1("minilm", ["the same sentence"]).json()["predictions"]
    assert multi.states() == {"cls": "UNAVAILABLE", "minilm": "READY"}
    assert again == first
    # Measured: the tensors, i.e. the file less its JSON header.
    assert 0 < sizes["minilm"] - multi.index()["minilm"]["host_bytes"] < 0.01 * sizes["minilm"]
