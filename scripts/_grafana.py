"""The building blocks of a Grafana dashboard's JSON, as scripts/dashboards.py uses them:
a Prometheus target, histogram quantiles, panels laid out in rows (``Board``), the
template variables and the dashboard around them; and the selectors every modelctl query
uses, through the dashboard variables of the same names.
"""

from __future__ import annotations

from typing import Any

SCHEMA_VERSION = 39  # Grafana 10.4-11's classic dashboard JSON
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
RATE = "$__rate_interval"
# The serving selector: every variable, as regular expressions ("All" is ".*").
SEL = ('namespace=~"$namespace", isvc=~"$isvc", model=~"$model", version=~"$version", '
       'role=~"$role"')
# Multi-model series carry only the model label of their own (plus the scrape labels).
MULTI_SEL = 'namespace=~"$namespace", isvc=~"$isvc", model=~"$model"'
SCOPE = 'namespace=~"$namespace", isvc=~"$isvc"'
ROLLOUT_SEL = f'{SCOPE}, role=~"stable|canary"'
WHO = "{{model}}@{{version}} {{role}}"  # a series' legend: the version and its role


def target(expr: str, legend: str, ref: str, *, heatmap: bool = False) -> dict[str, Any]:
    query: dict[str, Any] = {"refId": ref, "datasource": DATASOURCE, "expr": expr,
                             "legendFormat": legend, "range": True, "editorMode": "code"}
    if heatmap:
        query["format"] = "heatmap"
    return query


def quantiles(metric: str, by: str, label: str, sel: str = SEL,
              qs: tuple[float, ...] = (0.5, 0.9, 0.99),
              who: str | None = None) -> list[tuple[str, str]]:
    """(expr, legend) for histogram quantiles of ``metric``'s buckets, grouped ``by``;
    ``who`` names a series in the legend (``by``'s labels joined by ``/`` unless given)."""
    group = f"le, {by}" if by else "le"
    if who is None:
        who = f"{{{{{by.replace(', ', '}}/{{')}}}}}" if by else ""
    prefix = f"{who} " if who else ""
    return [(f"histogram_quantile({q}, sum by ({group}) "
             f"(rate({metric}_bucket{{{sel}}}[{RATE}])))",
             f"{prefix}{label} p{round(q * 100)}") for q in qs]


class Board:
    """Panels laid out left to right, 12 columns wide each, in rows."""

    def __init__(self) -> None:
        self.panels: list[dict[str, Any]] = []
        self._y = 0
        self._x = 0

    def row(self, title: str) -> None:
        if self._x:
            self._y += 8
            self._x = 0
        self.panels.append({"type": "row", "title": title, "collapsed": False,
                            "id": len(self.panels) + 1, "panels": [],
                            "gridPos": {"h": 1, "w": 24, "x": 0, "y": self._y}})
        self._y += 1

    def add(self, title: str, description: str, queries: list[tuple[str, str]], unit: str,
            *, kind: str = "timeseries", width: int = 12) -> None:
        refs = "ABCDEFGHIJ"
        heatmap = kind == "heatmap"
        panel: dict[str, Any] = {
            "type": kind, "title": title, "description": description,
            "id": len(self.panels) + 1, "datasource": DATASOURCE,
            "gridPos": {"h": 8, "w": width, "x": self._x, "y": self._y},
            "targets": [target(expr, legend, refs[i], heatmap=heatmap)
                        for i, (expr, legend) in enumerate(queries)],
        }
        if heatmap:
            panel["options"] = {
                "calculate": False, "cellGap": 1, "yAxis": {"axisPlacement": "left"},
                "color": {"mode": "scheme", "scheme": "Oranges", "steps": 64,
                          "exponent": 0.5, "fill": "dark-orange", "reverse": False},
                "rowsFrame": {"layout": "auto"}, "legend": {"show": True},
                "exemplars": {"color": "rgba(255,0,255,0.7)"}, "showValue": "auto",
                "tooltip": {"mode": "single", "yHistogram": True}}
            panel["fieldConfig"] = {"defaults": {"unit": unit}, "overrides": []}
        else:
            panel["options"] = {
                "legend": {"displayMode": "list", "placement": "bottom", "showLegend": True,
                           "calcs": []},
                "tooltip": {"mode": "multi", "sort": "desc"}}
            panel["fieldConfig"] = {"defaults": {"unit": unit, "min": 0, "custom": {
                "drawStyle": "line", "lineWidth": 1, "fillOpacity": 10,
                "showPoints": "never", "spanNulls": False}}, "overrides": []}
        self.panels.append(panel)
        self._x += width
        if self._x >= 24:
            self._x = 0
            self._y += 8


def variable(name: str, label: str, query: str) -> dict[str, Any]:
    return {"type": "query", "name": name, "label": label, "datasource": DATASOURCE,
            "query": query, "refresh": 2, "sort": 1, "multi": True, "includeAll": True,
            "allValue": ".*", "current": {"text": ["All"], "value": ["$__all"]},
            "hide": 0, "options": [], "regex": ""}


def datasource_variable() -> dict[str, Any]:
    return {"type": "datasource", "name": "datasource", "label": "Prometheus",
            "query": "prometheus", "refresh": 1, "hide": 0, "regex": "", "options": []}


def dashboard(uid: str, title: str, description: str, board: Board,
              variables: list[dict[str, Any]],
              annotations: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {
        "uid": uid, "title": title, "description": description,
        "tags": ["modelctl", "kserve"], "editable": True, "graphTooltip": 1,
        "schemaVersion": SCHEMA_VERSION, "version": 1, "refresh": "30s",
        "time": {"from": "now-1h", "to": "now"}, "timezone": "browser",
        "fiscalYearStartMonth": 0, "liveNow": False, "links": [],
        "templating": {"list": [datasource_variable(), *variables]},
        "annotations": {"list": annotations or []},
        "panels": board.panels,
    }


def scope_variables(metric: str, names: tuple[str, ...]) -> list[dict[str, Any]]:
    """namespace, isvc, … each narrowed by the ones before it."""
    out, before = [], []
    labels = {"namespace": "Namespace", "isvc": "InferenceService", "model": "Model",
              "version": "Version", "role": "Role"}
    for name in names:
        selector = ", ".join(f'{b}=~"${b}"' for b in before)
        out.append(variable(name, labels[name], f"label_values({metric}{{{selector}}}, {name})"))
        before.append(name)
    return out
