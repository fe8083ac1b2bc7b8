"""Mirroring and capture with real predictor processes (fixed-latency, the quickest task).

One registry holds demo-fixed versions: 1 (the primary), 4 (same outputs: a shadow
that agrees), 2 (outputs prefixed: a shadow that disagrees) and 3 (5 s per batch: a
slow shadow). The primary mirrors every request to version 4; the same requests go
to version 2 directly, as a mesh mirror would send them. A slow shadow and a shadow
that is down prove that mirroring never changes the primary's answers or latency.
"""

from __future__ import annotations

import json
import signal
import statistics
from typing import Any

import pytest

from tests.support import wait_for
from tests.support.fleet import Fleet, Predictor, records, run_cli, timed, wait_records
from tests.support.fleet_worlds import FIXED as MODEL
from tests.support.fleet_worlds import FIXED_LATENCY_MS as LATENCY_MS
from tests.support.fleet_worlds import FixedWorld

REQUESTS = 40


@pytest.fixture(scope="module")
def world(fleet: Fleet, spawned: dict[str, Any]) -> FixedWorld:
    world: FixedWorld = spawned["fixed"]
    fleet.wait_ready(world.all)
    return world


def _send(world: FixedWorld) -> list[str]:
    """The same requests to the primary (mirrored to version 4) and to version 2."""
    ids = []
    for i in range(REQUESTS):
        rid = f"req-{i:03d}"
        instances = [f"text {i}", {"k": i, "list": [1, 2]}, i]
        response = world.primary.predict(instances, rid)
        assert response.status_code == 200
        assert response.json() == {"predictions": instances}
        assert world.disagree.predict(instances, rid, shadow=True).status_code == 200
        ids.append(rid)
    for rid in ("bad-1", "bad-2"):  # failed requests are captured too, with their status
        assert world.primary.predict("not a list", rid).status_code == 400  # type: ignore[arg-type]
        assert world.disagree.predict("not a list", rid, shadow=True).status_code == 400  # type: ignore[arg-type]
    return ids


@pytest.fixture(scope="module")
def sent(world: FixedWorld) -> list[str]:
    ids = _send(world)
    total = REQUESTS + 2
    wait_records(world.capture, total, role="stable")
    wait_records(world.capture, total, role="shadow", version="4")
    wait_records(world.capture, total, role="shadow", version="2")
    return ids


def test_both_sides_are_captured_with_the_same_request_ids(world: FixedWorld,
                                                           sent: list[str]) -> None:
    primary = {r["request_id"]: r for r in records(world.capture, role="stable")}
    shadow = {r["request_id"]: r for r in records(world.capture, role="shadow", version="4")}
    assert set(primary) == set(shadow) == {*sent, "bad-1", "bad-2"}
    first = primary["req-000"]
    assert first["model"] == MODEL and first["version"] == "1" and first["task"] == "fixed-latency"
    assert first["status"] == 200 and first["items"] == 3 and first["latency_ms"] >= LATENCY_MS
    assert json.loads(first["output"]) == ["text 0", {"k": 0, "list": [1, 2]}, 0]
    assert json.loads(first["input"])["instances"][0] == "text 0"  # --capture_inputs
    assert shadow["req-000"]["input"] is None  # the shadow keeps only the hash
    assert shadow["req-000"]["input_hash"] == first["input_hash"]
    assert primary["bad-1"]["status"] == shadow["bad-1"]["status"] == 400
    assert primary["bad-1"]["output"] is None and "instances" in primary["bad-1"]["error"]
    assert world.primary.metric("modelctl_shadow_mirrors_total", code="200") == REQUESTS
    assert world.primary.metric("modelctl_shadow_mirrors_total", code="400") == 2


def test_mirrored_requests_are_not_mirrored_again(world: FixedWorld, sent: list[str]) -> None:
    before = world.primary.metric("modelctl_shadow_mirrors_total")
    for i in range(3):
        assert world.primary.predict([f"m{i}"], f"mirrored-{i}", shadow=True).status_code == 200
    got = wait_records(world.capture, 3, role="shadow", version="1")
    assert {r["request_id"] for r in got} == {f"mirrored-{i}" for i in range(3)}
    assert world.primary.metric("modelctl_shadow_mirrors_total") == before


def report(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], world: FixedWorld,
           *extra: str) -> tuple[int, dict[str, object], str]:
    code, out, err = run_cli(monkeypatch, capsys, "shadow", "report", MODEL, "--primary",
                             str(world.capture), "--shadow", str(world.capture), "--format",
                             "json", *extra)
    return code, (json.loads(out) if out.strip() else {}), err


def test_report_passes_the_agreeing_shadow(world: FixedWorld, sent: list[str],
                                           monkeypatch: pytest.MonkeyPatch,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    code, doc, err = report(monkeypatch, capsys, world, "--shadow-version", "4",
                            "--save-to-registry", "--registry", str(world.registry))
    assert code == 0, err
    assert doc["verdict"] == "Pass"
    assert doc["pairs"]["pairs"] == REQUESTS + 2  # type: ignore[index]
    assert doc["coverage"] == 1.0
    assert doc["agreement"] == {"items": 3 * REQUESTS, "unpaired_items": 0,
                                "exact_matches": 3 * REQUESTS, "exact_match_rate": 1.0}
    assert doc["pairs"]["status"]["shadow"]["client_errors"] == 2  # type: ignore[index]
    assert "stored the report" in err
    from registry import Registry

    stored = Registry.open(str(world.registry)).get_report(MODEL, 4, "shadow")
    assert stored is not None and stored["verdict"] == "Pass"


def test_report_fails_the_disagreeing_shadow(world: FixedWorld, sent: list[str],
                                             monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    code, doc, _ = report(monkeypatch, capsys, world, "--shadow-version", "2")
    assert code == 1
    assert doc["verdict"] == "Fail"
    checks = {c["name"]: c for c in doc["checks"]}  # type: ignore[attr-defined]
    assert checks["exact-match"]["verdict"] == "Fail"
    # Numbers and dicts echo unchanged; only strings get the prefix.
    assert doc["agreement"]["exact_matches"] == 2 * REQUESTS  # type: ignore[index]
    code, out, _ = run_cli(monkeypatch, capsys, "shadow", "report", MODEL, "--primary",
                           str(world.capture), "--shadow", str(world.capture),
                           "--shadow-version", "2", "--format", "md")
    assert code == 1 and "**Verdict: Fail**" in out and "| exact-match | Fail |" in out


def test_several_shadow_versions_need_one_chosen(world: FixedWorld, sent: list[str],
                                                 monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = report(monkeypatch, capsys, world)
    assert code == 2
    assert err.startswith("error: the shadow capture holds versions") and "--shadow-version" in err
    assert err.count("\n") == 1


def test_a_slow_shadow_changes_nothing_for_the_primary(world: FixedWorld) -> None:
    base = _latencies(world.baseline)
    slow = _latencies(world.slow_primary)
    # A mirror on the request path would cost its timeout (1.5 s) or the shadow's 5 s.
    assert max(slow) < 1.0, slow
    assert statistics.median(slow) < statistics.median(base) + 0.15, (base, slow)
    wait_for(lambda: world.slow_primary.metric("modelctl_shadow_mirrors_dropped_total",
                                               reason="queue_full") >= 1,
             timeout_s=10, what="mirrors dropped on a full queue")
    wait_for(lambda: world.slow_primary.metric("modelctl_shadow_mirrors_dropped_total",
                                               reason="timeout") >= 1,
             timeout_s=15, what="mirrors dropped on timeout")


def test_a_shadow_that_is_down_changes_nothing_for_the_primary(world: FixedWorld) -> None:
    base = _latencies(world.baseline)
    down = _latencies(world.down_primary)
    assert max(down) < 1.0, down
    assert statistics.median(down) < statistics.median(base) + 0.15, (base, down)
    wait_for(lambda: world.down_primary.metric("modelctl_shadow_mirrors_dropped_total",
                                               reason="unreachable") == len(down),
             timeout_s=10, what="every mirror dropped as unreachable")


def _latencies(predictor: Predictor, count: int = 20) -> list[float]:
    """Client-side latencies of ``count`` requests; status and output must be the baseline's."""
    out = []
    for i in range(count):
        instances = [f"latency {i}", i]
        elapsed, response = timed(lambda inst=instances: predictor.predict(inst))
        assert response.status_code == 200
        assert response.json() == {"predictions": instances}
        out.append(elapsed)
    return out


def test_sigterm_flushes_the_capture_buffer(world: FixedWorld) -> None:
    # The down-shadow primary flushes every 300 s: its records can only come from the drain.
    for i in range(5):
        assert world.down_primary.predict([f"flush {i}"], f"flush-{i}").status_code == 200
    assert records(world.down_capture, request_id="flush-0") == []
    world.down_primary.proc.signal(signal.SIGTERM)
    assert world.down_primary.proc.wait(timeout_s=30) == 0
    flushed = records(world.down_capture)
    assert {f"flush-{i}" for i in range(5)} <= {r["request_id"] for r in flushed}
    assert not list(world.down_capture.rglob("*.tmp"))


def test_a_generated_request_id_and_a_v2_body_reach_the_shadow(world: FixedWorld) -> None:
    body = {"inputs": [{"name": "input", "datatype": "BYTES", "shape": [2], "data": ["a", "b"]}]}
    response = world.primary.client.post(f"{world.primary.url}/v2/models/{MODEL}/infer",
                                         json=body)
    assert response.status_code == 200
    request_id = response.headers["x-request-id"]  # generated by the primary
    [shadow] = wait_records(world.capture, 1, role="shadow", version="4", request_id=request_id)
    [primary] = records(world.capture, role="stable", request_id=request_id)
    assert shadow["protocol"] == primary["protocol"] == "v2"
    assert json.loads(shadow["output"]) == json.loads(primary["output"]) == ["a", "b"]
    assert shadow["input_hash"] == primary["input_hash"]
