"""Plots of the peer comparison: p99 latency and throughput against offered load, and
CPU per request.

One PNG per workload (``peers-<workload>.png``) with two panels, one line per
server, min-max of the runs as error bars, and the physical limit drawn in (the
ideal throughput ``min(offered, limit)``, the limit itself, the latency floor and
the workload's p99 budget); and ``peers-cpu.png``, server CPU per request as bars,
one group per workload.

    python -m bench.plots [bench/results/peers.json] [--out bench/results]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from bench.peers._configs import cpu_row, slo_p99_ms

RESULTS = Path(__file__).parent / "results"


def _series(rows: list[dict[str, Any]], key: str) -> tuple[list[float], ...]:
    xs, ys, lo, hi = [], [], [], []
    for r in rows:
        cell = r[key]
        if not cell:
            continue
        xs.append(float(r["offered_rps"]))
        ys.append(float(cell["median"]))
        lo.append(float(cell["median"]) - float(cell["min"]))
        hi.append(float(cell["max"]) - float(cell["median"]))
    return xs, ys, lo, hi


def plot_workload(part: dict[str, Any], out_dir: Path, title: str) -> Path:
    """Write ``peers-<key>.png`` for one workload; returns its path."""
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt
    from matplotlib.ticker import NullFormatter, ScalarFormatter

    fig, (ax_lat, ax_tput) = plt.subplots(1, 2, figsize=(13, 5))
    limit = part.get("physical_limit_rps")
    top = max([float(r["offered_rps"]) for s in part["servers"] for r in s["rows"]] or [1.0])
    for line in part["servers"]:
        xs, ys, lo, hi = _series(line["rows"], "p99_ms")
        ax_lat.errorbar(xs, ys, yerr=[lo, hi], marker="o", capsize=3, label=line["label"])
        xs, ys, lo, hi = _series(line["rows"], "throughput_rps")
        ax_tput.errorbar(xs, ys, yerr=[lo, hi], marker="o", capsize=3, label=line["label"])
    budget = slo_p99_ms(part["name"])
    ax_lat.axhline(budget, color="red", linestyle="--", label=f"p99 budget {budget:.0f} ms")
    if part.get("latency_floor_ms"):
        ax_lat.axhline(part["latency_floor_ms"], color="grey", linestyle=":",
                       label=f"latency floor {part['latency_floor_ms']:.0f} ms")
    if limit:
        ax_lat.axvline(limit, color="black", linestyle="--",
                       label=f"physical limit {limit:.0f} req/s")
        bottom = min([float(r["offered_rps"]) for s in part["servers"] for r in s["rows"]]
                     or [1.0])
        xs = [bottom * (max(top, limit) / bottom) ** (i / 200) for i in range(201)]
        ax_tput.plot(xs, [min(x, limit) for x in xs], color="black", linestyle="--",
                     label=f"physical limit: min(offered, {limit:.0f})")
    # Loads span 5 to 1,000+ req/s: log axes keep the low points readable.
    for ax in (ax_lat, ax_tput):
        ax.set_xscale("log")
        ax.set_yscale("log")
        for axis in (ax.xaxis, ax.yaxis):
            axis.set_major_formatter(ScalarFormatter())
            axis.set_minor_formatter(NullFormatter())
    ax_lat.set_xlabel("offered load (req/s)")
    ax_lat.set_ylabel("p99 latency of 2xx answers (ms, log)")
    ax_lat.set_title(f"{title}: p99 latency")
    ax_tput.set_xlabel("offered load (req/s)")
    ax_tput.set_ylabel("achieved throughput, 2xx (req/s)")
    ax_tput.set_title(f"{title}: throughput")
    for ax in (ax_lat, ax_tput):
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    path = out_dir / f"peers-{part['key']}.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_cpu(results: dict[str, Any], out_dir: Path) -> Path | None:
    """Write ``peers-cpu.png``: CPU per request, one bar per server, one group per
    workload, min-max of the runs as error bars; None when no line has a reading."""
    bars = []  # (workload, label, median, low, high)
    for part in results["workloads"]:
        for line in part["servers"]:
            row = cpu_row(line["rows"])
            cell = row.get("cpu_ms_per_request") if row else None
            if row and cell:
                label = f"{line['label']} at {float(row['offered_rps']):g} req/s"
                bars.append((part["key"], label, float(cell["median"]),
                             float(cell["median"]) - float(cell["min"]),
                             float(cell["max"]) - float(cell["median"])))
    if not bars:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    workloads = list(dict.fromkeys(b[0] for b in bars))
    fig, axes = plt.subplots(1, len(workloads), figsize=(6 * len(workloads), 5), squeeze=False)
    for ax, workload in zip(axes[0], workloads, strict=True):
        mine = [b for b in bars if b[0] == workload]
        ys = range(len(mine))
        ax.barh(list(ys), [b[2] for b in mine], xerr=[[b[3] for b in mine], [b[4] for b in mine]],
                color=["tab:green" if b[1].startswith("modelctl") else "tab:grey" for b in mine],
                capsize=3)
        ax.set_yticks(list(ys), [b[1] for b in mine], fontsize=7)
        ax.set_xlabel("server CPU per request (ms)")
        ax.set_title(f"{workload}: CPU per request")
        ax.grid(True, axis="x", alpha=0.3)
    fig.tight_layout()
    path = out_dir / "peers-cpu.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_all(results_path: Path, out_dir: Path) -> list[Path]:
    """One PNG per workload in ``results_path`` (a ``peers.json``), and the CPU bars."""
    results = json.loads(results_path.read_text())
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for part in results["workloads"]:
        title = part["key"] + (f" ({part['device']})" if part.get("device") else "")
        paths.append(plot_workload(part, out_dir, title))
    cpu = plot_cpu(results, out_dir)
    return [*paths, cpu] if cpu else paths


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("results", nargs="?", type=Path, default=RESULTS / "peers.json")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    for path in plot_all(args.results, args.out or args.results.parent):
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
