"""A figure over repeated runs: its median, min and max, and how reports print it.

One place for the peer benchmark (bench/peers) and the queue benchmark
(bench/queue_bench): a cell is ``{"median", "min", "max"}``, or None when no run had the
figure; printed ``-`` then.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence


def spread(values: Sequence[float]) -> dict[str, float] | None:
    """The median, min and max of ``values`` (None for none)."""
    if not values:
        return None
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def _number(value: float | None, fmt: str) -> str:
    return "-" if value is None else format(float(value), fmt)


def median_text(cell: Mapping[str, float] | None, fmt: str = ".0f") -> str:
    """``cell``'s median, formatted."""
    return "-" if not cell else _number(cell["median"], fmt)


def spread_text(cell: Mapping[str, float] | None, fmt: str = ".0f") -> str:
    """``median (min-max)``, formatted."""
    if not cell:
        return "-"
    return (f"{_number(cell['median'], fmt)} ({_number(cell['min'], fmt)}-"
            f"{_number(cell['max'], fmt)})")
