"""The accuracy report's figures: accuracy per window of each version and role, and the
reliability diagram of each classifier (accuracy against confidence, by score bin)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from common.pages import figure

if TYPE_CHECKING:
    from matplotlib.figure import Figure

COLORS = ("#1a73e8", "#e8710a", "#188038", "#a142f4", "#d93025", "#007b83", "#9aa0a6")


def _name(group: Mapping[str, Any]) -> str:
    return f"version {group['version']} ({group['role']})"


def accuracy_figure(windows: Sequence[Mapping[str, Any]]) -> Figure:
    """Accuracy of each version and role per window, at the window's start."""
    lines: dict[str, tuple[list[Any], list[float]]] = {}  # (window starts, accuracies)
    for window in windows:
        start = datetime.fromisoformat(str(window["start"]))
        for group in window["groups"]:
            if group.get("accuracy") is not None:
                xs, ys = lines.setdefault(_name(group), ([], []))
                xs.append(start)
                ys.append(float(group["accuracy"]))
    with figure(3.0) as fig:
        ax = fig.add_subplot()
        for index, (name, (xs, ys)) in enumerate(sorted(lines.items())):
            ax.plot(xs, ys, marker="o", ms=4, lw=1.6, color=COLORS[index % len(COLORS)],
                    label=name)
        ax.set_ylim(-0.02, 1.02)
        ax.set_ylabel("accuracy")
        ax.set_xlabel("window of the prediction (UTC)")
        if lines:
            ax.legend(loc="lower left", frameon=False)
        fig.autofmt_xdate()
        return fig


def calibration_figure(groups: Sequence[Mapping[str, Any]]) -> Figure:
    """Each classifier's accuracy against its mean score, one point per non-empty bin;
    on the diagonal a classifier's scores are its probabilities of being right."""
    with figure(3.6, width=4.8) as fig:
        ax = fig.add_subplot()
        ax.plot([0, 1], [0, 1], color="#9aa0a6", ls="--", lw=1, label="perfectly calibrated")
        for index, group in enumerate(groups):
            bins = [b for b in group.get("calibration", []) if b["items"]]
            ax.plot([b["confidence"] for b in bins], [b["accuracy"] for b in bins],
                    marker="o", ms=4, lw=1.6, color=COLORS[index % len(COLORS)],
                    label=f"{_name(group)}, ECE {group['ece']:.3f}")
        ax.set_xlim(0, 1)
        ax.set_ylim(0, 1)
        ax.set_xlabel("score of the answered class (mean in its bin)")
        ax.set_ylabel("accuracy in the bin")
        ax.legend(loc="upper left", frameon=False, fontsize=8)
        return fig
