"""The report's figures, drawn with matplotlib (Agg, no display): the canary's weight
over the rollout with its decisions, and each analysed metric for canary and stable
with every analysis window shaded by the verdict it reached on that metric."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from common.pages import VERDICT_COLORS, figure, png
from rollout._state import WARNING_KINDS
from rollout.report._data import MetricPanel, Report

if TYPE_CHECKING:
    from matplotlib.figure import Figure

COLORS = {"canary": "#e8710a", "stable": "#1a73e8"}


def _scale(report: Report) -> tuple[float, str]:
    """Seconds per x unit and its name: minutes once the rollout spans 20 minutes."""
    return (60.0, "minutes") if report.ended_at - report.started_at > 1200 else (1.0, "seconds")


def _x(report: Report, t: float) -> float:
    unit, _ = _scale(report)
    return (t - report.started_at) / unit


def _decorate(report: Report, ax: Any) -> None:
    _, unit_name = _scale(report)
    ax.set_xlabel(f"{unit_name} since the rollout started")
    ax.set_xlim(_x(report, report.started_at - report.interval_s),
                _x(report, report.ended_at + report.interval_s))
    for decision in report.decisions:
        color = "#d93025" if decision["kind"] in WARNING_KINDS else "#5f6368"
        ax.axvline(_x(report, decision["at"]), color=color, lw=0.6, ls=":", zorder=1)


def weight_figure(report: Report) -> Figure:
    with figure(2.6) as fig:
        ax = fig.add_subplot()
        if report.weights:
            xs = [_x(report, t) for t, _ in report.weights]
            ys = [w for _, w in report.weights]
            xs.append(_x(report, report.ended_at + report.interval_s))
            ys.append(ys[-1])
            ax.step(xs, ys, where="post", color=COLORS["canary"], lw=2, label="canary weight")
        for decision in report.decisions:
            ax.annotate(decision["kind"], (_x(report, decision["at"]), 100), rotation=90,
                        fontsize=7, va="top", ha="right", color="#3c4043")
        ax.set_ylim(0, 105)
        ax.set_ylabel("canary weight (%)")
        _decorate(report, ax)
        return fig


def metric_figure(report: Report, panel: MetricPanel) -> Figure:
    with figure(3.0) as fig:
        ax = fig.add_subplot()
        for window in report.windows:
            verdict = window.metrics.get(panel.name, {}).get("verdict") or "Inconclusive"
            ax.axvspan(_x(report, window.start), _x(report, window.end),
                       color=VERDICT_COLORS.get(str(verdict), "#9aa0a6"), alpha=0.18, lw=0)
        for role in ("stable", "canary"):
            points = panel.series.get(role, [])
            if points:
                ax.plot([_x(report, t) for t, _ in points], [v for _, v in points],
                        color=COLORS[role], lw=1.5, label=role)
        if panel.error:
            ax.text(0.5, 0.5, f"no data: {panel.error}", transform=ax.transAxes,
                    ha="center", va="center", color="#d93025", wrap=True)
        elif any(panel.series.values()):
            ax.legend(loc="upper left", frameon=False)
        else:
            ax.text(0.5, 0.5, "no series in Prometheus for this rollout", ha="center",
                    va="center", transform=ax.transAxes, color="#5f6368")
        ax.set_ylabel(panel.name)
        ax.set_ylim(bottom=0)
        _decorate(report, ax)
        return fig


def write_pngs(report: Report, directory: Path) -> list[Path]:
    """``timeline.png`` and one ``<metric>.png`` per analysed metric into ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    written = [directory / "timeline.png"]
    written[0].write_bytes(png(weight_figure(report)))
    for panel in report.metrics:
        path = directory / f"{panel.name}.png"
        path.write_bytes(png(metric_figure(report, panel)))
        written.append(path)
    return written
