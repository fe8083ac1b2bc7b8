"""``feedback report --html``: the accuracy report as one self-contained page, in the
shadow report's style (``common.pages``): what was read and matched, every version and
role with its scores, each classifier's classes and reliability diagram, and the
accuracy per window; inline SVG, no script, nothing fetched."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from accuracy._plots import accuracy_figure, calibration_figure
from accuracy._report import summary_rows
from accuracy._scores import score_columns
from common.pages import escape, key_values, number, page, svg


def _cells(values: Sequence[Any]) -> str:
    return "".join(f"<td class='num'>{number(v)}</td>" for v in values)


def _scores_table(groups: Sequence[Mapping[str, Any]], *, window: bool = False) -> str:
    extra = score_columns(groups)
    head = ("<tr>" + ("<th>Window (UTC)</th>" if window else "") + "<th>Version</th><th>Role</th>"
            "<th>Task</th><th>Labelled</th><th>Failed</th><th>Not comparable</th>"
            "<th>Items</th><th>Accuracy</th>"
            + "".join(f"<th>{escape(h)}</th>" for h, _ in extra) + "</tr>")
    rows = []
    for g in groups:
        start = f"<td>{escape(g['window'])}</td>" if window else ""
        rows.append(f"<tr>{start}<td>{escape(g['version'])}</td><td>{escape(g['role'])}</td>"
                    f"<td>{escape(g['task'])}</td>"
                    + _cells([g["requests"], g["failed"], g["not_comparable"], g["items"],
                              g["accuracy"], *(g.get(key) for _, key in extra)]) + "</tr>")
    return f"<table>{head}{''.join(rows)}</table>"


def _classes(group: Mapping[str, Any]) -> str:
    rows = "".join(f"<tr><td>{escape(name)}</td>"
                   + _cells([c["precision"], c["recall"], c["f1"], c["support"]]) + "</tr>"
                   for name, c in group["classes"].items())
    ece = (f"ECE {number(group['ece'])} over {group['scored_items']} scored items"
           if group.get("ece") is not None else group.get("ece_note", "ECE: no items"))
    return (f"<h3>Version {escape(group['version'])} ({escape(group['role'])})</h3>"
            f"<p>macro F1 {number(group['macro_f1'])}; {escape(ece)}</p>"
            "<table><tr><th>Class</th><th>Precision</th><th>Recall</th><th>F1</th>"
            f"<th>Support</th></tr>{rows}</table>")


def render_html(doc: Mapping[str, Any]) -> str:
    """The page of an accuracy report document (``build_accuracy_report``)."""
    groups = doc["groups"]
    classifiers = [g for g in groups if g["kind"] == "classification" and g["items"]]
    calibrated = [g for g in classifiers if g.get("ece") is not None]
    windowed = [{**g, "window": w["start"][:19].replace("T", " ")} for w in doc["windows"]
                for g in w["groups"]]
    headline = "; ".join(f"version {g['version']} ({g['role']}): accuracy "
                         f"{number(g['accuracy'])} over {g['items']} items" for g in groups)
    rows = [("model", doc["model"]), *summary_rows(doc), ("generated", doc["generated_at"])]
    body = [f"<div class='outcome neutral'>{escape(headline or 'no labelled predictions')}"
            f"</div>{key_values([(k, escape(v)) for k, v in rows])}"
            f"<h2>Versions and roles</h2>{_scores_table(groups)}"]
    if classifiers:
        body.append("<h2>Classes</h2>" + "".join(_classes(g) for g in classifiers))
    if calibrated:
        body.append(f"<h2>Calibration</h2>{svg(calibration_figure(calibrated))}")
    if windowed:
        body.append(f"<h2>By window</h2>{svg(accuracy_figure(doc['windows']))}"
                    f"{_scores_table(windowed, window=True)}")
    return page(f"Accuracy of {doc['model']} against ground-truth labels", "".join(body))
