"""The peer comparison's configurations, capacity rule and report, on synthetic data.

Nothing here installs or starts a peer: the servers' command lines are checked as
data, and the capacity arithmetic on made-up load ladders.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from bench.peers._configs import (
    MAX_BATCH_SIZE,
    SERVERS,
    PeerConfig,
    ServerKind,
    best_knob,
    default_configs,
    is_saturated,
    passes_slo,
    should_stop,
    sustained_load,
)
from bench.peers._launch import Workload, argv_env, mosec_batch_totals
from bench.peers._report import markdown


def row(offered: float, p99_ms: float | None, success: float = 1.0,
        throughput: float | None = None) -> dict[str, Any]:
    """A load point as run_ladder summarises it (median/min/max of its runs)."""

    def cell(value: float | None) -> dict[str, float] | None:
        return None if value is None else {"median": value, "min": value, "max": value}

    return {"offered_rps": offered, "p99_ms": cell(p99_ms), "success_ratio": cell(success),
            "throughput_rps": cell(offered * success if throughput is None else throughput),
            "p50_ms": cell(p99_ms), "p90_ms": cell(p99_ms), "max_ms": cell(p99_ms),
            "mean_batch": cell(4.0), "server_cpu_cores": cell(0.5),
            "status_counts": {"200": {"median": 100, "min": 100, "max": 100}}}


def test_every_server_is_configured_as_issue_9_prescribes() -> None:
    configs = {c.server: c for c in default_configs()}
    assert set(configs) == {"kserve-plain", "ray-serve", "bentoml", "mosec", "modelctl"}
    assert configs["ray-serve"].knob_value == 0.05  # batch_wait_timeout_s
    assert configs["bentoml"].knob_value == 200.0  # max_latency_ms: the 200 ms budget
    assert configs["modelctl"].knob_value == 50.0  # max_batch_wait_ms
    assert configs["mosec"].knob_value == 50.0  # max_wait_time (ms), as issue 9 asks
    assert configs["kserve-plain"].knob_value is None
    for kind in SERVERS.values():
        if kind.batches:
            assert kind.settings["max_batch_size"] == MAX_BATCH_SIZE
    ray = SERVERS["ray-serve"].settings
    assert ray["num_replicas"] == 1
    assert ray["max_ongoing_requests"] >= ray["max_batch_size"] * ray["max_concurrent_batches"]
    assert SERVERS["bentoml"].settings["workers"] == 1
    assert SERVERS["mosec"].settings["num"] == 1


def test_published_configuration_names_the_knob_and_the_variant() -> None:
    tuned = PeerConfig("ray-serve", "tuned", 0.2)
    published = tuned.published()
    assert published["batch_wait_timeout_s"] == 0.2
    assert published["variant"] == "tuned"
    assert published["max_batch_size"] == 100
    assert "0.2" in tuned.label and "tuned" in tuned.label
    assert PeerConfig("kserve-plain").label == "kserve-plain"


@pytest.mark.parametrize("kwargs", [
    {"server": "triton"},
    {"server": "kserve-plain", "knob_value": 1.0},
    {"server": "bentoml", "variant": "best"},
    {"server": "modelctl", "knob_value": -1.0},
    {"server": "modelctl", "knob_value": float("nan")},
])
def test_bad_configs_are_refused(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        PeerConfig(**kwargs)


def test_a_knob_default_must_be_one_of_its_candidates() -> None:
    with pytest.raises(ValueError, match="candidate"):
        ServerKind("x", "x", "peers", {}, knob="k", knob_default=1.0, knob_candidates=(2.0,))
    with pytest.raises(ValueError, match="venv"):
        ServerKind("x", "x", "docker", {})


def test_sustained_load_is_the_highest_load_meeting_both_conditions() -> None:
    rows = [row(50, 120), row(200, 150), row(400, 199.9), row(600, 260), row(800, 900, 0.5)]
    assert sustained_load(rows) == 400
    # Exactly at the limits passes; just under 99% success does not.
    assert passes_slo(row(10, 200.0, 0.99))
    assert not passes_slo(row(10, 100.0, 0.989))
    assert not passes_slo(row(10, None, 0.0))


def test_a_miss_at_low_load_does_not_cap_the_capacity() -> None:
    # A batcher waiting for batches to fill can miss the p99 at low load only.
    rows = [row(50, 240), row(200, 180), row(400, 190), row(600, 300)]
    assert sustained_load(rows) == 400
    assert sustained_load([row(50, 240), row(200, 500, 0.7)]) is None
    assert sustained_load([]) is None


def test_saturation_stops_the_ladder_but_a_slow_low_load_does_not() -> None:
    assert not is_saturated(row(50, 240))  # slow, but keeping up
    assert is_saturated(row(50, 150, success=0.9))  # shedding
    assert is_saturated(row(50, 150, throughput=40))  # falling behind
    assert is_saturated(row(50, 2500))  # queueing without bound
    ladder = [row(400, 150), row(600, 150, 0.5)]
    assert not should_stop(ladder, 2)
    assert should_stop([*ladder, row(800, 150, 0.3)], 2)
    assert should_stop(ladder, 1)
    assert not should_stop([row(50, 240), row(200, 260)], 1)


def test_best_knob_takes_the_highest_capacity_then_the_lower_p99() -> None:
    sweep = {0.01: [row(50, 500, 0.6)], 0.05: [row(50, 150), row(200, 190)],
             0.1: [row(50, 150), row(200, 120)]}
    assert best_knob(sweep) == 0.1
    assert best_knob({0.01: [row(50, 500, 0.6)], 0.2: [row(50, 500, 0.6)]}) == 0.01
    with pytest.raises(ValueError):
        best_knob({})


def test_peer_command_lines_carry_the_configuration() -> None:
    fixed = Workload("fixed-latency", latency_ms=100)
    python = Path("/venv/bin/python")
    argv, _, path = argv_env(PeerConfig("ray-serve", "tuned", 0.2), fixed, 9000, python)
    assert argv[:3] == [str(python), "-m", "bench.peers.ray_serve"]
    flags = dict(zip(argv[3::2], argv[4::2], strict=False))
    assert flags["--batch_wait_timeout_s"] == "0.2"
    assert flags["--max_batch_size"] == "100"
    assert flags["--max_ongoing_requests"] == "1000"
    assert path == "/v1/models/bench:predict"
    argv, env, path = argv_env(PeerConfig("bentoml"), fixed, 9001, python)
    assert env["BENCH_PEER_MAX_LATENCY_MS"] == "200.0"
    assert env["BENCH_PEER_MAX_BATCH_SIZE"] == "100"
    assert "bench.peers.bento_service:BenchPeer" in argv and path == "/predict"
    argv, env, path = argv_env(PeerConfig("mosec", "tuned", 10.0), fixed, 9004, python)
    assert argv[:3] == [str(python), "-m", "bench.peers.mosec_service"]
    assert argv[argv.index("--port") + 1] == "9004" and path == "/inference"
    assert env["BENCH_PEER_MAX_WAIT_MS"] == "10" and env["BENCH_PEER_MAX_BATCH_SIZE"] == "100"
    argv, _, _ = argv_env(PeerConfig("kserve-plain"), fixed, 9002, python)
    assert argv[argv.index("--http_host") + 1] == "127.0.0.1"
    with pytest.raises(ValueError):
        argv_env(PeerConfig("modelctl"), fixed, 9003, python)


def _results(ours: float | None, peer: float | None) -> dict[str, Any]:
    def line(server: str, sustained: float | None) -> dict[str, Any]:
        config = PeerConfig(server)
        rows = [row(50, 150 if sustained else 900, 1.0 if sustained else 0.5)]
        return {"label": config.label, "server": server, "rows": rows, "loads_not_run": [200],
                "sustained_rps": sustained}

    return {"command": "python -m bench.compare matrix", "machine": "test", "date": "today",
            "protocol_text": "synthetic", "tuning": None,
            "workloads": [{"key": "fixed-latency", "name": "fixed-latency",
                           "physical_limit_rps": 1000.0, "latency_floor_ms": 100.0,
                           "servers": [line("modelctl", ours), line("ray-serve", peer)]}]}


def test_report_states_capacity_ratio_and_the_verdict_plainly() -> None:
    text = markdown(_results(900.0, 400.0))
    assert "| fixed-latency | 1000 | modelctl (max_batch_wait_ms=50, default) | 900 | 0.90 |" \
        in text
    assert "(2.25x, needs 1.5x: yes); 0.90 of the physical limit (needs 0.8: yes): target met." \
        in text
    assert "not run (past saturation): 200" in text
    missed = markdown(_results(900.0, 700.0))
    assert "needs 1.5x: no" in missed and "target NOT met" in missed
    low = markdown(_results(500.0, 100.0))  # 5x the best peer, but half the limit
    assert "needs 0.8: no" in low and "target NOT met" in low
    none = markdown(_results(None, None))
    assert "| < 50 |" in none and "target NOT met" in none


def test_plots_write_one_png_per_workload(tmp_path: Path) -> None:
    from bench.plots import plot_all

    results = tmp_path / "peers.json"
    results.write_text(json.dumps(_results(900.0, 400.0)))
    paths = plot_all(results, tmp_path)
    assert [p.name for p in paths] == ["peers-fixed-latency.png"]
    assert paths[0].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_load_point_keeps_median_min_and_max_of_its_runs() -> None:
    from bench.peers._measure import summarise

    def run(p99: float, ok: int, shed: int) -> dict[str, Any]:
        return {"throughput_rps": ok / 5, "success_ratio": ok / (ok + shed), "p50_ms": p99 / 2,
                "p90_ms": p99, "p99_ms": p99, "max_ms": p99, "mean_batch": None,
                "server_cpu_s": 1.0, "server_cpu_cores": 0.2, "send_lag_p99_ms": 1.0,
                "status_counts": {"200": ok, **({"503": shed} if shed else {})}}

    point = summarise(100, [run(150, 500, 0), run(190, 490, 10), run(170, 495, 5)])
    assert point["p99_ms"] == {"median": 170, "min": 150, "max": 190}
    assert point["status_counts"]["503"] == {"median": 5, "min": 0, "max": 10}
    assert point["mean_batch"] is None  # not observable: said so, never made up
    assert len(point["runs"]) == 3


def test_past_the_deadline_a_ladder_starts_nothing(tmp_path: Path) -> None:
    import time

    from bench.peers._measure import RunProtocol, run_ladder

    line = run_ladder(PeerConfig("modelctl"), Workload("fixed-latency"), [50, 200],
                      RunProtocol(), tmp_path, deadline=time.monotonic() - 1)
    assert line["rows"] == [] and line["loads_not_run"] == [50, 200]
    assert line["sustained_rps"] is None and line["start_s"] == []
    assert line["config"]["max_batch_wait_ms"] == 50.0


def test_mosec_batches_are_read_from_its_own_histogram() -> None:
    metrics = "\n".join([
        "# HELP mosec_service_batch_size batch size for each connection in each stage",
        "# TYPE mosec_service_batch_size histogram",
        'mosec_service_batch_size_sum{stage="1",connection="p_1"} 250.0',
        'mosec_service_batch_size_count{stage="1",connection="p_1"} 10',
        'mosec_service_batch_size_bucket{le="+Inf",stage="1",connection="p_1"} 10',
        "mosec_service_throughput_total 250"])
    assert mosec_batch_totals(metrics) == (250.0, 10.0)
    assert mosec_batch_totals("") == (0.0, 0.0)
