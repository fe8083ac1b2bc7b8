"""The queue benchmark's pure half: merge the generators' samples, judge the target, split
the CPU time by process group, render the Markdown. No I/O."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

import numpy as np

from bench._spread import median_text as _m
from bench._spread import spread
from bench._spread import spread_text as _mm
from bench.loadgen import LatencyStats, LoadResult

P99_BUDGET_MS = 250.0
MIN_SUCCESS = 0.99
MOSTLY_SERVED = 0.8  # the loads the CPU line is drawn through (cpu_bound_rps)
TARGET_RATIO = 0.8  # issue 15: >= 0.8 of the workers' limit, for every W the CPUs can feed
WORKER_LIMIT_RPS = 1000.0  # 100 items per 100 ms batch, one batch at a time
GROUPS = ("frontends", "workers", "redis", "loadgen")
_STATUS_NAMES = {-1: "timeout", -2: "conn_error"}


def merge_loads(results: Sequence[LoadResult]) -> dict[str, Any]:
    """Statistics over the measured windows of several generators run side by side."""
    lat_ok, lags, statuses = [], [], []
    finished_ok = 0
    for res in results:
        s = res.samples
        window = s.scheduled_s >= res.warmup_s
        ok = (s.status >= 200) & (s.status < 300)
        lat_ok.append(s.latency_s[window & ok])
        lags.append(s.send_lag_s[window])
        statuses.append(s.status[window])
        ends = s.scheduled_s + s.latency_s
        finished_ok += int((ok & (ends >= res.warmup_s)
                            & (ends <= res.warmup_s + res.duration_s)).sum())
    status = np.concatenate(statuses)
    lat = LatencyStats.of(np.concatenate(lat_ok))
    lag = LatencyStats.of(np.concatenate(lags))
    codes, counts = np.unique(status, return_counts=True)
    names = {-1: "timeout", -2: "conn_error"}
    return {
        "offered_rps": sum(r.offered_rate_rps for r in results),
        "sent": int(status.size),
        "throughput_rps": finished_ok / results[0].duration_s,
        "success_ratio": lat.count / status.size if status.size else 0.0,
        "p50_ms": (lat.p50_s or 0) * 1000, "p90_ms": (lat.p90_s or 0) * 1000,
        "p99_ms": (lat.p99_s or 0) * 1000, "max_ms": (lat.max_s or 0) * 1000,
        "status_counts": {names.get(int(c), str(int(c))): int(k)
                          for c, k in zip(codes, counts, strict=True)},
        "send_lag_p99_ms": (lag.p99_s or 0) * 1000,
        "on_schedule": all(r.is_on_schedule() for r in results),
    }


def meets_target(row: dict[str, Any]) -> bool:
    """p99 of the 2xx answers within the budget and at least 99% answered 2xx (medians)."""
    return (row["p99_ms"]["median"] <= P99_BUDGET_MS
            and row["success_ratio"]["median"] >= MIN_SUCCESS)


def highest_meeting(rows: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
    """The row with the highest offered load that meets the target (None: none does)."""
    passing = [r for r in rows if meets_target(r)]
    return max(passing, key=lambda r: r["offered_rps"]) if passing else None


FALLBACK_RPS = (300.0, 200.0, 100.0, 50.0)


def keeps_up(row: dict[str, Any]) -> bool:
    """Not saturated: 2xx throughput at least 95% of the offered load (medians)."""
    return bool(row["throughput_rps"]["median"] >= 0.95 * row["offered_rps"])


def next_load(tried: Sequence[dict[str, Any]], ladder: Sequence[float],
              fallback: Sequence[float] = FALLBACK_RPS, *,
              until_saturated: bool = False) -> float | None:
    """The next load to measure (None: done). Up ``ladder`` while the target is met (or,
    ``until_saturated``, while the load is kept up with); after the first miss stop, unless
    nothing has met the target yet: then down ``fallback`` until a load does, so that the
    capacity is a number."""
    if not tried:
        return ladder[0] if ladder else None
    last = tried[-1]["offered_rps"]
    if until_saturated and keeps_up(tried[-1]) and last >= (ladder[0] if ladder else 0):
        return next((r for r in ladder if r > last), None)
    if meets_target(tried[-1]):
        if ladder and last < ladder[0]:
            return None  # a fallback load met it: the loads above it did not
        return next((r for r in ladder if r > last), None)
    if highest_meeting(tried) is None:
        lowest = min(r["offered_rps"] for r in tried)
        return next((r for r in fallback if r < lowest), None)
    return None


def cpu_split(before: dict[str, float], after: dict[str, float], requests: int,
              wall_s: float) -> dict[str, dict[str, float]]:
    """Per group of processes: CPU ms per request sent and cores used over ``wall_s``."""
    out = {}
    for group, start in before.items():
        used = max(0.0, after.get(group, start) - start)
        out[group] = {"ms_per_request": 1000 * used / requests if requests else 0.0,
                      "cores": used / wall_s if wall_s > 0 else 0.0}
    return out


def summarise(rate: float, runs: list[dict[str, Any]], keys: Sequence[str]) -> dict[str, Any]:
    row: dict[str, Any] = {"offered_rps": rate, "runs": runs}
    for key in keys:
        row[key] = spread([r[key] for r in runs])
    groups = runs[0]["cpu"].keys()
    row["cpu"] = {g: {k: spread([r["cpu"][g][k] for r in runs])
                      for k in ("ms_per_request", "cores")} for g in groups}
    return row


def per_kill(samples: Sequence[tuple[np.ndarray, np.ndarray, np.ndarray]],
             kills: Sequence[dict[str, Any]], window_s: float) -> list[dict[str, Any]]:
    """For each kill, the requests due in the ``window_s`` after it: how many, answered 2xx,
    429, timed out, and the p99 of the 2xx. ``samples``: (due s, latency s, status) arrays
    per generator, due times on the kills' clock."""
    due = np.concatenate([s[0] for s in samples])
    lat = np.concatenate([s[1] for s in samples])
    status = np.concatenate([s[2] for s in samples])
    out = []
    for kill in kills:
        sel = (due >= kill["at_s"]) & (due < kill["at_s"] + window_s)
        ok = sel & (status >= 200) & (status < 300)
        stats = LatencyStats.of(lat[ok])
        out.append({**kill, "due": int(sel.sum()), "ok": int(ok.sum()),
                    "status_429": int((sel & (status == 429)).sum()),
                    "timeouts": int((sel & (status < 0)).sum()),
                    "p99_ms": (stats.p99_s or 0) * 1000})
    return out


def cpu_bound_rps(rows: Sequence[dict[str, Any]], cores: int,
                  groups: Sequence[str] = GROUPS) -> float | None:
    """The offered load at which ``groups``' CPU would fill ``cores``: a straight line
    through the cores they used at each load where most requests (>= 80%) were served (the
    intercept is what the processes burn idle); with one such load, through the origin.
    None: no such load."""
    points = [(r["offered_rps"], sum(r["cpu"][g]["cores"]["median"] for g in groups))
              for r in rows if r["success_ratio"]["median"] >= MOSTLY_SERVED]
    if not points:
        return None
    if len({x for x, _ in points}) == 1:
        x, y = points[-1]
        return cores * x / y if y > 0 else None
    slope, intercept = np.polyfit([p[0] for p in points], [p[1] for p in points], 1)
    return float((cores - intercept) / slope) if slope > 0 else None


def progress(what: str, row: dict[str, Any]) -> str:
    """One line per load point for the console."""
    cpu = row["cpu"]
    cores = " ".join(f"{g} {cpu[g]['cores']['median']:.2f}" for g in (*GROUPS, "others"))
    return (f"{what} {row['offered_rps']:>5.0f} req/s: {row['throughput_rps']['median']:.0f} "
            f"ok/s p99 {row['p99_ms']['median']:.0f} ms ok {row['success_ratio']['median']:.4f}"
            f" batch {row['mean_batch']['median']:.0f}; cores {cores}")


# -- Markdown -------------------------------------------------------------------------------
def _cpu_cells(row: dict[str, Any]) -> str:
    cpu = row["cpu"]
    per_req = " / ".join(_m(cpu[g]["ms_per_request"], ".2f") for g in GROUPS)
    cores = " / ".join(_m(cpu[g]["cores"], ".2f") for g in (*GROUPS, "others"))
    return f"{per_req} | {cores} | {_m(cpu['machine']['cores'], '.2f')}"


def _capacity(res: dict[str, Any], cores: int) -> list[str]:
    lines = ["### Capacity (2 frontends, W workers)", "",
             "| W | offered req/s | 2xx/s | 2xx ratio | p50 ms | p99 ms (min-max) | mean batch "
             "| CPU ms/request: frontends / workers / redis / generators | cores: frontends / "
             "workers / redis / generators / others | machine busy cores | target |",
             "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- | ---: | --- |"]
    for cfg in res["configs"]:
        for r in cfg["rows"]:
            lines.append(
                f"| {cfg['workers']} | {r['offered_rps']:.0f} | {_m(r['throughput_rps'])} | "
                f"{_m(r['success_ratio'], '.4f')} | {_m(r['p50_ms'])} | {_mm(r['p99_ms'])} | "
                f"{_m(r['mean_batch'], '.1f')} | {_cpu_cells(r)} | "
                f"{'met' if meets_target(r) else 'missed'} |")
    lines += ["", "| W | physical limit req/s | highest load with p99 ≤ 250 ms and ≥ 99% 2xx | "
              "ratio | CPU full at, req/s (all our processes / servers only) | the CPUs "
              "can feed 0.8 x limit | ≥ 0.8 |",
              "| ---: | ---: | ---: | ---: | --- | --- | --- |"]
    for cfg in res["configs"]:
        bounds = [cpu_bound_rps(cfg["rows"], cores, g) for g in (GROUPS, GROUPS[:3])]
        bound = " / ".join("-" if b is None else f"{b:.0f}" for b in bounds)
        top = cfg["highest_meeting_rps"]
        # The load generators share the machine: what its CPUs feed is all our processes'.
        feeds = bounds[0] is not None and bounds[0] >= TARGET_RATIO * cfg["limit_rps"]
        verdict = ("yes" if cfg["ratio"] >= TARGET_RATIO
                   else "no" if feeds else "beyond these CPUs")
        lines.append(f"| {cfg['workers']} | {cfg['limit_rps']:.0f} | "
                     f"{'-' if top is None else format(top, '.0f')} | {cfg['ratio']:.2f} | "
                     f"{bound} | {'yes' if feeds else 'no'} | {verdict} |")
    return [*lines, ""]


def _overhead(res: dict[str, Any]) -> list[str]:
    lines = [f"### In-process against queue-decoupled at {res['rate']:.0f} req/s", "",
             "| mode | 2xx/s | 2xx ratio | p50 ms | p90 ms | p99 ms (min-max) | mean batch | "
             "CPU ms/request: frontends / workers / redis / generators | cores: frontends / "
             "workers / redis / generators / others | machine busy cores |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- | ---: |"]
    for mode, r in res["rows"].items():
        lines.append(f"| {mode} | {_m(r['throughput_rps'])} | {_m(r['success_ratio'], '.4f')} | "
                     f"{_m(r['p50_ms'])} | {_m(r['p90_ms'])} | {_mm(r['p99_ms'])} | "
                     f"{_m(r['mean_batch'], '.1f')} | {_cpu_cells(r)} |")
    verdict = "met" if res["p99_diff_ms"] <= 20 else "missed"
    return [*lines, "", f"p99 difference (queue - in-process, medians): "
            f"{res['p99_diff_ms']:+.1f} ms (target ≤ 20 ms: {verdict})", ""]


def _recovery(res: dict[str, Any]) -> list[str]:
    r = res["row"]
    lines = [f"### Recovery: {res['rate']:.0f} req/s, 2 frontends, 2 workers, one SIGKILLed "
             f"every {res['kill_every_s']:.0f} s and restarted", "",
             "| run | kills | answered (any status) | 2xx ratio | p50 ms | p99 ms | statuses | "
             "held by the killed worker (median) | replacement ready after s (median) | "
             "pending after | dead-lettered |",
             "| ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: |"]
    for i, run in enumerate(r["runs"], 1):
        held = statistics.median(k["held"] for k in run["kills"]) if run["kills"] else 0
        ready = [k["ready_after_s"] for k in run["kills"] if k["ready_after_s"] is not None]
        statuses = ", ".join(f"{k}: {v}" for k, v in run["status_counts"].items())
        lines.append(f"| {i} | {len(run['kills'])} | {run['answered_ratio']:.4f} | "
                     f"{run['success_ratio']:.4f} | {run['p50_ms']:.0f} | {run['p99_ms']:.0f} | "
                     f"{statuses} | {held:.0f} | "
                     f"{statistics.median(ready) if ready else float('nan'):.1f} | "
                     f"{run['pending_after']} | {run['dead_lettered']} |")
    lines += ["", f"Median of runs: 2xx ratio {_mm(r['success_ratio'], '.4f')}, answered "
              f"{_mm(r['answered_ratio'], '.4f')}, p99 {_mm(r['p99_ms'])} ms.", "",
              "Per kill (first run): the requests due in the 5 s after it.", "",
              "| kill at s | held | ready after s | due | 2xx | 429 | timeouts | p99 ms |",
              "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for k in r["runs"][0]["per_kill"]:
        lines.append(f"| {k['at_s']:.1f} | {k['held']} | {k['ready_after_s']} | {k['due']} | "
                     f"{k['ok']} | {k['status_429']} | {k['timeouts']} | {k['p99_ms']:.0f} |")
    return [*lines, ""]


def markdown(context: dict[str, Any], results: Sequence[dict[str, Any]]) -> str:
    """The results as Markdown: the run's context, then one section per figure."""
    load = context["load_avg_at_start"]
    changed = context.get("predictor_changed")
    lines = [f"Command: `{context['command']}`  ", f"Machine: {context['machine']}  ",
             f"Commit: {context.get('commit', '?')}"
             + (f" (predictor/ changed: {len(changed)} files, uncommitted)" if changed else "")
             + "  ",
             f"Date: {context['date']}, {context.get('wall_s', 0):.0f} s  ",
             f"Load average at start: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}"
             + (f", at end: {context['load_avg_at_end'][0]:.2f}"
                if "load_avg_at_end" in context else ""), ""]
    cores = int(context["machine"].split()[1])
    for res in results:
        if res["scenario"] == "capacity":
            lines += _capacity(res, cores)
        elif res["scenario"] == "overhead":
            lines += _overhead(res)
        else:
            lines += _recovery(res)
    return "\n".join(lines)
