"""``python -m bench.loadgen``: flags in, a summary table (or JSON) out."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from bench.loadgen._result import LatencyStats, LoadResult
from bench.loadgen._spec import ARRIVALS, LoadgenError
from common import InvalidDuration, parse_duration_s


def parse_duration(text: str) -> float:
    """``"10s"``, ``"500ms"``, ``"2m"`` or a bare number of seconds, in seconds.

    The grammar is ``common.parse_duration_s``'s. Zero parses: ``LoadSpec`` refuses it.
    """
    try:
        return parse_duration_s(text, allow_zero=True)
    except InvalidDuration:
        raise LoadgenError(f"bad duration {text!r}: use e.g. 10s, 500ms, 2m") from None


def parse_header(text: str) -> tuple[str, str]:
    name, sep, value = text.partition(":")
    if not sep or not name.strip():
        raise LoadgenError(f"bad header {text!r}: use NAME:VALUE")
    return name.strip(), value.strip()


def load_bodies(body: str | None, body_file: Path | None) -> bytes | list[bytes] | None:
    """One JSON body, or the lines of a ``.jsonl`` file to send in turn."""
    if body is not None and body_file is not None:
        raise LoadgenError("give --body or --body-file, not both")
    if body is not None:
        return _checked_json(body, "--body")
    if body_file is None:
        return None
    try:
        text = body_file.read_text()
    except OSError as exc:
        raise LoadgenError(f"cannot read body file {body_file}: {exc.strerror}") from exc
    if body_file.suffix == ".jsonl":
        lines = [line for line in text.splitlines() if line.strip()]
        if not lines:
            raise LoadgenError(f"{body_file} has no bodies")
        return [_checked_json(line, f"{body_file} line {n}") for n, line in enumerate(lines, 1)]
    return _checked_json(text, str(body_file))


def _checked_json(text: str, where: str) -> bytes:
    try:
        json.loads(text)
    except ValueError as exc:
        raise LoadgenError(f"{where} is not valid JSON: {exc}") from exc
    return text.strip().encode()


def load(
    url: Annotated[str, typer.Option(help="Target http:// URL.")],
    rate: Annotated[float, typer.Option(help="Offered load, requests per second.")],
    duration: Annotated[str, typer.Option(help="Measured window, e.g. 10s, 500ms, 2m.")] = "10s",
    body: Annotated[str | None, typer.Option(help="JSON body of every request.")] = None,
    body_file: Annotated[
        Path | None,
        typer.Option(help="File with one JSON body, or a .jsonl file of bodies sent in turn."),
    ] = None,
    header: Annotated[
        list[str] | None, typer.Option(help="NAME:VALUE header; repeat for more.")
    ] = None,
    method: Annotated[str, typer.Option(help="HTTP method.")] = "POST",
    workers: Annotated[int, typer.Option(help="Processes sharing the rate.")] = 1,
    arrival: Annotated[str, typer.Option(help=f"One of {', '.join(ARRIVALS)}.")] = "constant",
    seed: Annotated[int, typer.Option(help="Seed of Poisson arrivals.")] = 0,
    warmup_s: Annotated[float, typer.Option(help="Seconds sent first, left out of stats.")] = 0.0,
    timeout_s: Annotated[float, typer.Option(help="Per-request timeout in seconds.")] = 30.0,
    max_connections: Annotated[int, typer.Option(help="Cap on open connections.")] = 4096,
    json_out: Annotated[
        str | None, typer.Option("--json", help="Write the result as JSON here (- = stdout).")
    ] = None,
    samples: Annotated[
        Path | None, typer.Option(help="Save per-request samples to this .npz file.")
    ] = None,
) -> None:
    """Offer a fixed request rate to URL, open loop, and report what came back.

    Latency counts from when each request was due, so queueing is never hidden.

    Examples:

        python -m bench.loadgen --url http://127.0.0.1:8080/v1/models/m:predict \\
            --rate 500 --duration 10s --warmup-s 2 --body '{"instances":["hi"]}'

        python -m bench.loadgen --url http://127.0.0.1:8080/v1/models/m:predict \\
            --rate 2000 --workers 2 --body-file bodies.jsonl \\
            --header x-request-timeout-ms:500 --json result.json
    """
    from bench.loadgen import run_open_loop

    result = run_open_loop(
        url,
        rate=rate,
        duration_s=parse_duration(duration),
        body=load_bodies(body, body_file),
        headers=[parse_header(h) for h in header or []],
        method=method,
        timeout_s=timeout_s,
        workers=workers,
        arrival=arrival,
        seed=seed,
        warmup_s=warmup_s,
        max_connections=max_connections,
    )
    if samples is not None:
        result.samples.save(str(samples))
    if json_out == "-":
        sys.stdout.write(json.dumps(result.to_dict(), indent=2) + "\n")
        return
    if json_out is not None:
        Path(json_out).write_text(json.dumps(result.to_dict(), indent=2) + "\n")
    render(result, Console(highlight=False, soft_wrap=True))


def render(result: LoadResult, console: Console) -> None:
    """The human summary: rates, statuses, latency quantiles and send lag."""
    rows: list[tuple[str, Any]] = [
        ("url", f"{result.method} {result.url}"),
        ("offered", f"{result.offered_rate_rps:g} req/s {result.arrival}"),
        ("workers", result.workers),
        ("window", f"{result.duration_s:g} s after {result.warmup_s:g} s warm-up"),
        ("throughput", f"{result.throughput_rps:.1f} req/s of 2xx"),
        ("success", f"{result.success_ratio:.2%} of {result.sent} sent"),
        ("statuses", ", ".join(f"{k}: {v}" for k, v in result.status_counts.items())),
        ("in flight", f"max {result.max_in_flight}, {result.connections_opened} connection(s)"),
    ]
    summary = Table(show_header=False, box=None)
    for name, value in rows:
        summary.add_row(name, str(value))
    console.print(summary)
    latency = Table(title="latency (ms)", title_justify="left", header_style="bold")
    for column in ("", "count", "p50", "p90", "p99", "max", "mean"):
        latency.add_column(column, justify="right")
    for name, stats in (
        ("2xx", result.latency_ok),
        ("all", result.latency_all),
        ("send lag", result.send_lag),
    ):
        latency.add_row(name, str(stats.count), *_ms(stats))
    console.print(latency)
    if not result.is_on_schedule():
        console.print(
            "[yellow]warning: the generator fell behind its schedule (p99 send lag over 5 ms); "
            "the offered load was lower than asked — add --workers or lower --rate[/yellow]"
        )


def _ms(stats: LatencyStats) -> list[str]:
    values = (stats.p50_s, stats.p90_s, stats.p99_s, stats.max_s, stats.mean_s)
    return ["-" if v is None else f"{v * 1000:.1f}" for v in values]


def run_cli(argv: Sequence[str] | None = None) -> None:
    """Parse ``argv`` and run; expected errors print one line and exit 2."""
    app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
    app.command()(load)
    try:
        app(args=list(argv) if argv is not None else None, prog_name="python -m bench.loadgen")
    except LoadgenError as exc:
        sys.stderr.write(f"error: {exc}\n")
        sys.exit(2)
