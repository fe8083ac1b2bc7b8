"""One self-contained HTML page for a rollout report: inline CSS and inline SVG, no
script, no external file or font, so it opens anywhere and travels as one attachment."""

from __future__ import annotations

from datetime import UTC, datetime

from common.pages import badge, escape, number, page, svg
from rollout.report._data import MetricPanel, Report, Window
from rollout.report._plots import metric_figure, weight_figure

OUTCOME_CLASS = {"Promoted": "good", "RolledBack": "bad", "RollingBack": "bad"}


def _time(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _offset(report: Report, t: float) -> str:
    seconds = max(0.0, t - report.started_at)
    minutes, sec = divmod(round(seconds), 60)
    return f"+{minutes}:{sec:02d}"


def _summary(report: Report) -> str:
    rows = [
        ("InferenceService", f"{report.namespace}/{report.isvc}"),
        ("Model", report.model),
        ("Stable → canary", f"{report.model}@{report.stable_version} → "
                            f"{report.model}@{report.canary_version}"),
        ("Plan", f"steps {', '.join(f'{s}%' for s in report.steps_pct)}; "
                 f"{report.interval_s:g} s an interval; roll back after "
                 f"{report.failure_limit} failed analyses"),
        ("Started", _time(report.started_at)),
        ("Last decision", f"{_time(report.ended_at)} "
                          f"({_offset(report, report.ended_at)} after the start)"),
        ("Analyses", ", ".join(f"{n} {v}" for v, n in _verdicts(report.windows)) or "none"),
        ("Metrics from", report.prometheus or "no Prometheus: decisions only"),
    ]
    body = "".join(f"<tr><th>{escape(k)}</th><td>{escape(v)}</td></tr>" for k, v in rows)
    return f"<table>{body}</table>"


def _verdicts(windows: tuple[Window, ...]) -> list[tuple[str, int]]:
    counts: dict[str, int] = {}
    for window in windows:
        counts[window.verdict] = counts.get(window.verdict, 0) + 1
    return sorted(counts.items())


def _decisions(report: Report) -> str:
    rows = "".join(
        f"<tr><td class='num'>{_offset(report, d['at'])}</td><td>{escape(d['kind'])}</td>"
        f"<td class='num'>{d['weight_pct']}%</td><td>{escape(d['message'])}</td></tr>"
        for d in report.decisions)
    return ("<table><tr><th>At</th><th>Decision</th><th>Weight</th><th>Why</th></tr>"
            f"{rows}</table>")


def _windows_table(report: Report, panel: MetricPanel) -> str:
    rows = []
    for window in report.windows:
        seen = window.metrics.get(panel.name)
        if seen is None:
            continue
        rows.append(
            f"<tr><td class='num'>{_offset(report, window.start)} to "
            f"{_offset(report, window.end)}</td><td class='num'>{window.weight_pct}%</td>"
            f"<td>{badge(seen.get('verdict'))}</td>"
            f"<td class='num'>{number(seen.get('canary'))}</td>"
            f"<td class='num'>{number(seen.get('stable'))}</td><td>{escape(window.kind)}</td></tr>")
    if not rows:
        return "<p class='muted'>No analysis measured this metric.</p>"
    return ("<table><tr><th>Window</th><th>Weight</th><th>Verdict</th><th>Canary</th>"
            f"<th>Stable</th><th>Led to</th></tr>{''.join(rows)}</table>")


def _metric_section(report: Report, panel: MetricPanel) -> str:
    queries = "".join(f"<p class='muted'>{escape(role)}:</p><pre>{escape(q)}</pre>"
                      for role, q in panel.queries.items())
    return (f"<section class='metric' data-metric='{escape(panel.name)}'>"
            f"<h2>{escape(panel.name)}</h2>"
            f"{svg(metric_figure(report, panel))}"
            f"{_windows_table(report, panel)}"
            f"<details><summary>Queries</summary>{queries}</details></section>")


def render_html(report: Report) -> str:
    """The whole page."""
    title = (f"Rollout of {report.model}@{report.canary_version} on "
             f"{report.namespace}/{report.isvc}")
    if report.metrics:
        metrics = "".join(_metric_section(report, p) for p in report.metrics)
        legend = ("<p class='muted'>Canary in orange, stable in blue, each point the metric "
                  "over the interval that ends there (as the analysis asks it); shaded: "
                  "each analysis window, green Pass, red Fail, grey Inconclusive.</p>")
    else:
        metrics, legend = "<p class='muted'>No Prometheus was given: no metric series.</p>", ""
    outcome = OUTCOME_CLASS.get(report.phase, "neutral")
    return page(title, (
        f"<p class='muted'>modelctl rollout report, generated {_time(report.generated_at)}</p>"
        f"<div class='outcome {outcome}'>{escape(report.phase)}: {escape(report.outcome)}</div>"
        f"{_summary(report)}"
        "<h2>Timeline</h2>"
        f"{svg(weight_figure(report))}"
        f"{_decisions(report)}"
        f"<h2>Analysed metrics</h2>{legend}{metrics}"))
