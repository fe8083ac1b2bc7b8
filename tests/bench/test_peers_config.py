"""The peer comparison's configurations, capacity rule and report, on synthetic data.

Nothing here installs or starts a peer: the servers' command lines are checked as
data, the capacity arithmetic on made-up load ladders, and a server's CPU on two spinning
processes.
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
    cpu_row,
    default_configs,
    is_saturated,
    passes_slo,
    saturation_rps,
    should_stop,
    slo_p99_ms,
    sustained_load,
)
from bench.peers._launch import Workload, argv_env, mosec_batch_totals, triton_batch_totals
from bench.peers._report import markdown

SLO = 250.0  # fixed-latency's budget


def row(offered: float, p99_ms: float | None, success: float = 1.0,
        throughput: float | None = None, cpu_ms: float = 0.3) -> dict[str, Any]:
    """A load point as run_ladder summarises it (median/min/max of its runs)."""

    def cell(value: float | None) -> dict[str, float] | None:
        return None if value is None else {"median": value, "min": value, "max": value}

    return {"offered_rps": offered, "p99_ms": cell(p99_ms), "success_ratio": cell(success),
            "throughput_rps": cell(offered * success if throughput is None else throughput),
            "p50_ms": cell(p99_ms), "p90_ms": cell(p99_ms), "max_ms": cell(p99_ms),
            "mean_batch": cell(4.0), "server_cpu_cores": cell(0.5),
            "cpu_ms_per_request": cell(cpu_ms),
            "status_counts": {"200": {"median": 100, "min": 100, "max": 100}}}


def test_every_server_is_configured_as_issue_18_prescribes() -> None:
    configs = {c.server: c for c in default_configs()}
    assert set(configs) == {"kserve-plain", "ray-serve", "bentoml", "mosec", "pytriton",
                            "infinity", "modelctl", "modelctl-queue"}
    assert configs["pytriton"].knob_value == 50000.0  # max_queue_delay_microseconds
    assert configs["infinity"].knob_value == 32.0  # Infinity's own default --batch-size
    assert SERVERS["infinity"].workloads == ("embedding",)
    assert SERVERS["infinity"].settings["trust_remote_code"] is False
    assert "V2" in SERVERS["pytriton"].protocol
    assert configs["ray-serve"].knob_value == 0.05  # batch_wait_timeout_s
    assert configs["bentoml"].knob_value == 200.0  # max_latency_ms: the 200 ms budget
    assert configs["modelctl"].knob_value == 50.0  # max_batch_wait_ms
    assert configs["mosec"].knob_value == 50.0  # max_wait_time (ms), as issue 9 asks
    assert configs["kserve-plain"].knob_value is None
    for kind in SERVERS.values():
        if kind.batches and kind.knob != "batch_size":  # Infinity tunes its batch size
            assert kind.settings["max_batch_size"] == MAX_BATCH_SIZE
    ray = SERVERS["ray-serve"].settings
    assert ray["num_replicas"] == 1
    assert ray["max_ongoing_requests"] >= ray["max_batch_size"] * ray["max_concurrent_batches"]
    assert SERVERS["bentoml"].settings["workers"] == 1
    assert SERVERS["mosec"].settings["num"] == 1
    assert [k.name for k in SERVERS.values() if k.ours] == ["modelctl", "modelctl-queue"]
    queue = SERVERS["modelctl-queue"]
    assert (queue.settings["frontends"], queue.settings["workers"]) == (1, 1)
    assert queue.settings["queue_claim_timeout_ms"] < queue.settings["request_timeout_ms"]


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
    with pytest.raises(ValueError, match="workloads"):
        ServerKind("x", "x", "peers", {}, workloads=("vision",))
    with pytest.raises(ValueError, match="unknown workload"):
        slo_p99_ms("vision")
    assert slo_p99_ms("fixed-latency") == 250.0 and slo_p99_ms("embedding") == 400.0


def test_sustained_load_is_the_highest_load_meeting_both_conditions() -> None:
    rows = [row(50, 120), row(200, 150), row(400, 249.9), row(600, 260), row(800, 900, 0.5)]
    assert sustained_load(rows, SLO) == 400
    assert sustained_load(rows, 400.0) == 600  # the embedding budget
    # Exactly at the limits passes; just under 99% success does not.
    assert passes_slo(row(10, 250.0, 0.99), SLO)
    assert not passes_slo(row(10, 100.0, 0.989), SLO)
    assert not passes_slo(row(10, None, 0.0), SLO)


def test_a_miss_at_low_load_does_not_cap_the_capacity() -> None:
    # A batcher waiting for batches to fill can miss the p99 at low load only.
    rows = [row(50, 260), row(200, 180), row(400, 190), row(600, 300)]
    assert sustained_load(rows, SLO) == 400
    assert sustained_load([row(50, 260), row(200, 500, 0.7)], SLO) is None
    assert sustained_load([], SLO) is None


def test_saturation_is_the_most_answered_at_any_load() -> None:
    rows = [row(200, 150), row(400, 300, throughput=380), row(600, 2000, 0.8, throughput=410)]
    assert saturation_rps(rows) == 410
    assert saturation_rps([]) is None


def test_cpu_is_read_at_500_or_half_the_saturation_whichever_is_lower() -> None:
    fixed = [row(200, 200, cpu_ms=0.2), row(500, 210, cpu_ms=0.3), row(800, 220, cpu_ms=0.4),
             row(1000, 300, cpu_ms=0.5)]
    point = cpu_row(fixed)
    assert point is not None and point["offered_rps"] == 500  # saturation 1000: 500 it is
    embed = [row(100, 100), row(200, 150), row(400, 390, throughput=380),
             row(600, 3000, 0.7, throughput=420)]
    point = cpu_row(embed)  # saturates at 420: half is 210, so the 200 point
    assert point is not None and point["offered_rps"] == 200
    slow = [row(100, 900, 0.5, throughput=50)]  # nothing under half: the lowest load
    assert cpu_row(slow) is slow[0] and cpu_row([]) is None
    # Saturating at 975 is half at 487.5: the 500 point, within 5%, not the 200 one.
    near = [row(200, 200), row(500, 210), row(1000, 300, throughput=975)]
    point = cpu_row(near)
    assert point is not None and point["offered_rps"] == 500
    low = [row(200, 200), row(500, 210), row(1000, 300, throughput=900)]
    point = cpu_row(low)
    assert point is not None and point["offered_rps"] == 200  # half is 450: too far


def test_saturation_stops_the_ladder_but_a_slow_low_load_does_not() -> None:
    assert not is_saturated(row(50, 240), SLO)  # slow, but keeping up
    assert is_saturated(row(50, 150, success=0.9), SLO)  # shedding
    assert is_saturated(row(50, 150, throughput=40), SLO)  # falling behind
    assert is_saturated(row(50, 2600), SLO)  # queueing without bound
    assert not is_saturated(row(50, 2600), 400.0)  # within ten embedding budgets
    ladder = [row(400, 150), row(600, 150, 0.5)]
    assert not should_stop(ladder, 2, SLO)
    assert should_stop([*ladder, row(800, 150, 0.3)], 2, SLO)
    assert should_stop(ladder, 1, SLO)
    assert not should_stop([row(50, 240), row(200, 260)], 1, SLO)


def test_best_knob_takes_the_highest_capacity_then_the_lower_p99() -> None:
    sweep = {0.01: [row(50, 500, 0.6)], 0.05: [row(50, 150), row(200, 190)],
             0.1: [row(50, 150), row(200, 120)]}
    assert best_knob(sweep, SLO) == 0.1
    assert best_knob({0.01: [row(50, 500, 0.6)], 0.2: [row(50, 500, 0.6)]}, SLO) == 0.01
    # Equal at the SLO: the higher saturation throughput wins.
    tie = {32.0: [row(200, 300), row(400, 900, 0.9, throughput=350)],
           64.0: [row(200, 300), row(400, 900, 0.9, throughput=380)]}
    assert best_knob(tie, 400.0) == 64.0
    with pytest.raises(ValueError):
        best_knob({}, SLO)


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
    argv, _, path = argv_env(PeerConfig("pytriton", "tuned", 10000.0), fixed, 9005, python,
                             (9006, 9007))
    assert argv[:3] == [str(python), "-m", "bench.peers.pytriton_service"]
    flags = dict(zip(argv[3::2], argv[4::2], strict=False))
    assert (flags["--http_port"], flags["--grpc_port"], flags["--metrics_port"]) == \
        ("9005", "9006", "9007")
    assert flags["--max_queue_delay_us"] == "10000" and flags["--max_batch_size"] == "100"
    assert path == "/v2/models/bench/infer"
    embed = Workload("embedding", "short", model_dir="/models/minilm", device="cpu")
    argv, env, path = argv_env(PeerConfig("infinity", "tuned", 64.0), embed, 9008, python)
    assert argv[:2] == ["/venv/bin/infinity_emb", "v2"] and path == "/embeddings"
    def flag(name: str) -> str:
        return argv[argv.index(name) + 1]

    assert flag("--model-id") == "/models/minilm" and flag("--batch-size") == "64"
    assert flag("--host") == "127.0.0.1" and flag("--port") == "9008"
    assert "--no-trust-remote-code" in argv and env["DO_NOT_TRACK"] == "1"
    with pytest.raises(ValueError, match="embedding"):
        argv_env(PeerConfig("infinity"), fixed, 9009, python)
    with pytest.raises(ValueError):
        argv_env(PeerConfig("modelctl"), fixed, 9003, python)


def test_each_server_gets_a_body_in_its_own_protocol() -> None:
    from bench.peers._measure import bodies_for

    fixed = Workload("fixed-latency")
    assert json.loads(bodies_for(fixed, "modelctl")[0]) == {"instances": ["x"]}
    assert json.loads(bodies_for(fixed, "pytriton")[0]) == {"inputs": [
        {"name": "INPUT", "datatype": "BYTES", "shape": [1, 1], "data": ["x"]}]}
    short = bodies_for(Workload("embedding", "short"), "infinity")
    assert json.loads(short[1]) == {"model": "bench", "input": ["short text number 1"]}


def _results(ours: float | None, peer: float | None, our_cpu: float = 0.3,
             peer_cpu: float = 0.1) -> dict[str, Any]:
    def line(server: str, sustained: float | None, cpu_ms: float) -> dict[str, Any]:
        config = PeerConfig(server)
        rows = [row(50, 150 if sustained else 900, 1.0 if sustained else 0.5, cpu_ms=cpu_ms)]
        return {"label": config.label, "server": server, "rows": rows, "loads_not_run": [200],
                "sustained_rps": sustained, "saturation_rps": sustained,
                "protocol_used": config.kind.protocol, "cpu_at_rps": 50,
                "cpu_ms_per_request": cpu_ms}

    return {"command": "python -m bench.compare matrix", "machine": "test", "date": "today",
            "protocol_text": "synthetic", "tuning": None,
            "workloads": [{"key": "fixed-latency", "name": "fixed-latency",
                           "physical_limit_rps": 1000.0, "latency_floor_ms": 100.0,
                           "servers": [line("modelctl", ours, our_cpu),
                                       line("mosec", peer, peer_cpu)]}]}


def test_report_states_capacity_ratio_and_the_verdict_plainly() -> None:
    text = markdown(_results(900.0, 400.0))
    assert "| fixed-latency | 1000 | modelctl (max_batch_wait_ms=50, default) | 900 | 0.90 |" \
        in text
    assert "(2.25x, needs 1.2x: yes); 0.90 of the physical limit (needs 0.8: yes): target met." \
        in text
    assert "not run (past saturation): 200" in text
    assert "modelctl spends 0.300 ms of CPU per request, the lowest peer 0.100 ms (needs at " \
        "most that: no)" in text
    assert "| fixed-latency | mosec (max_wait_time_ms=50, default) | JSON over HTTP/1.1" in text
    assert "| 50 | 0.100 (0.100-0.100) |" in text
    missed = markdown(_results(900.0, 800.0))
    assert "needs 1.2x: no" in missed and "target NOT met" in missed
    low = markdown(_results(500.0, 100.0))  # 5x the best peer, but half the limit
    assert "needs 0.8: no" in low and "target NOT met" in low
    none = markdown(_results(None, None))
    assert "| < 50 |" in none and "target NOT met" in none
    frugal = markdown(_results(900.0, 400.0, our_cpu=0.09))
    assert "(needs at most that: yes)" in frugal


def test_queue_mode_is_ours_in_the_verdict_not_a_peer() -> None:
    results = _results(700.0, 400.0)
    part = results["workloads"][0]
    queue = dict(part["servers"][0], server="modelctl-queue", sustained_rps=900.0,
                 saturation_rps=900.0, label=PeerConfig("modelctl-queue").label)
    part["servers"].append(queue)
    text = markdown(results)
    # the best of our two modes against the best peer, never the queue mode as the peer
    assert "modelctl sustains 900 req/s, the best peer 400 req/s (2.25x" in text


def test_a_server_of_several_processes_counts_them_all_and_stops_only_its_own(
        tmp_path: Path) -> None:
    import sys

    from bench.peers._launch import RunningServer
    from tests.support.procs import ManagedProcess, wait_for

    spin = [sys.executable, "-c", "import time\nt = time.process_time()\n"
            "while time.process_time() - t < 0.5: pass\ntime.sleep(60)"]
    # each spins 0.5 s of CPU: the checks below leave room for /proc's 10 ms ticks
    procs = [ManagedProcess(f"part-{i}", spin, log_dir=tmp_path) for i in range(2)]
    try:
        server = RunningServer(PeerConfig("modelctl-queue"), "http://127.0.0.1:1", "", procs[0],
                               others=(procs[1],))
        one = RunningServer(PeerConfig("modelctl"), "http://127.0.0.1:1", "", procs[0])
        wait_for(lambda: one.cpu_s() >= 0.4 and server.cpu_s() >= 0.8, timeout_s=30,
                 what="both parts to spend their CPU")
        server.stop()
        assert procs[0].poll() is not None
        assert procs[1].poll() is None  # the worker and redis-server belong to their owner
    finally:
        for proc in procs:
            proc.stop()


def test_embedding_is_judged_on_saturation_throughput() -> None:
    results = _results(500.0, 450.0)
    part = results["workloads"][0]
    part.update(key="embedding-short", name="embedding", physical_limit_rps=600.0)
    text = markdown(results)
    assert "modelctl saturates at 500 req/s, the best peer 450 req/s (1.11x, needs 1x: yes); " \
        "0.83 of the physical limit (needs 0.8: yes): target met." in text


def test_plots_write_one_png_per_workload(tmp_path: Path) -> None:
    from bench.plots import plot_all

    results = tmp_path / "peers.json"
    results.write_text(json.dumps(_results(900.0, 400.0)))
    paths = plot_all(results, tmp_path)
    assert [p.name for p in paths] == ["peers-fixed-latency.png", "peers-cpu.png"]
    assert all(p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in paths)


def test_a_load_point_keeps_median_min_and_max_of_its_runs() -> None:
    from bench.peers._measure import summarise

    def run(p99: float, ok: int, shed: int) -> dict[str, Any]:
        return {"throughput_rps": ok / 5, "success_ratio": ok / (ok + shed), "p50_ms": p99 / 2,
                "p90_ms": p99, "p99_ms": p99, "max_ms": p99, "mean_batch": None,
                "server_cpu_s": 1.0, "server_cpu_cores": 0.2, "send_lag_p99_ms": 1.0,
                "cpu_ms_per_request": 1.0 / (ok + shed),
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


def test_triton_batches_are_read_from_its_own_counters() -> None:
    # The lines as tritonserver 2.51 (PyTriton 0.7.0) writes them on its metrics port.
    metrics = "\n".join([
        "# HELP nv_inference_count Number of inferences performed (does not include cached "
        "requests)",
        "# TYPE nv_inference_count counter",
        'nv_inference_count{model="bench",version="1"} 250',
        "# HELP nv_inference_exec_count Number of model executions performed (does not "
        "include cached requests)",
        "# TYPE nv_inference_exec_count counter",
        'nv_inference_exec_count{model="bench",version="1"} 10',
        'nv_inference_request_success{model="bench",version="1"} 250'])
    assert triton_batch_totals(metrics) == (250.0, 10.0)
    with pytest.raises(ValueError, match="nv_inference_count"):
        triton_batch_totals("# no model loaded yet\n")
