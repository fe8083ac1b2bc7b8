"""Write the Grafana dashboards: ``dashboards/*.json`` (import them in Grafana's UI) and
``manifests/50-grafana-dashboards.yaml`` (the same JSON as ConfigMaps for the Grafana
sidecar that kube-prometheus-stack runs). Both are generated from this file and
committed; ``tests/dashboards`` fails when they drift from it.

    python -m scripts.dashboards [--check]

Every query selects on the labels the predictor exports (model, version, role) and the
ones scraping adds (namespace, isvc; manifests/40-monitoring.yaml, and the dev stack's
static labels), through the dashboard variables of the same names.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
OUT_DIR = ROOT / "dashboards"
MANIFEST = ROOT / "manifests" / "50-grafana-dashboards.yaml"
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
              qs: tuple[float, ...] = (0.5, 0.9, 0.99)) -> list[tuple[str, str]]:
    """(expr, legend) for histogram quantiles of ``metric``'s buckets, grouped ``by``."""
    group = f"le, {by}" if by else "le"
    prefix = f"{{{{{by.replace(', ', '}}/{{')}}}}} " if by else ""
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


def _scope_variables(metric: str, names: tuple[str, ...]) -> list[dict[str, Any]]:
    """namespace, isvc, … each narrowed by the ones before it."""
    out, before = [], []
    labels = {"namespace": "Namespace", "isvc": "InferenceService", "model": "Model",
              "version": "Version", "role": "Role"}
    for name in names:
        selector = ", ".join(f'{b}=~"${b}"' for b in before)
        out.append(variable(name, labels[name], f"label_values({metric}{{{selector}}}, {name})"))
        before.append(name)
    return out


def serving() -> dict[str, Any]:
    b = Board()
    by = "model, version, role"
    b.row("Requests")
    b.add("Requests by status code", "Predict requests a second, by HTTP status code.",
          [(f"sum by (code) (rate(modelctl_requests_total{{{SEL}}}[{RATE}]))", "{{code}}")],
          "reqps")
    b.add("Request latency", "Arrival to response, from the predictor's histogram.",
          quantiles("modelctl_request_duration_seconds", "", "latency"), "s")
    b.add("Rejections by reason", "Requests refused at once (429/503), by reason, and "
          "items dropped in the queue at their deadline.",
          [(f"sum by (reason) (rate(modelctl_rejections_total{{{SEL}}}[{RATE}]))", "{{reason}}"),
           (f"sum(rate(modelctl_items_expired_total{{{SEL}}}[{RATE}]))", "expired in queue")],
          "reqps")
    b.add("Queue depth and in flight", "Items waiting for a batch, and requests being served.",
          [(f"sum by ({by}) (modelctl_queue_depth{{{SEL}}})", f"{WHO} queued"),
           (f"sum by ({by}) (modelctl_inflight_requests{{{SEL}}})",
            f"{WHO} in flight")], "short")
    b.row("Batching")
    b.add("Queue wait and batch duration", "How long an item waited for its batch, and how "
          "long the device spent on a batch.",
          quantiles("modelctl_queue_wait_seconds", "", "queue wait", qs=(0.5, 0.99))
          + quantiles("modelctl_batch_duration_seconds", "", "batch", qs=(0.5, 0.99)), "s")
    b.add("Batch size distribution", "Executed batches by size (items per batch).",
          [(f"sum by (le) (increase(modelctl_batch_size_bucket{{{SEL}}}[{RATE}]))", "{{le}}")],
          "short", kind="heatmap")
    b.add("Batch fill ratio", "Mean items per batch over the current batch cap: 1 means "
          "every batch was full.",
          [(f"(sum by ({by}) (rate(modelctl_batch_size_sum{{{SEL}}}[{RATE}])) / sum by ({by}) "
            f"(rate(modelctl_batch_size_count{{{SEL}}}[{RATE}]))) / max by ({by}) "
            f"(modelctl_batch_cap{{{SEL}}})", WHO)], "percentunit")
    b.add("Batch cap and padding", "The largest batch the predictor will run now (lowered "
          "after an out-of-memory error), and padded over real tokens of the last batch "
          "(text models only; 1 means no waste).",
          [(f"max by ({by}) (modelctl_batch_cap{{{SEL}}})", f"{WHO} cap"),
           (f"max by ({by}) (modelctl_padding_ratio{{{SEL}}})",
            f"{WHO} padding")], "short")
    b.row("Multi-model (predictors serving many versions)")
    b.add("Model loads by outcome", "Loads a second by outcome (ok, failed, no_room), and "
          "requests that waited for their model's load (cold starts).",
          [(f"sum by (model, outcome) (rate(modelctl_model_loads_total{{{MULTI_SEL}}}[{RATE}]))",
            "{{model}} {{outcome}}"),
           (f"sum by (model) (rate(modelctl_model_cold_starts_total{{{MULTI_SEL}}}[{RATE}]))",
            "{{model}} cold starts")], "ops")
    b.add("Model load time", "Verify, read and warm up one version.",
          quantiles("modelctl_model_load_seconds", "model", "load", sel=MULTI_SEL,
                    qs=(0.5, 0.99)), "s")
    b.add("Resident memory by model", "Bytes each resident model holds, host and device.",
          [(f"sum by (model, memory) (modelctl_model_resident_bytes{{{MULTI_SEL}}})",
            "{{model}} {{memory}}")], "bytes")
    b.add("Evictions by reason", "Models taken out of memory a second (lru, unload).",
          [(f"sum by (model, reason) (rate(modelctl_model_evictions_total{{{MULTI_SEL}}}"
            f"[{RATE}]))", "{{model}} {{reason}}")], "ops")
    b.row("Queue mode (Redis Streams)")
    b.add("Stream lag and pending", "Requests not yet delivered to a worker (lag) and "
          "delivered but not acknowledged (pending), as the processes last read them.",
          [(f"max by (model, version) (modelctl_stream_lag{{{SEL}}})", "{{model}}@{{version}} lag"),
           (f"max by (model, version) (modelctl_stream_pending{{{SEL}}})",
            "{{model}}@{{version}} pending")], "short")
    b.add("Redeliveries and dead letters", "Requests claimed from a dead worker and run "
          "again, requests moved to the dead-letter stream, and requests answered 503 "
          "because Redis did not answer.",
          [(f"sum by (model, version) (rate(modelctl_stream_redeliveries_total{{{SEL}}}[{RATE}]))",
            "{{model}}@{{version}} redelivered"),
           (f"sum by (model, version) (rate(modelctl_stream_dead_letters_total{{{SEL}}}[{RATE}]))",
            "{{model}}@{{version}} dead letters"),
           (f"sum by (model, version) (rate(modelctl_stream_unavailable_total{{{SEL}}}[{RATE}]))",
            "{{model}}@{{version}} redis unavailable")], "ops")
    b.add("Time in queue and end to end", "Enqueue to a worker reading the request, and "
          "enqueue to the frontend holding the result.",
          quantiles("modelctl_stream_time_in_queue_seconds", "", "in queue", qs=(0.5, 0.99))
          + quantiles("modelctl_stream_end_to_end_seconds", "", "end to end", qs=(0.5, 0.99)),
          "s", width=24)
    return dashboard(
        "modelctl-serving", "modelctl / Serving",
        "The batching predictor: traffic, latency, batching, overload; multi-model and "
        "queue-mode rows fill in when those modes run.", b,
        _scope_variables("modelctl_requests_total",
                         ("namespace", "isvc", "model", "version", "role")))


def rollouts() -> dict[str, Any]:
    b = Board()
    total = f"sum by (role) (rate(modelctl_requests_total{{{ROLLOUT_SEL}}}[{RATE}]))"
    b.row("Traffic")
    b.add("Traffic share by role", "The share of requests each role answered: the canary's "
          "weight as it is really routed.",
          [(f"{total} / ignoring (role) group_left sum(rate(modelctl_requests_total"
            f"{{{ROLLOUT_SEL}}}[{RATE}]))", "{{role}}")], "percentunit")
    b.add("Canary weight: asked and routed", "The weight the rollout asks for (exported by "
          "`rollout run`) and the canary's share of requests as really routed.",
          [(f'max by (canary_version) (modelctl_rollout_weight_percent{{{SCOPE}}}) / 100',
            "asked (canary {{canary_version}})"),
           (f'sum(rate(modelctl_requests_total{{{SCOPE}, role="canary"}}[{RATE}])) / '
            f'sum(rate(modelctl_requests_total{{{ROLLOUT_SEL}}}[{RATE}]))', "routed")],
          "percentunit")
    b.add("Requests by role", "Predict requests a second answered by stable and canary.",
          [(total, "{{role}}")], "reqps")
    b.row("Analysed metrics, canary against stable (the default analysis)")
    for name, code in (("Error rate (5xx share)", '=~"5.."'), ("Throttle rate (429 share)",
                                                                '="429"')):
        bad = f"sum by (role) (rate(modelctl_requests_total{{{ROLLOUT_SEL}, code{code}}}[{RATE}]))"
        b.add(name, "What the analysis compares: the canary's share against stable's.",
              [(f"({bad} or {total} * 0) / {total}", "{{role}}")], "percentunit")
    b.add("p99 latency", "The value the latency check shows, per role.",
          quantiles("modelctl_request_duration_seconds", "role", "latency", sel=ROLLOUT_SEL,
                    qs=(0.99,)), "s")
    b.add("Mean latency", "What the latency check decides on: the mean of every request's "
          "latency, canary against stable.",
          [(f"sum by (role) (rate(modelctl_request_duration_seconds_sum{{{ROLLOUT_SEL}}}[{RATE}]))"
            f" / sum by (role) (rate(modelctl_request_duration_seconds_count{{{ROLLOUT_SEL}}}"
            f"[{RATE}]))", "{{role}}")], "s")
    return dashboard(
        "modelctl-rollouts", "modelctl / Rollouts",
        "A canary rollout: its decisions, the weight asked and routed, and canary against "
        "stable on each metric the default analysis checks.", b,
        _scope_variables("modelctl_requests_total", ("namespace", "isvc")),
        annotations=[decision_annotations()])


def decision_annotations() -> dict[str, Any]:
    """Each rollout decision as an annotation, titled by its kind: an increase of
    `rollout run`'s decision counter (@grafana/prometheus annotations.ts reads
    ``target.expr``, ``titleFormat`` and ``tagKeys``)."""
    return {"name": "Rollout decisions", "enable": True, "iconColor": "#d93025",
            "datasource": DATASOURCE,
            "target": {"refId": "Anno", "expr": "sum by (kind) (increase("
                       f"modelctl_rollout_decisions_total{{{SCOPE}}}[{RATE}])) > 0"},
            "titleFormat": "{{kind}}", "tagKeys": "kind", "textFormat": "",
            "useValueForTime": False}


DASHBOARDS = {"modelctl-serving": serving, "modelctl-rollouts": rollouts}


def render_json(board: dict[str, Any]) -> str:
    return json.dumps(board, indent=2, sort_keys=False) + "\n"


def render_manifest(boards: dict[str, dict[str, Any]]) -> str:
    """One ConfigMap per dashboard, labelled for the Grafana sidecar."""
    import yaml

    class Literal(yaml.SafeDumper):
        """Multi-line strings (the dashboards' JSON) as ``|`` blocks, readable in a diff."""

    Literal.add_representer(str, lambda dumper, text: dumper.represent_scalar(
        "tag:yaml.org,2002:str", text, style="|" if "\n" in text else None))
    header = (
        "# Generated by `python -m scripts.dashboards` from scripts/dashboards.py: do not "
        "edit.\n"
        "# Grafana dashboards as ConfigMaps for the Grafana sidecar (kube-prometheus-stack's\n"
        "# grafana.sidecar.dashboards: label grafana_dashboard, value \"1\"). The sidecar "
        "must\n"
        "# search this namespace: set grafana.sidecar.dashboards.searchNamespace to ALL or\n"
        "# include modelctl. The same JSON is in dashboards/ to import by hand.\n")
    docs = [{"apiVersion": "v1", "kind": "ConfigMap",
             "metadata": {"name": f"grafana-dashboard-{uid}", "namespace": "modelctl",
                          "labels": {"grafana_dashboard": "1",
                                     "app.kubernetes.io/part-of": "modelctl"}},
             "data": {f"{uid}.json": render_json(board)}}
            for uid, board in boards.items()]
    return header + "---\n".join(yaml.dump(d, Dumper=Literal, sort_keys=False, width=100)
                                  for d in docs)


def outputs() -> dict[Path, str]:
    boards = {uid: build() for uid, build in DASHBOARDS.items()}
    files = {OUT_DIR / f"{uid}.json": render_json(board) for uid, board in boards.items()}
    files[MANIFEST] = render_manifest(boards)
    return files


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true",
                        help="exit 1 if a committed file differs from what this writes")
    args = parser.parse_args(argv)
    stale = []
    for path, text in outputs().items():
        if args.check:
            if not path.exists() or path.read_text() != text:
                stale.append(path)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            print(f"wrote {path.relative_to(ROOT)}")
    for path in stale:
        print(f"stale: {path.relative_to(ROOT)} (run python -m scripts.dashboards)",
              file=sys.stderr)
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
