"""``modelctl feedback report``: accuracy per version and role, from labels joined with captures.

    find_captures (captures, then labels) ──> DuckDB (_join): latest label per request
        ID joined with the latest capture per request ID, version and role
        │  one Tally per window, version, role and task        (aggregates only)
        v
    totals per version and role (the windows summed) and per window ──> _scores

The document (``build_accuracy_report``) is what ``--json`` prints and the terminal
and HTML views render: the captures and labels read, how many labels matched a
prediction, and per version and role the counts and scores of its task. Problems a
user can cause (no captures or labels, another model, an empty window, a truncated
file) raise ``CaptureError`` with one line.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from accuracy._errors import AccuracyError
from accuracy._join import Join, Key
from accuracy._push import MODEL_NAME
from accuracy._scores import Tally, scores
from captures import check_columns, connect_duckdb, find_captures
from common import format_duration_s, iso_utc, iso_utc_ms

REPORT_KIND = "modelctl.io/feedback-report"
ROLE_ORDER = {"stable": 0, "canary": 1, "shadow": 2}
# Per window, the counts and headline scores; the per-class and calibration tables
# are in the totals only, so that a month of hourly windows stays small.
TOTALS_ONLY = ("classes", "calibration")


@dataclass(frozen=True)
class AccuracyRequest:
    """What to report: a model's labels and captures under one URI, over a time span,
    in windows of ``window_s`` seconds (by the prediction's time). ``labels_uri``: the
    labels from another URI than the captures (the shadow report: a shadow's captures,
    the primary's labels)."""

    model: str
    capture_uri: str
    since: datetime | None = None
    until: datetime | None = None
    window_s: float = 3600.0
    memory_limit_mb: int = 1024
    labels_uri: str | None = None

    def __post_init__(self) -> None:
        if not MODEL_NAME.match(self.model):
            raise AccuracyError(f"invalid model name {self.model!r}")
        if self.since and self.until and self.since >= self.until:
            raise AccuracyError("--since must be before --until")
        if not self.window_s >= 1.0 or self.window_s > 366 * 86400:
            raise AccuracyError(f"--window must be 1s to 366d, got {self.window_s:g}s")
        if self.memory_limit_mb < 64:
            raise AccuracyError("memory limit must be at least 64 MB")

    @property
    def window_ms(self) -> int:
        return round(self.window_s * 1000)


def build_accuracy_report(request: AccuracyRequest, *,
                          now: datetime | None = None) -> dict[str, Any]:
    """The report document; raises CaptureError on captures or labels it cannot use."""
    now = now or datetime.now(tz=UTC)
    captures = find_captures(request.capture_uri)
    labels = find_captures(request.labels_uri or request.capture_uri, labels=True)
    con = connect_duckdb([captures, labels], memory_limit_mb=request.memory_limit_mb)
    try:
        check_columns(con, captures)
        check_columns(con, labels, labels=True)
        join = Join(con, captures, labels, request.model)
        capture_summary = join.open(request.since, request.until, request.window_ms)
        label_summary = {"files": len(labels.files),
                         **join.labels(request.since, request.until)}
        cells = join.tallies()
    finally:
        con.close()
    return {
        "kind": REPORT_KIND, "schema": 1, "model": request.model,
        "generated_at": now.isoformat(),
        "window": {"since": iso_utc(request.since), "until": iso_utc(request.until)},
        "window_s": request.window_ms / 1000, "captures": capture_summary,
        "labels": label_summary, "groups": _totals(cells),
        "windows": _windows(cells, request.window_ms),
    }


def _group_order(key: tuple[str, str, str]) -> tuple[Any, ...]:
    version, role, task = key
    number = (0, int(version), "") if version.isdigit() else (1, 0, version)
    return (*number, ROLE_ORDER.get(role, len(ROLE_ORDER)), role, task)


def _group(key: tuple[str, str, str], tally: Tally) -> dict[str, Any]:
    version, role, task = key
    return {"version": version, "role": role, **scores(task, tally)}


def _totals(cells: dict[Key, Tally]) -> list[dict[str, Any]]:
    totals: dict[tuple[str, str, str], Tally] = {}
    for (_, version, role, task), tally in cells.items():
        totals.setdefault((version, role, task), Tally()).add(tally)
    return [_group(key, totals[key]) for key in sorted(totals, key=_group_order)]


def _windows(cells: dict[Key, Tally], window_ms: int) -> list[dict[str, Any]]:
    by_window: dict[int, dict[tuple[str, str, str], Tally]] = {}
    for (win, version, role, task), tally in cells.items():
        by_window.setdefault(win, {})[(version, role, task)] = tally
    out = []
    for win in sorted(by_window):
        groups = by_window[win]
        out.append({
            "start": iso_utc_ms(win * window_ms), "end": iso_utc_ms((win + 1) * window_ms),
            "groups": [{k: v for k, v in _group(key, groups[key]).items()
                        if k not in TOTALS_ONLY}
                       for key in sorted(groups, key=_group_order)],
        })
    return out


def summary_rows(doc: Mapping[str, Any]) -> list[tuple[str, str]]:
    """What a report read and matched, as (heading, text) rows for the views."""
    captures, labels, window = doc["captures"], doc["labels"], doc["window"]
    unmatched = f"{labels['unmatched']} unmatched (no capture of the model)"
    if labels["unmatched_examples"]:
        unmatched += ": " + ", ".join(labels["unmatched_examples"])
    sources = ", ".join(f"{source} {n}" for source, n in labels["sources"].items())
    return [
        ("captures", f"{_count(captures['records'], 'record')} of "
                     f"{_count(captures['requests'], 'request')} in "
                     f"{_count(captures['files'], 'file')} ({captures['uri']}), "
                     f"{captures['first']} to {captures['last']}"),
        ("window", f"{window['since'] or 'start'} to {window['until'] or 'now'}, in windows "
                   f"of {format_duration_s(doc['window_s'])} by the prediction's time"),
        ("labels", f"{labels['rows']} in {_count(labels['files'], 'file')} ({sources}); "
                   f"{labels['request_ids']} request IDs, {labels['repeated']} repeated "
                   "(the latest counts)"),
        ("matched", f"{labels['matched']} with a prediction in the window, "
                    f"{labels['outside_window']} outside it, {unmatched}"),
    ]


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"
