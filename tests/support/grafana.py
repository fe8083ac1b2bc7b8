"""Run a dashboard's queries as Grafana would, against a real Prometheus.

Grafana is not here; what it does to a Prometheus panel query before sending it is
small, and this ports exactly that from its Prometheus data source
(public/app/plugins/datasource/prometheus/datasource.ts):

* ``getRateIntervalScopedVariable``: ``$__rate_interval`` is
  ``max($__interval + scrape interval, 4 * scrape interval)`` seconds, the scrape
  interval being the data source's ``timeInterval`` (15 s when unset);
* ``adjustInterval``: the step (``$__interval``) is at least ``range / 11000``;
* ``interpolateQueryExpr``: a variable that is multi-value or has "All" is
  regex-escaped (``prometheusSpecialRegexEscape``) and several values become
  ``(a|b)``; "All" with a custom ``allValue`` is that value, unescaped (template_srv);
* ``performTimeSeriesQuery``: ``GET /api/v1/query_range`` with query, start, end, step.

Variable queries ``label_values(SELECTOR, LABEL)`` become ``GET
/api/v1/label/LABEL/values?match[]=SELECTOR`` over the time range
(metric_find_query.ts ``labelValuesQuery`` with the labels-match API).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[2]
DASHBOARDS = ROOT / "dashboards"
ALL = "$__all"
_SPECIAL = re.compile(r"[$^*{}\[\]'+?.()|]")
_LABEL_VALUES = re.compile(r"^label_values\((.*),\s*(\w+)\)$")


def load(uid: str) -> dict[str, Any]:
    """A shipped dashboard's JSON, by uid (its file name)."""
    return dict(json.loads((DASHBOARDS / f"{uid}.json").read_text()))


def _escape(value: str) -> str:
    """prometheusSpecialRegexEscape: backslashes doubled, then regex specials escaped."""
    return _SPECIAL.sub(lambda m: "\\\\" + m.group(0), value.replace("\\", "\\\\\\\\"))


def interpolate(expr: str, board: Mapping[str, Any], chosen: Mapping[str, Sequence[str] | str],
                *, interval_s: float, scrape_s: float) -> str:
    """``expr`` with the dashboard's variables set to ``chosen`` (``ALL`` for All)."""
    rate = max(interval_s + scrape_s, 4 * scrape_s)
    out = expr.replace("$__rate_interval", f"{rate:g}s").replace("$__interval",
                                                                 f"{interval_s:g}s")
    for variable in board["templating"]["list"]:
        name = variable["name"]
        if name == "datasource" or name not in chosen:
            continue
        value = chosen[name]
        if value == ALL:
            text = str(variable["allValue"])
        else:
            values = [value] if isinstance(value, str) else list(value)
            if variable.get("multi") or variable.get("includeAll"):
                escaped = [_escape(v) for v in values]
                text = escaped[0] if len(escaped) == 1 else "(" + "|".join(escaped) + ")"
            else:
                text = values[0]
        out = out.replace("${" + name + "}", text).replace("$" + name, text)
    return out


@dataclass(frozen=True)
class PanelQuery:
    row: str
    panel: str
    legend: str
    expr: str


def panel_queries(board: Mapping[str, Any]) -> list[PanelQuery]:
    """Every target of every panel, with the title of the row the panel sits under."""
    out, row = [], ""
    for panel in board["panels"]:
        if panel["type"] == "row":
            row = panel["title"]
        out += [PanelQuery(row, panel["title"], t.get("legendFormat", ""), t["expr"])
                for t in panel.get("targets", [])]
    return out


def queries_in(board: Mapping[str, Any], *, rows: Sequence[str] = (),
               panels: Sequence[tuple[str, str]] = ()) -> set[tuple[str, str]]:
    """(panel, legend) of every query under a row whose title starts with one of ``rows``,
    plus ``panels`` as given (each must exist)."""
    every = {(q.panel, q.legend) for q in panel_queries(board)}
    missing = set(panels) - every
    assert not missing, f"no such panel queries: {missing}"
    return {(q.panel, q.legend) for q in panel_queries(board)
            if any(q.row.startswith(r) for r in rows)} | set(panels)


class Prometheus:
    """The HTTP API calls Grafana's Prometheus data source makes for a dashboard."""

    def __init__(self, url: str, *, scrape_s: float) -> None:
        self.url = url.rstrip("/")
        self.scrape_s = scrape_s

    def query_range(self, expr: str, start: float, end: float, step_s: float) -> list[Any]:
        """The series of a range query; raises AssertionError naming the query on an error."""
        step = max(step_s, (end - start) / 11000)
        reply = httpx.get(f"{self.url}/api/v1/query_range", timeout=30,
                          params={"query": expr, "start": start, "end": end, "step": step})
        body = reply.json()
        assert reply.status_code == 200 and body["status"] == "success", (expr, body)
        return list(body["data"]["result"])

    def variable_values(self, query: str, start: float, end: float) -> list[str]:
        found = _LABEL_VALUES.match(query)
        assert found, f"not a label_values() query: {query}"
        selector, label = found.groups()
        reply = httpx.get(f"{self.url}/api/v1/label/{label}/values", timeout=30,
                          params={"match[]": selector, "start": start, "end": end})
        body = reply.json()
        assert reply.status_code == 200 and body["status"] == "success", (query, body)
        return list(body["data"])


def no_data(board: Mapping[str, Any], prom: Prometheus, chosen: Mapping[str, Any],
            start: float, end: float, step_s: float) -> set[tuple[str, str]]:
    """Run every panel query over [start, end]; the (panel, legend) of those with no
    series. Every query must parse and run (query_range asserts it)."""
    empty = set()
    for query in panel_queries(board):
        expr = interpolate(query.expr, board, chosen, interval_s=step_s, scrape_s=prom.scrape_s)
        assert "$" not in expr, f"a variable was left in {expr}"
        if not prom.query_range(expr, start, end, step_s):
            empty.add((query.panel, query.legend))
    return empty


def variables_offer(board: Mapping[str, Any], prom: Prometheus, chosen: Mapping[str, Any],
                    start: float, end: float) -> dict[str, list[str]]:
    """Each query variable's options with the ones before it set to ``chosen``, as
    Grafana refreshes them in order."""
    offered = {}
    for variable in board["templating"]["list"]:
        if variable["type"] != "query":
            continue
        query = interpolate(variable["query"], board, chosen, interval_s=prom.scrape_s,
                            scrape_s=prom.scrape_s)
        offered[variable["name"]] = prom.variable_values(query, start, end)
    return offered


def annotations_without_data(board: Mapping[str, Any], prom: Prometheus,
                             chosen: Mapping[str, Any], start: float, end: float,
                             step_s: float) -> set[str]:
    """The names of the dashboard's annotations whose query (``target.expr``, as
    @grafana/prometheus's prepareAnnotation keeps it) finds no event over [start, end];
    every query must parse and run."""
    empty = set()
    for annotation in board["annotations"]["list"]:
        expr = interpolate(annotation["target"]["expr"], board, chosen, interval_s=step_s,
                           scrape_s=prom.scrape_s)
        if not prom.query_range(expr, start, end, step_s):
            empty.add(annotation["name"])
    return empty
