"""Rendering shared by every command: rich tables for people, JSON for scripts."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from rich.console import Console
from rich.table import Table


def stdout() -> Console:
    """A console on stdout (built per call: nothing is constructed at import)."""
    return Console(highlight=False, soft_wrap=True)


def stderr() -> Console:
    return Console(stderr=True, highlight=False, soft_wrap=True)


def print_json(data: Any) -> None:
    """Machine-readable output: one JSON document on stdout."""
    sys.stdout.write(json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")


def num(value: Any, digits: int = 4) -> str:
    """A number for a table cell: floats to ``digits`` significant digits, None as ``-``."""
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}g}"
    return str(value)


def table(title: str | None, columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> Table:
    t = Table(title=title, title_justify="left", header_style="bold")
    for column in columns:
        t.add_column(column)
    for row in rows:
        t.add_row(*("" if cell is None else str(cell) for cell in row))
    return t


def emit(data: Any, as_json: bool, render: Callable[[Console], None]) -> None:
    """Print ``data`` as JSON when asked, else let ``render`` draw it for people."""
    if as_json:
        print_json(data)
    else:
        render(stdout())
