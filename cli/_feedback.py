"""``modelctl feedback``: push ground-truth labels in bulk, and report accuracy from them."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from cli._common import JsonOption
from cli._output import emit

app = typer.Typer(
    name="feedback",
    help=(
        "Ground-truth labels for earlier predictions: push them in bulk beside the "
        "captures, and report accuracy per version from the labels joined with the "
        "captures. See docs/FEEDBACK.md."
    ),
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode="rich",
)

CaptureUri = Annotated[str, typer.Option(
    "--capture-uri", metavar="URI", help="The predictors' --capture_uri: a directory, "
    "file:// or s3://bucket/prefix; labels live under <URI>/<model>/labels/.")]
Model = Annotated[str, typer.Option("--model", metavar="NAME", help="The served model name.")]


@app.command()
def push(
    file: Annotated[Path, typer.Argument(
        metavar="FILE", help="JSON lines or Parquet; each row request_id and label, "
        "optionally ts.")],
    model: Model,
    capture_uri: Annotated[str | None, typer.Option(
        "--capture-uri", metavar="URI", help="Write the labels straight to the label store: "
        "the predictors' --capture_uri (a directory, file:// or s3://bucket/prefix).",
        show_default=False)] = None,
    url: Annotated[list[str] | None, typer.Option(
        "--url", metavar="URL", help="Send the labels to this predictor's feedback route "
        "instead (repeatable: every replica, canary and stable), so that they count in a "
        "rollout's accuracy check too; needs --token-file.", show_default=False)] = None,
    token_file: Annotated[Path | None, typer.Option(
        "--token-file", metavar="FILE", help="With --url: the file holding the predictors' "
        "--feedback_token_file token.", show_default=False)] = None,
    json_out: JsonOption = False,
) -> None:
    """Store the labels of FILE beside the captures, as the feedback route does.

    Each row: request_id (the prediction's x-request-id), label (a class, a value,
    a reference text, or a list of one label per item) and optionally ts (when
    the label became known: ISO 8601 or seconds since the epoch; default now).
    Every row is checked first: a bad one is named by its line and nothing is
    written (exit 2).

    With --capture-uri the labels go straight to the store, for `modelctl feedback
    report`. With --url they go through each predictor's feedback route (the route
    stores them, and counts those of its own answers for the rollout's accuracy
    check; ts is then the arrival).

    Examples:

        modelctl feedback push labels.jsonl --capture-uri s3://captures/prod \\
            --model demo-classify

        modelctl feedback push chargebacks.jsonl --model fraud --token-file token \\
            --url http://fraud-stable:8080 --url http://fraud-canary:8080
    """
    from accuracy import AccuracyError, push_labels, send_labels

    if (capture_uri is None) == (not url):
        raise AccuracyError("give --capture-uri (the label store) or --url (predictors), "
                         "one of the two")
    if url:
        if token_file is None:
            raise AccuracyError("--url needs --token-file (the predictors' feedback token)")
        sent = send_labels(file, url, model, _token(token_file))
        emit(sent.to_dict(), json_out, lambda console: console.print("\n".join(
            f"sent {sent.labels} labels of {model} to {where}: {c['matched']} judged "
            f"there, {c['unmatched']} unmatched, {c['duplicates']} repeated"
            for where, c in sent.predictors.items()), markup=False))
        return
    assert capture_uri is not None
    result = push_labels(file, capture_uri, model)
    emit(result.to_dict(), json_out, lambda console: console.print(
        f"wrote {result.written} label{'s' if result.written != 1 else ''} of {model} "
        f"to {result.capture_uri}/{model}/labels/ ({len(result.files)} "
        f"file{'s' if len(result.files) != 1 else ''})", markup=False))


def _token(path: Path) -> str:
    """The token in ``path`` (never echoed); an AccuracyError when it cannot be read."""
    from accuracy import AccuracyError

    try:
        token = path.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise AccuracyError(f"cannot read --token-file {path}: {type(exc).__name__}") from None
    if not token:
        raise AccuracyError(f"--token-file {path} is empty")
    return token


@app.command()
def report(
    capture_uri: CaptureUri,
    model: Model,
    since: Annotated[str | None, typer.Option(
        help="Predictions from: ISO 8601 (UTC if no zone) or a duration ago (30m, 2h, 1d).",
        show_default=False)] = None,
    until: Annotated[str | None, typer.Option(
        help="Predictions before (exclusive), same forms; default now.",
        show_default=False)] = None,
    window: Annotated[str, typer.Option(
        "--window", metavar="DURATION", help="Report each window of this length too "
        "(by the prediction's time, so a late label counts where its prediction was).")]
        = "1h",
    json_out: JsonOption = False,
    html: Annotated[Path | None, typer.Option(
        "--html", metavar="FILE", help="Also write the report as one self-contained HTML "
        "page (reliability diagram, accuracy per window).", show_default=False)] = None,
    memory_mb: Annotated[int, typer.Option(
        "--memory-mb", help="DuckDB's memory limit; past it, it spills to disk.")] = 1024,
) -> None:
    """Join the labels with the captures by request ID and score every version.

    The latest label of a request ID counts. Per version and role: labelled
    predictions and accuracy; for classifiers F1 per class and the expected
    calibration error (from the answers' scores); the mean absolute error of
    numbers; exact match and token-set Jaccard of generations. Labels whose
    request ID has no capture are counted as unmatched.

    Exit code 0, or 2 on errors (no captures or labels, another model, an empty
    window, unreadable files).

    Examples:

        modelctl feedback report --capture-uri s3://captures/prod --model demo-classify

        modelctl feedback report --capture-uri ./captures --model demo-classify \\
            --since 2d --window 6h --html accuracy.html
    """
    from datetime import UTC, datetime

    from accuracy import AccuracyRequest, build_accuracy_report
    from common import parse_duration_s
    from shadow import parse_time

    now = datetime.now(tz=UTC)
    request = AccuracyRequest(
        model=model, capture_uri=capture_uri,
        since=parse_time(since, now) if since else None,
        until=parse_time(until, now) if until else None,
        window_s=parse_duration_s(window), memory_limit_mb=memory_mb)
    doc = build_accuracy_report(request, now=now)
    if html is not None:
        from accuracy import render_html

        html.write_text(render_html(doc), encoding="utf-8")
        sys.stderr.write(f"wrote {html}\n")
    from cli._feedback_view import render_report

    emit(doc, json_out, lambda console: render_report(console, doc))
