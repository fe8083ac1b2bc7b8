"""Markdown for the peer comparison: the capacity summary, each load point, the tuning."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from bench._spread import median_text as _median
from bench._spread import spread_text as _spread
from bench.peers._configs import (
    CPU_RATE_RPS,
    CPU_RATE_SLACK,
    SERVERS,
    SLO_MIN_SUCCESS,
    SLO_P99_MS,
    cpu_row,
    passes_slo,
    slo_p99_ms,
)


def _f(value: Any, fmt: str = ".0f") -> str:
    return "-" if value is None else format(float(value), fmt)


def _statuses(row: Mapping[str, Any]) -> str:
    counts = row.get("status_counts") or {}
    return " ".join(f"{code}:{_f(c['median'])}" for code, c in counts.items()) or "-"


def capacity_table(results: Mapping[str, Any]) -> list[str]:
    """One line per server and workload: the highest load meeting the workload's SLO,
    the throughput at saturation, each with its ratio to the physical limit."""
    budgets = ", ".join(f"{name} p99 ≤ {ms:.0f} ms" for name, ms in SLO_P99_MS.items())
    lines = [f"Highest offered load sustained with ≥ {SLO_MIN_SUCCESS:.0%} answered 2xx and "
             f"{budgets} (median of runs), and the throughput at saturation (the most 2xx "
             "answers a second at any load):", "",
             "| workload | physical limit req/s | server | sustained req/s | ratio to limit | "
             "saturation req/s | ratio |",
             "| --- | ---: | --- | ---: | ---: | ---: | ---: |"]
    for part in results["workloads"]:
        limit = part["physical_limit_rps"]
        for line in part["servers"]:
            load = line["sustained_rps"]
            below = min(r["offered_rps"] for r in line["rows"]) if line["rows"] else None
            shown = _f(load) if load is not None else f"< {_f(below)}"
            sat = line.get("saturation_rps")
            lines.append(f"| {part['key']} | {_f(limit)} | {line['label']} | {shown} | "
                         f"{_f(_ratio(load, limit), '.2f')} | {_f(sat)} | "
                         f"{_f(_ratio(sat, limit), '.2f')} |")
    return [*lines, ""]


def cpu_table(results: Mapping[str, Any]) -> list[str]:
    """Server CPU per request (whole process tree) at 500 req/s or half of saturation."""
    lines = [f"Server CPU per request (user + system of the whole process tree, over every "
             f"request sent), at {CPU_RATE_RPS:.0f} req/s or the highest load at or under half "
             f"the server's saturation (within {CPU_RATE_SLACK:.0%}), whichever is lower:",
             "",
             "| workload | server | protocol | at req/s | CPU ms per request (min-max) |",
             "| --- | --- | --- | ---: | ---: |"]
    for part in results["workloads"]:
        for line in part["servers"]:
            row = cpu_row(line["rows"])
            cell = _spread(row["cpu_ms_per_request"], ".3f") \
                if row and row.get("cpu_ms_per_request") else "-"
            lines.append(f"| {part['key']} | {line['label']} | {line.get('protocol_used', '-')} "
                         f"| {_f(row['offered_rps'] if row else None)} | {cell} |")
    return [*lines, ""]


def verdict(results: Mapping[str, Any]) -> list[str]:
    """Issue 18's targets for our predictor, checked on every workload, said plainly.

    Fixed-latency: the highest load at the SLO at least 0.8 of the limit and at least
    1.2x the best peer's. Embedding: saturation throughput at least the best peer's and
    at least 0.8 of the model's in-process rate. Everywhere: CPU per request at most
    the lowest peer's.
    """
    out = []
    for part in results["workloads"]:
        ours = [s for s in part["servers"] if SERVERS[s["server"]].ours]
        peers = [s for s in part["servers"] if not SERVERS[s["server"]].ours]
        if not ours or not peers:
            continue
        limit = part["physical_limit_rps"] or 0.0
        key = "sustained_rps" if part["name"] == "fixed-latency" else "saturation_rps"
        what = "sustains" if key == "sustained_rps" else "saturates at"
        factor_needed = 1.2 if key == "sustained_rps" else 1.0
        best_ours = max(s.get(key) or 0.0 for s in ours)
        best_peer = max(s.get(key) or 0.0 for s in peers)
        factor = best_ours / best_peer if best_peer else float("inf")
        ratio = best_ours / limit if limit else 0.0
        ok_factor, ok_ratio = factor >= factor_needed, ratio >= 0.8
        out.append(f"- {part['key']}: modelctl {what} {best_ours:.0f} req/s, the best peer "
                   f"{best_peer:.0f} req/s ({factor:.2f}x, needs {factor_needed:g}x: "
                   f"{_yes(ok_factor)}); {ratio:.2f} of the physical limit (needs 0.8: "
                   f"{_yes(ok_ratio)}): target {'met' if ok_factor and ok_ratio else 'NOT met'}.")
        our_cpu = [s["cpu_ms_per_request"] for s in ours if s.get("cpu_ms_per_request")]
        peer_cpu = [s["cpu_ms_per_request"] for s in peers if s.get("cpu_ms_per_request")]
        if our_cpu and peer_cpu:
            lowest = min(peer_cpu)
            out.append(f"- {part['key']}: modelctl spends {min(our_cpu):.3f} ms of CPU per "
                       f"request, the lowest peer {lowest:.3f} ms (needs at most that: "
                       f"{_yes(min(our_cpu) <= lowest)}).")
    return [*out, ""]


def _ratio(value: Any, limit: Any) -> float | None:
    return None if value is None or not limit else float(value) / float(limit)


def _yes(ok: bool) -> str:
    return "yes" if ok else "no"


def ladder_table(part: Mapping[str, Any]) -> list[str]:
    """Every load point of one workload, every server: median (min-max) of the runs."""
    lines = [f"#### {part['key']} (physical limit {_f(part['physical_limit_rps'])} req/s)", "",
             "| server | offered | ok/s | success | p50 ms | p90 ms | p99 ms (min-max) | "
             "max ms | statuses (median) | mean batch | server CPU cores | CPU ms/req | SLO |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: "
             "| --- |"]
    slo = slo_p99_ms(part["name"])
    for line in part["servers"]:
        for r in line["rows"]:
            lines.append(
                f"| {line['label']} | {_f(r['offered_rps'])} | {_median(r['throughput_rps'])} | "
                f"{_median(r['success_ratio'], '.3f')} | {_median(r['p50_ms'])} | "
                f"{_median(r['p90_ms'])} | {_spread(r['p99_ms'])} | {_median(r['max_ms'])} | "
                f"{_statuses(r)} | {_median(r['mean_batch'], '.1f')} | "
                f"{_median(r['server_cpu_cores'], '.2f')} | "
                f"{_median(r.get('cpu_ms_per_request'), '.3f')} | "
                f"{'pass' if passes_slo(r, slo) else 'fail'} |")
        if line["loads_not_run"]:
            lines.append(f"| {line['label']} | not run (past saturation): "
                         f"{', '.join(_f(x) for x in line['loads_not_run'])} "
                         "| | | | | | | | | | | |")
    return [*lines, ""]


def tuning_table(tuning: Mapping[str, Any]) -> list[str]:
    """Each knob value tried and the load it sustained (one run per point, see protocol)."""
    lines = ["| server | tuned on | knob | value | sustained req/s | loads tried (pass/fail) "
             "| chosen |", "| --- | --- | --- | ---: | ---: | --- | --- |"]
    for server, sweep in tuning["servers"].items():
        workload = sweep.get("workload", "fixed-latency")
        slo = float(sweep.get("slo_p99_ms", SLO_P99_MS["fixed-latency"]))
        for entry in sweep["values"]:
            tried = ", ".join(f"{_f(r['offered_rps'])} {'✓' if passes_slo(r, slo) else '✗'}"
                              for r in entry["rows"])
            chosen = "best" if entry["value"] == sweep["best"] else ""
            if entry["value"] == sweep["default"]:
                chosen = (chosen + " default").strip()
            lines.append(f"| {server} | {workload} | {sweep['knob']} | {entry['value']:g} | "
                         f"{_f(entry['sustained_rps'])} | {tried} | {chosen} |")
    return [*lines, ""]


def markdown(results: Mapping[str, Any]) -> str:
    """The whole Markdown report for ``bench/results/peers.md``."""
    lines = [f"Command: `{results['command']}`  ", f"Machine: {results['machine']}  ",
             f"Date: {results['date']}  ",
             f"Protocol: {results['protocol_text']}", ""]
    lines += capacity_table(results)
    lines += cpu_table(results)
    lines += ["Targets (issue 18): on fixed-latency, modelctl's highest load at the SLO ≥ 0.8 "
              "of the physical limit and ≥ 1.2x the best peer's; on the embedding model, its "
              "saturation throughput ≥ the best peer's and ≥ 0.8 of the model's in-process "
              "batched rate on the same machine; everywhere, CPU per request ≤ the lowest "
              "peer's.", ""]
    lines += verdict(results)
    if results.get("tuning"):
        lines += ["Tuning sweep (one run per load point):", "",
                  *tuning_table(results["tuning"])]
    for part in results["workloads"]:
        lines += ladder_table(part)
    return "\n".join(lines)
