"""How ``modelctl shadow report`` shows a report: rich tables or Markdown (JSON is the dict)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rich.console import Console

from cli._output import num, table


def _pct(value: Any) -> str:
    return "-" if value is None else f"{100 * float(value):.2f}%"


def summary_rows(doc: Mapping[str, Any]) -> list[tuple[str, str]]:
    primary, shadow, pairs = doc["primary"], doc["shadow"], doc["pairs"]
    lat = pairs["latency_ms"]
    window = doc["window"]
    return [
        ("model", f"{doc['model']} ({doc['task']})"),
        ("primary", f"versions {', '.join(primary['versions'])}: {primary['records']} records "
                    f"in {primary['files']} files ({primary['uri']})"),
        ("shadow", f"version {doc['shadow_version']}: {shadow['records']} records in "
                   f"{shadow['files']} files ({shadow['uri']})"),
        ("window", f"{window['since'] or primary['first']} .. "
                   f"{window['until'] or primary['last']}"),
        ("pairs", f"{pairs['pairs']} (coverage {_pct(doc['coverage'])} of primary requests; "
                  f"{doc['shadow_unmatched']} shadow records unmatched; "
                  f"{pairs['input_mismatches']} with different inputs)"),
        ("latency p50 / p99 ms", f"primary {num(lat['primary']['p50'])} / "
                                 f"{num(lat['primary']['p99'])}, shadow "
                                 f"{num(lat['shadow']['p50'])} / {num(lat['shadow']['p99'])}"),
        *(_status_row(side, pairs["status"][side], pairs["pairs"]) for side in ("primary",
                                                                                  "shadow")),
        *agreement_rows(doc["task"], doc["agreement"]),
        *accuracy_rows(doc.get("accuracy")),
    ]


def accuracy_rows(accuracy: Mapping[str, Any] | None) -> list[tuple[str, str]]:
    """Each side's accuracy against ground-truth labels, when the report has labels."""
    if not accuracy:
        return []
    return [(f"{side} accuracy (labels)", f"{_pct(accuracy[side]['accuracy'])}: "
             f"{accuracy[side]['correct']} of {accuracy[side]['items']} labelled items right")
            for side in ("primary", "shadow") if side in accuracy]


def _status_row(side: str, counts: Mapping[str, int], n: int) -> tuple[str, str]:
    parts = [f"{name} {counts[name]} ({_pct(counts[name] / n if n else None)})"
             for name in ("errors", "timeouts", "throttled", "client_errors")]
    return (f"{side} statuses", ", ".join(parts))


def agreement_rows(task: str, agreement: Mapping[str, Any]) -> list[tuple[str, str]]:
    rows = [("items compared", f"{agreement['items']} ({agreement['unpaired_items']} unpaired)")]
    if task == "text-classification":
        rows.append(("label match", _pct(agreement["label_match_rate"])))
        cells = [f"{c['primary']}->{c['shadow']} {c['count']}" for c in agreement["confusion"]
                 if c["primary"] != c["shadow"]][:6]
        rows.append(("top disagreements", ", ".join(cells) or "none"))
    elif task == "feature-extraction":
        cos = agreement["cosine"]
        rows.append(("cosine p1 / p5 / p50 / mean",
                     " / ".join(num(cos[k]) for k in ("p1", "p5", "p50", "mean"))))
    elif "token_jaccard" in agreement:  # text-generation and llm
        jac = agreement["token_jaccard"]
        rows.append(("exact match", _pct(agreement["exact_match_rate"])))
        rows.append(("token Jaccard p5 / p50 / mean",
                     " / ".join(num(jac[k]) for k in ("p5", "p50", "mean"))))
    else:
        rows.append(("exact match", _pct(agreement["exact_match_rate"])))
    return rows


def check_rows(doc: Mapping[str, Any]) -> list[tuple[str, str, str, str, str, str]]:
    rows = []
    for check in doc["checks"]:
        interval = check.get("interval")
        shown = f"[{num(interval[0])}, {num(interval[1])}]" if interval else "-"
        rows.append((check["name"], check["verdict"], num(check["value"]),
                     num(check["threshold"]), shown, check["reason"]))
    return rows


def render_table(console: Console, doc: Mapping[str, Any]) -> None:
    console.print(table(f"Shadow report: {doc['model']}@{doc['shadow_version']} against the "
                        "primary", ("", ""), summary_rows(doc)))
    console.print(table(None, ("check", "verdict", "value", "threshold", "interval", "why"),
                        check_rows(doc)))
    console.print(f"verdict: [bold]{doc['verdict']}[/bold]")


def render_markdown(doc: Mapping[str, Any]) -> str:
    lines = [f"# Shadow report: {doc['model']}@{doc['shadow_version']}", "",
             f"**Verdict: {doc['verdict']}**", "", "| | |", "|---|---|"]
    lines += [f"| {k} | {v} |" for k, v in summary_rows(doc)]
    lines += ["", "| check | verdict | value | threshold | interval | why |",
              "|---|---|---|---|---|---|"]
    lines += ["| " + " | ".join(row) + " |" for row in check_rows(doc)]
    return "\n".join(lines) + "\n"


def render_change(console: Console, change: Mapping[str, Any], *, dry_run: bool) -> None:
    """What ``shadow start``/``stop`` did (or, with --dry-run, would do)."""
    import yaml

    verb = "would" if dry_run else "did"
    action = change["shadow_action"]
    target = f"{change['namespace']}/{change['shadow']}"
    lines = {"create": f"create InferenceService {target}",
             "patch": f"update InferenceService {target}",
             "delete": f"delete InferenceService {target}",
             "none": f"nothing to do for {target} (it does not exist)"}
    console.print(f"{verb}: {lines[action]}")
    for worker in change.get("queue_workers") or []:  # queue mode: the shadow's workers
        console.print(f"{verb}: {worker['verb']} {worker['kind']} "
                      f"{change['namespace']}/{worker['name']}")
    if change.get("primary_patch"):
        console.print(f"{verb}: patch {change['namespace']}/{change['primary']}")
    else:
        console.print(f"{verb}: leave {change['namespace']}/{change['primary']} as it is")
    if dry_run:
        if change.get("shadow_body"):
            console.print(yaml.safe_dump(change["shadow_body"], sort_keys=False).rstrip(),
                          markup=False)
            console.print("---")
        if change.get("primary_patch"):
            console.print(f"# merge patch of {change['primary']}")
            console.print(yaml.safe_dump(change["primary_patch"], sort_keys=False).rstrip(),
                          markup=False)
