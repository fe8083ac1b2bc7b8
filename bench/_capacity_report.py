"""The capacity benchmark's report: predicted against measured, as a table and a plot."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench._results import RESULTS


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def _under_load(at_peak: dict[str, Any]) -> str:
    b = at_peak.get("batches") or {}
    if not b:
        return ""
    return (f"At the peak, batches of {b['mean_batch']:.1f} items on average took "
            f"{b['mean_batch_ms']:.1f} ms against the profile's {b['profile_p50_ms']:.1f} ms "
            f"(x{b['inflation']:.2f}). ")


def markdown(context: dict[str, Any], results: Sequence[dict[str, Any]]) -> str:
    lines = [f"# Capacity plans against the real predictor ({context['date']})", "",
             f"`{context['command']}` at {context['commit']}, {context['machine']}, "
             f"{context['runs']} runs of {context['duration_s']:g} s per rate (median by p99).",
             "", "| Workload | Mode | SLO | Knobs (batch, wait, queue) | Predicted p99 at peak | "
             "Measured p99 (runs) | Error | Predicted capacity | Measured capacity | Error |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        k = r["plan"]["knobs"]
        runs = ", ".join(_ms(v) for v in r["at_peak"]["p99s_ms"])
        workers = "" if r["workers"] == 1 else f", {r['workers']} workers"
        lines.append(
            f"| {r['workload']} | {r['mode']}{workers} | {r['slo_ms']:g} ms | "
            f"{k['max_batch_size']}, {k['max_batch_wait_ms']:g} ms, {k['max_queue_size']} | "
            f"{_ms(r['predicted_p99_ms'])} ms at {r['plan']['peak_rps']:.0f} req/s | "
            f"{_ms(r['measured_p99_ms'])} ms ({runs}) | {r['p99_error']:+.1%} "
            f"{'✓' if r['p99_ok'] else '✗'} | {r['predicted_capacity_rps']:.0f} req/s | "
            f"{r['measured_capacity_rps']:.0f} req/s | {r['capacity_error']:+.1%} "
            f"{'✓' if r['capacity_ok'] else '✗'} |")
    lines += ["", "Targets: p99 within 15% of predicted, capacity within 10%.", ""]
    for r in results:
        lines.append(f"**{r['workload']}**: profile t(b) p50 " + ", ".join(
            f"{b['size']}: {b['p50_ms']:.1f} ms" for b in r["profile"]["batches"])
            + f"; edge {r['profile']['edge_ms']:.2f} ms, {r['profile']['edge_cpu_ms']:.2f} ms "
            f"CPU; profiled in {r['profile_s']:.0f} s. " + _under_load(r["at_peak"])
            + "Capacity steps: " + ", ".join(
                f"{s['rate']:.0f} ({_ms(s['p99_ms'])} ms, {s['success_ratio']:.2%}, "
                + (f"host CPU {s['host_cpu_busy']:.0%}, " if "host_cpu_busy" in s else "")
                + f"{'meets' if s['meets'] else 'misses'})" for s in r["capacity_steps"]) + ".")
        lines.append("")
    return "\n".join(lines)


def plot(results: Sequence[dict[str, Any]], stem: str) -> Path:
    """``bench/results/<stem>.png``: predicted against measured p99 and capacity, one
    marker a workload, the identity line and the targets' bands drawn in."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4.2))
    for ax, (pred, meas, band, title, unit) in zip(axes, [
            ("predicted_p99_ms", "measured_p99_ms", 0.15, "p99 at the planned peak", "ms"),
            ("predicted_capacity_rps", "measured_capacity_rps", 0.10,
             "capacity at the SLO", "req/s")], strict=True):
        xs = [float(r[pred]) for r in results if r[meas] is not None]
        ys = [float(r[meas]) for r in results if r[meas] is not None]
        top = max(xs + ys + [1.0]) * 1.2
        ax.plot([0, top], [0, top], color="grey", lw=1, label="measured = predicted")
        ax.fill_between([0, top], [0, top * (1 - band)], [0, top * (1 + band)],
                        color="green", alpha=0.12, label=f"target ±{band:.0%}")
        for r in results:
            if r[meas] is not None:
                ax.scatter(float(r[pred]), float(r[meas]), s=40, zorder=3)
                ax.annotate(r["workload"], (float(r[pred]), float(r[meas])),
                            textcoords="offset points", xytext=(5, -10), fontsize=9)
        ax.set_xlim(0, top)
        ax.set_ylim(0, top)
        ax.set_xlabel(f"predicted ({unit})")
        ax.set_ylabel(f"measured ({unit})")
        ax.set_title(title)
        ax.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"{stem}.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
