"""What goes wrong with one model stays with it: a corrupt artifact, a model larger than
the budget, a load that raises; and requests that cannot wait for a load get 429 sized
to it. Real processes; the other models keep serving throughout."""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from tests.support.multi import Multi, fill_models_dir


def test_a_bad_model_is_unavailable_with_its_reason_and_the_others_serve(
        tmp_path: Path, start_multi: Callable[..., Multi]) -> None:
    models = fill_models_dir(tmp_path, {
        "good": {"latency_ms": 5, "hold_mb": 1, "output_prefix": "good:"},
        "corrupt": {"latency_ms": 5},
        "huge": {"latency_ms": 5, "hold_mb": 40},
        "raises": {"latency_ms": 5, "fail_load": True},
    })
    (models / "corrupt" / "task.json").write_text('{"latency_ms": 6}')  # not what was pushed
    # KServe's model agent marks a finished download so (pkg/agent/downloader.go).
    (models / "good" / f"SUCCESS.{'ab' * 32}").write_text("{}")
    multi = start_multi(models, "--memory_budget_mb", "20")
    assert multi.v1("good", ["x"]).json() == {"predictions": ["good:x"]}
    for name, says in [("corrupt", "failed verification"), ("huge", "too big for the budget"),
                       ("raises", "fail_load")]:
        reply = multi.v1(name, ["x"])
        assert reply.status_code == 503, (name, reply.text)
        assert says in reply.json()["error"], (name, reply.text)
        row = multi.index()[name]
        assert row["state"] == "UNAVAILABLE" and says in row["reason"], row
        again = multi.v1(name, ["x"])  # not retried in a loop: the same answer, no new load
        assert again.status_code == 503 and says in again.json()["error"]
        assert multi.v1("good", ["still"]).json() == {"predictions": ["good:still"]}
    assert multi.metric("modelctl_model_loads_total", model="raises", outcome="failed") == 1
    assert multi.metric("modelctl_model_loads_total", model="corrupt", outcome="failed") == 1
    assert multi.index()["good"]["state"] == "READY"
    # The repository's load tries again, and says why it failed.
    retried = multi.repository("raises", "load")
    assert retried.status_code == 503 and "fail_load" in retried.json()["error"]
    assert multi.metric("modelctl_model_loads_total", model="raises", outcome="failed") == 2
    assert multi.v1("nope", ["x"]).status_code == 404
    assert multi.v1("good", [{"a": [1] * 10}], timeout=10).status_code == 200  # an echo
    assert multi.v1("good", []).status_code == 400  # bad input: as a single-model predictor


def test_a_request_that_cannot_wait_for_the_load_gets_429_sized_to_it(
        tmp_path: Path, start_multi: Callable[..., Multi]) -> None:
    models = fill_models_dir(tmp_path, {
        "slow": {"latency_ms": 5, "load_ms": 2000, "hold_mb": 1},
        "fast": {"latency_ms": 5, "hold_mb": 1}})
    multi = start_multi(models, "--memory_budget_mb", "20", "--min_residency_s", "0")
    assert multi.v1("fast", ["warm"]).status_code == 200
    with ThreadPoolExecutor(2) as pool:  # a load never holds up another model's requests
        loading = pool.submit(multi.v1, "slow", ["first"])
        time.sleep(0.3)
        started = time.monotonic()
        assert multi.v1("fast", ["meanwhile"]).status_code == 200
        assert time.monotonic() - started < 1.0 and not loading.done()
        assert loading.result().status_code == 200  # and its load time is now known
    assert multi.repository("slow", "unload").status_code == 200
    hurried = multi.v1("slow", ["hurry"], headers={"x-request-timeout-ms": "300"})
    assert hurried.status_code == 429, hurried.text
    assert int(hurried.headers["retry-after"]) >= 2
    assert "loading" in hurried.json()["error"]
    # The load went on: a patient retry finds it resident.
    deadline = time.monotonic() + 30
    while multi.index()["slow"]["state"] != "READY" and time.monotonic() < deadline:
        time.sleep(0.1)
    assert multi.v1("slow", ["later"], headers={"x-request-timeout-ms": "300"}).status_code == 200


def test_no_room_now_is_429_until_a_resident_may_leave(
        tmp_path: Path, start_multi: Callable[..., Multi]) -> None:
    models = fill_models_dir(tmp_path, {f"m{i}": {"latency_ms": 5, "hold_mb": 10}
                                        for i in range(3)})
    multi = start_multi(models, "--memory_budget_mb", "25", "--min_residency_s", "4")
    assert multi.v1("m0", ["a"]).status_code == 200
    assert multi.v1("m1", ["a"]).status_code == 200
    refused = multi.v1("m2", ["a"])  # m0 and m1 are within their minimum residency
    assert refused.status_code == 429, refused.text
    assert 1 <= int(refused.headers["retry-after"]) <= 4
    assert "minimum residency" in refused.json()["error"]
    time.sleep(float(refused.headers["retry-after"]) + 0.5)
    assert multi.v1("m2", ["a"]).status_code == 200  # m0, least recently used, left
    assert multi.states() == {"m0": "UNAVAILABLE", "m1": "READY", "m2": "READY"}


def test_a_load_that_failed_is_tried_again_once_its_directory_changes(
        tmp_path: Path, start_multi: Callable[..., Multi]) -> None:
    """KServe's agent writes MANIFEST.json before the weights (it downloads in listing
    order): a request in between finds the version incomplete."""
    models = fill_models_dir(tmp_path, {"late": {"latency_ms": 5, "output_prefix": "late:"}})
    task = (models / "late" / "task.json").read_bytes()
    (models / "late" / "task.json").unlink()  # still downloading
    multi = start_multi(models, "--memory_budget_mb", "20")
    early = multi.v1("late", ["x"])
    assert early.status_code == 503 and "task.json: missing" in early.json()["error"]
    assert multi.v1("late", ["x"]).status_code == 503  # unchanged: not tried again
    (models / "late" / "task.json").write_bytes(task)  # the download finishes
    row = multi.index()["late"]
    assert (row["state"], row["reason"]) == ("UNAVAILABLE", "not loaded (changed since it failed)")
    assert multi.v1("late", ["x"]).json() == {"predictions": ["late:x"]}
