"""``shadow report --html``: the report as one self-contained page (common.pages)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from common.pages import badge, escape, key_values, number, page, svg
from shadow.page._plots import confusion_figure, cosine_figure, latency_figure

OUTCOME_CLASS = {"Pass": "good", "Fail": "bad"}


def _checks(doc: Mapping[str, Any]) -> str:
    rows = []
    for check in doc.get("checks", []):
        interval = check.get("interval")
        bounds = (f"{number(interval[0])} to {number(interval[1])}"
                  if isinstance(interval, list | tuple) and len(interval) == 2 else "")
        rows.append(f"<tr><td>{escape(check.get('name'))}</td><td>{badge(check.get('verdict'))}"
                    f"</td><td class='num'>{number(check.get('value'))}</td>"
                    f"<td class='num'>{bounds}</td>"
                    f"<td class='num'>{number(check.get('threshold'))}</td>"
                    f"<td>{escape(check.get('reason') or '')}</td></tr>")
    return ("<table><tr><th>Check</th><th>Verdict</th><th>Value</th><th>Interval</th>"
            f"<th>Threshold</th><th>Why</th></tr>{''.join(rows)}</table>")


def _agreement(doc: Mapping[str, Any]) -> str:
    numbers = doc.get("agreement", {})
    task = doc.get("task")
    if task == "feature-extraction":
        cosine = numbers.get("cosine", {})
        threshold = doc.get("thresholds", {}).get("tasks", {}).get(task, {}).get("min_cosine_p5")
        summary = ", ".join(f"{k} {number(cosine.get(k))}"
                            for k in ("p1", "p5", "p50", "mean", "min"))
        return (f"<h2>Cosine similarity</h2><p>{escape(summary)}</p>"
                f"{svg(cosine_figure(cosine, threshold))}")
    if task == "text-classification":
        cells = numbers.get("confusion", [])
        total = numbers.get("confusion_cells", len(cells))
        shown = (f"<p class='muted'>The {len(cells)} largest of {total} label pairs.</p>"
                 if total > len(cells) else "")
        return (f"<h2>Labels: primary against shadow</h2><p>label match rate "
                f"{number(numbers.get('label_match_rate'))} over {numbers.get('items')} items"
                f"</p>{svg(confusion_figure(cells)) if cells else ''}{shown}")
    rate = numbers.get("exact_match_rate")
    jaccard = numbers.get("token_jaccard")  # text-generation and llm
    similarity = ("; token Jaccard " + ", ".join(f"{k} {number(jaccard.get(k))}"
                                                 for k in ("p5", "p50", "mean"))
                  if isinstance(jaccard, dict) else "")
    return (f"<h2>Agreement</h2><p>exact match rate {number(rate)} over "
            f"{numbers.get('items')} items{escape(similarity)}</p>")


def render_html(doc: Mapping[str, Any]) -> str:
    """The page of a shadow report document (``ShadowReport.to_dict``)."""
    verdict = str(doc.get("verdict"))
    title = f"Shadow {doc.get('model')}@{doc.get('shadow_version')} against its primary"
    pairs = doc.get("pairs", {})
    latency = pairs.get("latency_ms", {})
    summary = key_values([
        ("Model and task", escape(f"{doc.get('model')} ({doc.get('task')})")),
        ("Window", escape(f"{doc['window'].get('since') or 'start'} to "
                          f"{doc['window'].get('until') or 'now'}")),
        ("Pairs", escape(f"{pairs.get('pairs')} joined by request ID, coverage "
                         f"{number(doc.get('coverage'))}")),
        ("Latency p50 / p99 (ms)", " ; ".join(
            escape(f"{side} {number(latency.get(side, {}).get('p50'))} / "
                   f"{number(latency.get(side, {}).get('p99'))}")
            for side in ("primary", "shadow"))),
        ("Answers of the pairs", " ; ".join(
            escape(f"{side}: " + ", ".join(f"{k} {v}" for k, v in counts.items()))
            for side, counts in pairs.get("status", {}).items())),
        *((f"Accuracy of the {side} (ground-truth labels)",
           escape(f"{number(acc['accuracy'])}: {acc['correct']} of {acc['items']} labelled "
                  "items right"))
          for side, acc in (doc.get("accuracy") or {}).items()),
        ("Generated", escape(doc.get("generated_at"))),
    ])
    return page(title, (
        f"<div class='outcome {OUTCOME_CLASS.get(verdict, 'neutral')}'>{badge(verdict)} "
        f"{escape(_headline(doc))}</div>{summary}"
        f"<h2>Checks</h2>{_checks(doc)}{_agreement(doc)}"
        "<h2>Latency, both sides (answered pairs)</h2>"
        f"{svg(latency_figure(latency))}"))


def _headline(doc: Mapping[str, Any]) -> str:
    failing = [c["name"] for c in doc.get("checks", []) if c.get("verdict") == "Fail"]
    if failing:
        return f"failed: {', '.join(failing)}"
    if doc.get("verdict") == "Pass":
        return "every check passed"
    return "not enough evidence to decide"
