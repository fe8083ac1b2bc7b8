"""``modelctl rollout report``: the rollout as one HTML page to open or send, with its
decisions on a timeline and every analysed metric for canary and stable."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Annotated

import typer

from cli._common import Context, JsonOption, Kubeconfig, Namespace
from cli._output import print_json, stderr
from cli.rollout._args import (
    AnalysisFile,
    Isvc,
    PrometheusUrl,
    Target,
    open_backend,
    prometheus_for,
)


def report(
    isvc: Isvc,
    out: Annotated[Path | None, typer.Option(
        "--out", metavar="FILE", help="Where to write the page (default: "
        "rollout-<ISVC>.html here).", show_default=False)] = None,
    png: Annotated[Path | None, typer.Option(
        "--png", metavar="DIR", help="Also write each figure as a PNG file into DIR.",
        show_default=False)] = None,
    analysis: AnalysisFile = None,
    namespace: Namespace = None,
    kubeconfig: Kubeconfig = None,
    context: Context = None,
    prometheus_url: PrometheusUrl = None,
    target: Target = None,
    json_out: JsonOption = False,
) -> None:
    """Write the rollout of ISVC as one self-contained HTML page.

    The page holds the rollout's steps and decisions on a timeline, and for every
    metric of its analysis the canary's and stable's series over the rollout
    (Prometheus range queries) with each analysis window shaded by its verdict,
    and the outcome. It has no script and fetches nothing: open it anywhere, or
    attach it to a ticket. Without a reachable Prometheus the page still has the
    decisions. --json prints the report's data instead of its path.

    Examples:

        modelctl rollout report demo-embed --prometheus-url http://prometheus:9090

        modelctl rollout report demo-fixed --target local --out /tmp/r.html --png /tmp/figs
    """
    from rollout import Engine
    from rollout.analysis import PrometheusSource, analysis_spec, redact_url
    from rollout.report import build_report, render_html, write_pngs

    backend = open_backend(isvc, namespace, kubeconfig, context, target)
    _, state = Engine(backend).observe()
    spec = analysis_spec(analysis, stored=state.analysis_yaml,
                         stored_source=f"the analysis stored on {state.ref}", task=state.task)
    url = prometheus_for(backend, prometheus_url)
    source = PrometheusSource(url) if url else None
    try:
        data = build_report(state, spec, source, now=time.time(),
                            prometheus=redact_url(url) if url else "")
    finally:
        if source is not None:
            source.close()
    path = out or Path(f"rollout-{isvc}.html")
    path.write_text(render_html(data), encoding="utf-8")
    figures = write_pngs(data, png) if png is not None else []
    if json_out:
        print_json({**data.to_dict(), "html": str(path), "png": [str(p) for p in figures]})
        return
    console = stderr()
    for panel in data.metrics:
        if panel.error:
            console.print(f"warning: {panel.name}: {panel.error}")
    sys.stdout.write("".join(f"{p}\n" for p in [path, *figures]))
