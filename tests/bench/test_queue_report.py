"""The queue benchmark's pure half on made-up samples: merging two generators, the target
rule, the CPU split, the per-kill windows and the Markdown. Nothing is started."""

from __future__ import annotations

from typing import Any

import numpy as np

from bench._queue_report import (
    cpu_bound_rps,
    cpu_split,
    highest_meeting,
    markdown,
    meets_target,
    merge_loads,
    next_load,
    per_kill,
    progress,
    summarise,
)
from bench.loadgen import LoadResult, Samples
from bench.loadgen._result import build_result
from bench.loadgen._spec import LoadSpec


def load(rate: float, latencies_s: list[float], statuses: list[int],
         warmup_s: float = 1.0) -> LoadResult:
    """A generator's result whose requests are spread evenly over warm-up + 1 s."""
    n = len(latencies_s)
    spec = LoadSpec(url="http://127.0.0.1:1/p", rate=rate, duration_s=1.0, warmup_s=warmup_s)
    due = (np.arange(n) + 0.5) * (warmup_s + 1.0) / n
    samples = Samples(scheduled_s=due, send_lag_s=np.zeros(n),
                      latency_s=np.array(latencies_s), status=np.array(statuses, np.int16))
    return build_result(spec, samples, max_in_flight=1, connections_opened=1)


def cell(value: float) -> dict[str, float]:
    return {"median": value, "min": value, "max": value}


def row(offered: float, p99_ms: float, success: float = 1.0) -> dict[str, Any]:
    return {"offered_rps": offered, "p99_ms": cell(p99_ms), "success_ratio": cell(success)}


def test_two_generators_merge_over_their_measured_windows_only() -> None:
    # 20 requests each, the first 10 (due in the 1 s warm-up) left out.
    a = load(10, [9.0] * 10 + [0.1] * 10, [200] * 20)
    b = load(10, [9.0] * 10 + [0.2] * 9 + [0.05], [200] * 10 + [200] * 9 + [429])
    merged = merge_loads([a, b])
    assert merged["offered_rps"] == 20
    assert merged["sent"] == 20
    assert merged["status_counts"] == {"200": 19, "429": 1}
    assert merged["success_ratio"] == 19 / 20
    assert merged["p50_ms"] == 100.0 and merged["max_ms"] == 200.0
    assert merged["on_schedule"]


def test_timeouts_and_connection_errors_are_named() -> None:
    merged = merge_loads([load(4, [0.1] * 4, [-1, -2, 200, 200], warmup_s=0.5)])
    assert set(merged["status_counts"]) <= {"timeout", "conn_error", "200"}


def test_the_target_needs_both_the_p99_and_the_success_ratio() -> None:
    assert meets_target(row(800, 250.0, 0.99))
    assert not meets_target(row(800, 250.1))
    assert not meets_target(row(800, 200, 0.989))
    rows = [row(500, 210), row(800, 240), row(1000, 260), row(1200, 230, 0.5)]
    best = highest_meeting(rows)
    assert best is not None and best["offered_rps"] == 800
    assert highest_meeting([row(500, 300)]) is None


def test_cpu_is_split_per_request_and_per_core_and_a_gone_process_counts_nothing() -> None:
    split = cpu_split({"frontends": 10.0, "workers": 5.0}, {"frontends": 12.0}, 1000, 4.0)
    assert split["frontends"] == {"ms_per_request": 2.0, "cores": 0.5}
    assert split["workers"] == {"ms_per_request": 0.0, "cores": 0.0}


def test_summaries_carry_medians_and_the_cpu_spread() -> None:
    runs = [{"p99_ms": v, "cpu": {"redis": {"ms_per_request": v / 100, "cores": 0.1}}}
            for v in (210.0, 205.0, 300.0)]
    out = summarise(800, runs, ("p99_ms",))
    assert out["p99_ms"] == {"median": 210.0, "min": 205.0, "max": 300.0}
    assert out["cpu"]["redis"]["ms_per_request"]["median"] == 2.1


def test_cpu_fills_the_cores_where_the_line_through_the_served_loads_says() -> None:
    def point(offered: float, cores_each: float, served: float) -> dict[str, Any]:
        cpu = {g: {"cores": cell(cores_each)} for g in ("frontends", "workers", "redis",
                                                         "loadgen")}
        return {"offered_rps": offered, "success_ratio": cell(served / offered), "cpu": cpu}

    # 0.1 cores idle, +0.4 cores per 500 req/s (all four groups): 2 cores at 2,375 req/s.
    rows = [point(200, 0.065, 200), point(700, 0.165, 700), point(900, 0.0, 0)]
    bound = cpu_bound_rps(rows, 2)
    assert bound is not None and abs(bound - 2375) < 1e-6
    two = cpu_bound_rps(rows, 2, ("frontends", "workers"))
    assert two is not None and abs(two - 4875) < 1e-6
    assert cpu_bound_rps([point(500, 0.25, 500)], 2) == 1000.0
    assert cpu_bound_rps([point(500, 0.25, 100)], 2) is None


def test_per_kill_windows_count_what_was_due_after_each_kill() -> None:
    due = np.array([0.5, 1.0, 1.5, 2.0, 6.5, 7.0])
    lat = np.array([0.1, 0.2, 0.1, 0.3, 0.1, 0.1])
    status = np.array([200, 429, 200, -1, 200, 200], np.int16)
    kills = [{"at_s": 1.0, "held": 7, "ready_after_s": 1.5}, {"at_s": 6.0, "held": 0,
                                                             "ready_after_s": None}]
    first, second = per_kill([(due, lat, status)], kills, 5.0)
    assert (first["due"], first["ok"], first["status_429"], first["timeouts"]) == (3, 1, 1, 1)
    assert first["held"] == 7 and first["p99_ms"] == 100.0
    assert (second["due"], second["ok"]) == (2, 2)


def test_markdown_renders_every_figure() -> None:
    cpu = {g: {"ms_per_request": cell(0.1), "cores": cell(0.1)}
           for g in ("frontends", "workers", "redis", "loadgen", "machine", "others")}
    point = {**row(800, 240), "throughput_rps": cell(800), "p50_ms": cell(150),
             "p90_ms": cell(200), "mean_batch": cell(80), "cpu": cpu}
    kill = {"at_s": 2.0, "held": 50, "ready_after_s": 1.2, "due": 100, "ok": 90,
            "status_429": 10, "timeouts": 0, "p99_ms": 240.0}
    run = {"kills": [kill], "answered_ratio": 1.0, "success_ratio": 0.95, "p50_ms": 150,
           "p99_ms": 240, "status_counts": {"200": 95, "429": 5}, "pending_after": 0,
           "dead_lettered": 0, "per_kill": [kill]}
    results = [
        {"scenario": "capacity", "configs": [
            {"workers": 1, "limit_rps": 1000, "rows": [point], "highest_meeting_rps": 800,
             "ratio": 0.8},
            # The CPUs fill at 4000 req/s: 0.8 x 2000 is within them, 0.8 x 8000 is not.
            {"workers": 2, "limit_rps": 2000, "rows": [point], "highest_meeting_rps": 800,
             "ratio": 0.4},
            {"workers": 8, "limit_rps": 8000, "rows": [point], "highest_meeting_rps": 800,
             "ratio": 0.1}]},
        {"scenario": "overhead", "rate": 500, "rows": {"in-process": point, "queue": point},
         "p99_diff_ms": 0.0},
        {"scenario": "recovery", "rate": 500, "kill_every_s": 5,
         "row": {"runs": [run], "success_ratio": cell(0.95), "answered_ratio": cell(1.0),
                 "p99_ms": cell(240)}},
    ]
    context = {"command": "python -m bench.queue_bench all", "machine": "x86_64 2 cores",
               "date": "2026-12-01", "load_avg_at_start": (0.5, 0.5, 0.5)}
    text = markdown(context, results)
    assert "| 1 | 1000 | 800 | 0.80 | 4000 / 5333 | yes | yes |" in text, text
    assert "| 2 | 2000 | 800 | 0.40 | 4000 / 5333 | yes | no |" in text
    assert "| 8 | 8000 | 800 | 0.10 | 4000 / 5333 | no | beyond these CPUs |" in text
    assert "+0.0 ms (target ≤ 20 ms: met)" in text
    assert "| 2.0 | 50 | 1.2 | 100 | 90 | 10 | 0 | 240 |" in text
    assert progress("capacity W=1", point).startswith("capacity W=1   800 req/s: 800 ok/s")


def test_the_ladder_climbs_while_met_and_falls_back_when_nothing_is() -> None:
    ladder = [500.0, 800.0, 1000.0]
    assert next_load([], ladder) == 500
    assert next_load([row(500, 200)], ladder) == 800
    assert next_load([row(500, 200), row(800, 200)], ladder) == 1000
    assert next_load([row(500, 200), row(800, 200), row(1000, 200)], ladder) is None
    assert next_load([row(500, 200), row(800, 300)], ladder) is None
    # Nothing met: down the fallback loads until one does.
    assert next_load([row(500, 300)], ladder) == 300
    assert next_load([row(500, 300), row(300, 260)], ladder) == 200
    assert next_load([row(500, 300), row(300, 240)], ladder) is None
    assert next_load([row(500, 300), row(300, 300), row(200, 300), row(100, 300),
                      row(50, 300)], ladder) is None


def test_until_saturated_the_ladder_climbs_past_the_target_while_the_load_is_kept_up() -> None:
    ladder = [500.0, 800.0, 1000.0]

    def point(offered: float, p99_ms: float, throughput: float) -> dict[str, Any]:
        return {**row(offered, p99_ms), "throughput_rps": cell(throughput)}

    assert next_load([point(500, 300, 500)], ladder, until_saturated=True) == 800
    assert next_load([point(500, 200, 500), point(800, 400, 700)], ladder,
                     until_saturated=True) is None
    # Saturated before anything met the target: down the fallback loads.
    assert next_load([point(500, 300, 500), point(800, 400, 700)], ladder,
                     until_saturated=True) == 300
