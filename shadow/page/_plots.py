"""The shadow report's figures: latency CDFs of both sides, the cosine similarity
distribution (embeddings) and the confusion matrix (classification)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from common.pages import figure

if TYPE_CHECKING:
    from matplotlib.figure import Figure

COLORS = {"primary": "#1a73e8", "shadow": "#e8710a"}
PERCENTS = list(range(1, 100))  # the report's percentiles 1-99


def _cdf(ax: Any, values: Sequence[float], **style: Any) -> None:
    """Percentiles 1-99 as a cumulative distribution."""
    ax.plot(list(values), PERCENTS[:len(values)], **style)
    ax.set_ylim(0, 100)
    ax.set_ylabel("share of requests at or below (%)")


def latency_figure(latency: Mapping[str, Mapping[str, Any]]) -> Figure:
    with figure(3.0) as fig:
        ax = fig.add_subplot()
        for side in ("primary", "shadow"):
            values = latency.get(side, {}).get("percentiles") or []
            if values:
                _cdf(ax, values, color=COLORS[side], lw=1.8, label=side)
        ax.set_xlabel("latency of answered pairs (ms)")
        ax.set_xlim(left=0)
        ax.legend(loc="lower right", frameon=False)
        return fig


def cosine_figure(cosine: Mapping[str, Any], threshold: float | None) -> Figure:
    with figure(3.0) as fig:
        ax = fig.add_subplot()
        _cdf(ax, cosine.get("percentiles") or [], color=COLORS["shadow"], lw=1.8,
             label="shadow against primary, per item")
        if threshold is not None:
            ax.axvline(threshold, color="#d93025", ls="--", lw=1,
                       label=f"p5 threshold {threshold:g}")
        ax.set_xlabel("cosine similarity of the two embeddings")
        ax.legend(loc="upper left", frameon=False)
        return fig


def confusion_figure(cells: Sequence[Mapping[str, Any]]) -> Figure:
    """Primary label (rows) against shadow label (columns), counts in the cells; every
    label seen on either side on both axes, so agreement is the diagonal."""
    labels = sorted({str(c["primary"]) for c in cells} | {str(c["shadow"]) for c in cells})
    grid = [[0] * len(labels) for _ in labels]
    for c in cells:
        grid[labels.index(str(c["primary"]))][labels.index(str(c["shadow"]))] += int(c["count"])
    size = max(2.8, 0.45 * len(labels) + 1.6)
    with figure(size, width=size + 0.6) as fig:
        ax = fig.add_subplot()
        ax.imshow(grid, cmap="Blues", vmin=0)
        ax.set_xticks(range(len(labels)), labels, rotation=45, ha="right")
        ax.set_yticks(range(len(labels)), labels)
        ax.set_xlabel("shadow's label")
        ax.set_ylabel("primary's label")
        top = max((n for row in grid for n in row), default=0)
        for i, row in enumerate(grid):
            for j, n in enumerate(row):
                ax.text(j, i, str(n), ha="center", va="center",
                        color="#fff" if n > top / 2 else "#202124")
        ax.spines[:].set_visible(False)
        return fig
