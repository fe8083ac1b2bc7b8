"""``modelctl shadow``: mirror live traffic to a candidate version and judge it offline."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from cli._common import Context, JsonOption, Kubeconfig, Namespace, RegistryOption
from cli._output import emit, print_json

app = typer.Typer(
    name="shadow",
    help=(
        "Shadow traffic: run a candidate version beside the one users get, mirror a "
        "sample of live requests to it, capture both sides' answers, and compare them "
        "offline before any user sees the candidate. See docs/SHADOW.md."
    ),
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode="rich",
)

EXIT_FAIL = 1
EXIT_INCONCLUSIVE = 3

Isvc = Annotated[str, typer.Argument(metavar="ISVC", help="The primary InferenceService.")]
DryRun = Annotated[bool, typer.Option("--dry-run", help="Print the changes; write nothing.")]


@app.command()
def report(
    name: Annotated[str, typer.Argument(metavar="NAME", help="The model both sides serve.")],
    primary: Annotated[str, typer.Option(
        "--primary", metavar="URI", help="Capture of the primary: a directory, file:// or "
        "s3://bucket/prefix (its --capture_uri).")],
    shadow: Annotated[str, typer.Option(
        "--shadow", metavar="URI", help="Capture of the shadow (may be the same URI: records "
        "are told apart by their role).")],
    since: Annotated[str | None, typer.Option(
        help="Window start: ISO 8601 (UTC if no zone) or a duration ago (30m, 2h, 1d).",
        show_default=False)] = None,
    until: Annotated[str | None, typer.Option(
        help="Window end (exclusive), same forms; default now.", show_default=False)] = None,
    output_format: Annotated[str, typer.Option(
        "--format", help="table, json or md.")] = "table",
    thresholds: Annotated[Path | None, typer.Option(
        "--thresholds", metavar="FILE", help="YAML thresholds (docs/SHADOW.md); defaults "
        "apply to keys it does not set.", show_default=False)] = None,
    threshold: Annotated[list[str] | None, typer.Option(
        "--threshold", metavar="KEY=VALUE", help="Override one threshold, e.g. "
        "min_label_match=0.9, min_pairs=500, max_latency_p99_ratio=null (repeatable).",
        show_default=False)] = None,
    shadow_version: Annotated[str | None, typer.Option(
        "--shadow-version", help="Only this shadow version (when the window holds several).",
        show_default=False)] = None,
    save_to_registry: Annotated[bool, typer.Option(
        "--save-to-registry", help="Store the report next to the shadow's version, where "
        "`rollout start --require-shadow-pass` looks for it.")] = False,
    registry: RegistryOption = None,
    memory_mb: Annotated[int, typer.Option(
        "--memory-mb", help="DuckDB's memory limit; past it, it spills to disk.")] = 1024,
    html: Annotated[Path | None, typer.Option(
        "--html", metavar="FILE", help="Also write the report as one self-contained HTML "
        "page with its plots (latency CDFs; cosine distribution or confusion matrix).",
        show_default=False)] = None,
) -> None:
    """Join primary and shadow captures by request ID and judge the shadow.

    Per task: label match and confusion (classification), cosine similarity
    (embeddings), exact match and token overlap (generation), exact match
    (fixed-latency); latency p50/p99 of both sides, error and timeout rates,
    coverage; each check against its threshold with a confidence interval.

    Exit code: 0 Pass, 1 Fail, 3 Inconclusive (too few pairs, or too close to
    call), 2 on errors (unreadable or foreign captures, no common request IDs,
    an empty window).

    Examples:

        modelctl shadow report demo-embed --primary s3://captures/prod \\
            --shadow s3://captures/prod --since 2h

        modelctl shadow report demo-classify --primary ./cap --shadow ./cap \\
            --threshold min_label_match=0.9 --format md --save-to-registry

        modelctl shadow report demo-embed --primary ./cap --shadow ./cap --html shadow.html
    """
    from datetime import UTC, datetime

    from shadow import ReportRequest, ShadowError, build_report, load_thresholds, parse_time

    if output_format not in ("table", "json", "md"):
        raise ShadowError(f"--format must be table, json or md, got {output_format!r}")
    now = datetime.now(tz=UTC)
    request = ReportRequest(
        model=name, primary_uri=primary, shadow_uri=shadow,
        since=parse_time(since, now) if since else None,
        until=parse_time(until, now) if until else None,
        shadow_version=shadow_version, thresholds=load_thresholds(thresholds, threshold or ()),
        memory_limit_mb=memory_mb,
    )
    result = build_report(request, now=now)
    doc = result.to_dict()
    if save_to_registry:
        doc["stored_at"] = _save(registry, name, result.shadow_version, doc)
    if html is not None:
        from shadow.page import render_html

        html.write_text(render_html(doc), encoding="utf-8")
        sys.stderr.write(f"wrote {html}\n")
    _show(doc, output_format)
    code = {"Pass": 0, "Fail": EXIT_FAIL}.get(result.verdict.value, EXIT_INCONCLUSIVE)
    raise typer.Exit(code)


def _save(registry: str | None, model: str, version: str, doc: dict[str, object]) -> str:
    from registry import Registry
    from shadow import ShadowError

    if not version.isdigit():
        raise ShadowError(f"shadow version {version!r} is not a registry version number; "
                          "cannot store the report")
    where = Registry.open(registry).put_report(model, int(version), "shadow", doc)
    sys.stderr.write(f"stored the report at {where}\n")
    return where


def _show(doc: dict[str, object], output_format: str) -> None:
    from cli._shadow_view import render_markdown, render_table

    if output_format == "json":
        print_json(doc)
    elif output_format == "md":
        sys.stdout.write(render_markdown(doc))
    else:
        emit(doc, False, lambda console: render_table(console, doc))


@app.command()
def start(
    isvc: Isvc,
    candidate: Annotated[str, typer.Option(
        "--candidate", metavar="NAME@REF", help="The version to shadow: NAME@VERSION, "
        "NAME@ALIAS or NAME.")],
    rate: Annotated[float, typer.Option(help="Share of requests mirrored, (0, 1].")] = 0.1,
    capture_uri: Annotated[str | None, typer.Option(
        "--capture-uri", metavar="URI", help="Also capture both sides here (s3://bucket/prefix); "
        "the primary keeps a --capture_uri it already has.", show_default=False)] = None,
    registry: RegistryOption = None,
    namespace: Namespace = None,
    kubeconfig: Kubeconfig = None,
    context: Context = None,
    dry_run: DryRun = False,
    json_out: JsonOption = False,
) -> None:
    """Create ISVC-shadow serving NAME@REF and mirror --rate of ISVC's requests to it.

    The shadow is the primary's predictor with the candidate's storageUri,
    --role=shadow and the primary's model name, in KServe Standard mode; the
    primary gets --shadow_url and --shadow_sample_rate (its pods roll). Refused
    while a rollout is in progress on ISVC.

    Examples:

        modelctl shadow start demo-embed --candidate demo-embed@7 --rate 0.1 \\
            --capture-uri s3://captures/prod -n models

        modelctl shadow start demo-embed --candidate demo-embed@canary --dry-run
    """
    from registry import Registry, parse_ref
    from rollout.backends import KubeClient
    from shadow import start_shadow

    model, ref = parse_ref(candidate)
    kube = KubeClient.from_kubeconfig(kubeconfig, context)
    change = start_shadow(kube, Registry.open(registry), namespace or kube.namespace, isvc,
                          model=model, ref=ref, rate=rate, capture_uri=capture_uri,
                          dry_run=dry_run)
    _show_change(change.to_dict(), json_out, dry_run)


@app.command()
def stop(
    isvc: Isvc,
    namespace: Namespace = None,
    kubeconfig: Kubeconfig = None,
    context: Context = None,
    dry_run: DryRun = False,
    json_out: JsonOption = False,
) -> None:
    """Stop mirroring from ISVC and delete ISVC-shadow (nothing to do is fine).

    Example:

        modelctl shadow stop demo-embed -n models
    """
    from rollout.backends import KubeClient
    from shadow import stop_shadow

    kube = KubeClient.from_kubeconfig(kubeconfig, context)
    change = stop_shadow(kube, namespace or kube.namespace, isvc, dry_run=dry_run)
    _show_change(change.to_dict(), json_out, dry_run)


def _show_change(change: dict[str, object], json_out: bool, dry_run: bool) -> None:
    from cli._shadow_view import render_change

    emit({**change, "dry_run": dry_run}, json_out,
         lambda console: render_change(console, change, dry_run=dry_run))
