"""How ``modelctl feedback report`` shows a report in the terminal (JSON is the dict)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rich.console import Console

from cli._output import num, table

MAX_WINDOWS = 24  # the latest ones; --json and --html hold them all


def _groups_table(title: str | None, groups: Sequence[Mapping[str, Any]], *,
                  by_window: bool = False) -> Any:
    from accuracy import score_columns

    extra = score_columns(groups)
    tasks = len({g["task"] for g in groups}) > 1  # one task: the title names it
    heads = [*(("window (UTC)",) if by_window else ()), "version", "role",
             *(("task",) if tasks else ()), "labelled", *(() if by_window else ("items",)),
             "accuracy", *(h for h, _ in extra)]
    rows = []
    for index, g in enumerate(groups):
        # A window's start (month-day hour:minute) on its first row only.
        start = "" if by_window and index and groups[index - 1]["window"] == g["window"] \
            else str(g.get("window", ""))[5:16].replace("T", " ")
        rows.append([*((start,) if by_window else ()), g["version"], g["role"],
                     *((g["task"],) if tasks else ()), g["requests"],
                     *(() if by_window else (g["items"],)), num(g["accuracy"]),
                     *(num(g.get(key)) for _, key in extra)])
    return table(title, heads, rows)


def _notes(groups: Sequence[Mapping[str, Any]]) -> list[str]:
    notes = []
    for g in groups:
        who = f"version {g['version']} ({g['role']})"
        if g["failed"]:
            notes.append(f"{who}: {g['failed']} labelled predictions failed (an error "
                         "answer): not judged")
        if g["not_comparable"]:
            notes.append(f"{who}: {g['not_comparable']} labels hold another number of "
                         "items than the answer: not judged")
        if g["kind"] == "classification" and g["items"] and g.get("ece") is None:
            notes.append(f"{who}: ECE {g.get('ece_note', 'not available')}")
    return notes


def render_report(console: Console, doc: Mapping[str, Any]) -> None:
    from accuracy import summary_rows

    groups = doc["groups"]
    tasks = sorted({g["task"] for g in groups})
    console.print(f"Accuracy of {doc['model']} against ground-truth labels"
                  f"{' (' + tasks[0] + ')' if len(tasks) == 1 else ''}", style="bold",
                  markup=False)
    for heading, text in summary_rows(doc):
        console.print(f"  {heading:<9} {text}", markup=False)
    if not groups:
        console.print("no labelled prediction in the window")
        return
    console.print(_groups_table(None, groups))
    for note in _notes(groups):
        console.print(note, markup=False)
    for group in groups:
        if group["kind"] == "classification" and group["classes"]:
            rows = [(name, num(c["precision"]), num(c["recall"]), num(c["f1"]),
                     c["support"]) for name, c in group["classes"].items()]
            console.print(table(f"Classes of version {group['version']} ({group['role']})",
                                ("class", "precision", "recall", "F1", "support"), rows))
    windows = doc["windows"]
    shown = windows[-MAX_WINDOWS:]
    earlier = (f" (the last {len(shown)}; {len(windows) - len(shown)} earlier in --json)"
               if len(windows) > len(shown) else "")
    windowed = [{**g, "window": w["start"]} for w in shown for g in w["groups"]]
    console.print(_groups_table(f"By window of the prediction's time{earlier}", windowed,
                                by_window=True))
