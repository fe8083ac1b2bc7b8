"""Markdown for the peer comparison: the capacity summary, each load point, the tuning."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from bench._spread import median_text as _median
from bench._spread import spread_text as _spread
from bench.peers._configs import LOOSE_P99_MS, SLO_MIN_SUCCESS, SLO_P99_MS, passes_slo


def _f(value: Any, fmt: str = ".0f") -> str:
    return "-" if value is None else format(float(value), fmt)


def _statuses(row: Mapping[str, Any]) -> str:
    counts = row.get("status_counts") or {}
    return " ".join(f"{code}:{_f(c['median'])}" for code, c in counts.items()) or "-"


def capacity_table(results: Mapping[str, Any]) -> list[str]:
    """One line per server and workload: the highest load meeting the SLO, and its ratio."""
    lines = [f"Highest offered load sustained with p99 ≤ {SLO_P99_MS:.0f} ms and ≥ "
             f"{SLO_MIN_SUCCESS:.0%} success (median of runs); beside it, the same with the "
             f"looser p99 ≤ {LOOSE_P99_MS:.0f} ms (not the target, see the notes):", "",
             "| workload | physical limit req/s | server | sustained req/s | ratio to limit | "
             f"at p99 ≤ {LOOSE_P99_MS:.0f} ms | ratio |",
             "| --- | ---: | --- | ---: | ---: | ---: | ---: |"]
    for part in results["workloads"]:
        limit = part["physical_limit_rps"]
        for line in part["servers"]:
            load = line["sustained_rps"]
            ratio = None if load is None or not limit else load / limit
            below = min(r["offered_rps"] for r in line["rows"]) if line["rows"] else None
            shown = _f(load) if load is not None else f"< {_f(below)}"
            loose = line.get("sustained_loose_rps")
            loose_ratio = None if loose is None or not limit else loose / limit
            lines.append(f"| {part['key']} | {_f(limit)} | {line['label']} | {shown} | "
                         f"{_f(ratio, '.2f')} | {_f(loose)} | {_f(loose_ratio, '.2f')} |")
    return [*lines, ""]


def verdict(results: Mapping[str, Any]) -> list[str]:
    """Issue 9's target for our predictor, checked on every workload, said plainly.

    Both conditions must hold: at least 1.5x the best peer's sustained load, and at
    least 0.8 of the workload's physical limit.
    """
    out = []
    for part in results["workloads"]:
        ours = [s["sustained_rps"] or 0.0 for s in part["servers"] if s["server"] == "modelctl"]
        peers = [s["sustained_rps"] or 0.0 for s in part["servers"] if s["server"] != "modelctl"]
        if not ours or not peers:
            continue
        best_ours, best_peer = max(ours), max(peers)
        limit = part["physical_limit_rps"] or 0.0
        factor = best_ours / best_peer if best_peer else float("inf")
        ratio = best_ours / limit if limit else 0.0
        meets = factor >= 1.5 and ratio >= 0.8
        out.append(f"- {part['key']}: modelctl sustains {best_ours:.0f} req/s, the best peer "
                   f"{best_peer:.0f} req/s ({factor:.2f}x, needs 1.5x: "
                   f"{'yes' if factor >= 1.5 else 'no'}); {ratio:.2f} of the physical limit "
                   f"(needs 0.8: {'yes' if ratio >= 0.8 else 'no'}): "
                   f"target {'met' if meets else 'NOT met'}.")
    return [*out, ""]


def ladder_table(part: Mapping[str, Any]) -> list[str]:
    """Every load point of one workload, every server: median (min-max) of the runs."""
    lines = [f"#### {part['key']} (physical limit {_f(part['physical_limit_rps'])} req/s)", "",
             "| server | offered | ok/s | success | p50 ms | p90 ms | p99 ms (min-max) | "
             "max ms | statuses (median) | mean batch | server CPU cores | SLO |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: | --- |"]
    for line in part["servers"]:
        for r in line["rows"]:
            lines.append(
                f"| {line['label']} | {_f(r['offered_rps'])} | {_median(r['throughput_rps'])} | "
                f"{_median(r['success_ratio'], '.3f')} | {_median(r['p50_ms'])} | "
                f"{_median(r['p90_ms'])} | {_spread(r['p99_ms'])} | {_median(r['max_ms'])} | "
                f"{_statuses(r)} | {_median(r['mean_batch'], '.1f')} | "
                f"{_median(r['server_cpu_cores'], '.2f')} | "
                f"{'pass' if passes_slo(r) else 'fail'} |")
        if line["loads_not_run"]:
            lines.append(f"| {line['label']} | not run (past saturation): "
                         f"{', '.join(_f(x) for x in line['loads_not_run'])} "
                         "| | | | | | | | | | |")
    return [*lines, ""]


def tuning_table(tuning: Mapping[str, Any]) -> list[str]:
    """Each knob value tried and the load it sustained (one run per point, see protocol)."""
    lines = ["| server | knob | value | sustained req/s | loads tried (pass/fail) | chosen |",
             "| --- | --- | ---: | ---: | --- | --- |"]
    for server, sweep in tuning["servers"].items():
        for entry in sweep["values"]:
            tried = ", ".join(f"{_f(r['offered_rps'])} {'✓' if passes_slo(r) else '✗'}"
                              for r in entry["rows"])
            chosen = "best" if entry["value"] == sweep["best"] else ""
            if entry["value"] == sweep["default"]:
                chosen = (chosen + " default").strip()
            lines.append(f"| {server} | {sweep['knob']} | {entry['value']:g} | "
                         f"{_f(entry['sustained_rps'])} | {tried} | {chosen} |")
    return [*lines, ""]


def markdown(results: Mapping[str, Any]) -> str:
    """The whole Markdown report for ``bench/results/peers.md``."""
    lines = [f"Command: `{results['command']}`  ", f"Machine: {results['machine']}  ",
             f"Date: {results['date']}  ",
             f"Protocol: {results['protocol_text']}", ""]
    lines += capacity_table(results)
    lines += ["Target (issue 9): modelctl highest of all by ≥ 1.5x over the best peer, and "
              "≥ 0.8 of the physical limit (for embedding: the model's in-process batched "
              "throughput on the same machine).", ""]
    lines += verdict(results)
    if results.get("tuning"):
        lines += ["Tuning sweep (fixed-latency):", "", *tuning_table(results["tuning"])]
    for part in results["workloads"]:
        lines += ladder_table(part)
    return "\n".join(lines)
