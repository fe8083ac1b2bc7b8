"""Write the Grafana dashboards: ``dashboards/*.json`` (import them in Grafana's UI) and
``manifests/50-grafana-dashboards.yaml`` (the same JSON as ConfigMaps for the Grafana
sidecar that kube-prometheus-stack runs). Both are generated from this file and
committed; ``tests/dashboards`` fails when they drift from it.

    python -m scripts.dashboards [--check]

Every query selects on the labels the predictor exports (model, version, role) and the
ones scraping adds (namespace, isvc; manifests/40-monitoring.yaml, and the dev stack's
static labels), through the dashboard variables of the same names. The building blocks
(panels, rows, variables, selectors) are in scripts/_grafana.py.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from scripts._grafana import (
    DATASOURCE,
    MULTI_SEL,
    RATE,
    ROLLOUT_SEL,
    SCOPE,
    SEL,
    WHO,
    Board,
    dashboard,
    quantiles,
    scope_variables,
)

ROOT = Path(__file__).resolve().parents[1]
OUT_DIR = ROOT / "dashboards"
MANIFEST = ROOT / "manifests" / "50-grafana-dashboards.yaml"


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
    llm_row(b)
    accuracy_row(b)
    return dashboard(
        "modelctl-serving", "modelctl / Serving",
        "The batching predictor: traffic, latency, batching, overload; multi-model, "
        "queue-mode and LLM rows fill in when those modes run.", b,
        scope_variables("modelctl_requests_total",
                         ("namespace", "isvc", "model", "version", "role")))


def llm_row(b: Board) -> None:
    """LLM serving (task ``llm``): the series of predictor/llm/_metrics.py."""
    by = "model, version, role"
    b.row("LLM (predictors serving task llm)")
    b.add("Time to first token", "A request's arrival to its first output token (TTFT), "
          "by version and role.",
          quantiles("modelctl_llm_time_to_first_token_seconds", by, "TTFT", qs=(0.5, 0.99),
                    who=WHO), "s")
    b.add("Time per output token", "Each gap between two output tokens of a sequence, as "
          "the server sends them (TPOT, the inter-token latency).",
          quantiles("modelctl_llm_time_per_output_token_seconds", by, "TPOT", qs=(0.5, 0.99),
                    who=WHO), "s")
    b.add("End-to-end latency", "A request's arrival to its last output token.",
          quantiles("modelctl_llm_e2e_request_latency_seconds", by, "end to end", qs=(0.99,),
                    who=WHO), "s")
    b.add("Token throughput", "Output tokens generated and prompt tokens prefilled a second.",
          [(f"sum by ({by}) (rate(modelctl_llm_{kind}_tokens_total{{{SEL}}}[{RATE}]))",
            f"{WHO} {name}") for kind, name in (("generation", "output"), ("prompt", "prompt"))],
          "suffix: tokens/s")
    b.add("Sequences running, waiting and preempted", "Sequences in the engine's running "
          "batch; queued in it, not yet running; and of those queued, the ones that had "
          "started and were preempted to make room.",
          [(f"sum by ({by}) (modelctl_llm_sequences_{state}{{{SEL}}})", f"{WHO} {state}")
           for state in ("running", "waiting", "preempted")], "short")
    b.add("KV cache used", "Paged KV cache blocks in use over all blocks (used + free): "
          "near 1, new sequences wait and running ones are preempted.",
          [(f'sum by ({by}) (modelctl_llm_kv_cache_blocks{{{SEL}, state="used"}}) / '
            f'sum by ({by}) (modelctl_llm_kv_cache_blocks{{{SEL}, state=~"used|free"}})',
            WHO)], "percentunit")
    b.add("Finished sequences by reason", "Sequences ended a second, by why: stop (an "
          "end-of-sequence token or a stop string), length (max_tokens), cancelled (the "
          "client went away), error (the engine failed it), deadline (no first token "
          "within the request's timeout), rejected (pushed out of a full queue for a "
          "tenant with an earlier turn, docs/TENANTS.md).",
          [(f"sum by (finish_reason) (rate(modelctl_llm_requests_finished_total{{{SEL}}}"
            f"[{RATE}]))", "{{finish_reason}}")], "reqps", width=24)


def accuracy_row(b: Board) -> None:
    """Ground-truth labels (docs/FEEDBACK.md): modelctl_feedback_labels_total."""
    by = "model, version, role"
    labels = "modelctl_feedback_labels_total"
    b.row("Accuracy (ground-truth labels: predictors with --feedback_token_file)")
    b.add("Accuracy from labels", "Of the labelled items each version answered, the share "
          "it got right over the rate window: correct / (correct + wrong), counted by the "
          "predictor that gave the answer when its label arrives (a late label counts when "
          "it comes). The rollout check `accuracy` judges the same counts "
          "(rollout/analysis/accuracy_check.yaml).",
          [(f'sum by ({by}) (rate({labels}{{{SEL}, outcome="correct"}}[{RATE}])) / '
            f'sum by ({by}) (rate({labels}{{{SEL}, outcome=~"correct|wrong"}}[{RATE}]))',
            WHO)], "percentunit")
    b.add("Labels by outcome", "Labels a second, by what the predictor made of them: "
          "correct and wrong (judged against its answer), unmatched (a request ID it does "
          "not hold: another replica's, too old, or never answered; stored for `modelctl "
          "feedback report`), duplicate (a second label for one ID), not_comparable (a "
          "list of labels whose length is not the request's).",
          [(f"sum by (outcome) (rate({labels}{{{SEL}}}[{RATE}]))", "{{outcome}}")], "ops")


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
        scope_variables("modelctl_requests_total", ("namespace", "isvc")),
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
