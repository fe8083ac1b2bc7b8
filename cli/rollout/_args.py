"""What every ``modelctl rollout`` command shares: its options, and turning them into
the backend, the registry and the analysis (the packages do the work; this only
picks what the flags name)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from cli._output import emit

if TYPE_CHECKING:
    from registry import Registry
    from rollout import RolloutState, StepResult
    from rollout.analysis import Analysis
    from rollout.backends import TrafficBackend

EXIT_ROLLED_BACK = 1
EXIT_UNFINISHED = 3

Isvc = Annotated[str, typer.Argument(metavar="ISVC", help="InferenceService name.")]
PrometheusUrl = Annotated[str | None, typer.Option(
    "--prometheus-url", envvar="MODELCTL_PROMETHEUS_URL",
    help="Prometheus that scrapes the predictors, e.g. http://prometheus:9090.",
    show_default=False)]
# The shipped defaults, by the canary's registry task (rollout/analysis/_setup.py picks;
# tests/rollout/test_cli_rollout_llm.py holds this text to the files' metrics).
AnalysisFile = Annotated[Path | None, typer.Option(
    "--analysis", help="Analysis YAML (default: the one given to start, else the shipped "
    "default for the canary's registry task, kept at start: for task llm error-rate, "
    "throttle-rate, ttft-p99 and tpot-p99; for any other error-rate, throttle-rate and "
    "p99-latency).", show_default=False)]
DryRun = Annotated[bool, typer.Option(
    "--dry-run", help="Decide and show the change, but write nothing anywhere.")]
Reason = Annotated[str, typer.Option("--reason", help="Why; recorded in the history and "
                                     "the Kubernetes Event.")]
Target = Annotated[str | None, typer.Option(
    "--target", help="`local`: the `modelctl dev` environment named ISVC (state under "
    "$MODELCTL_DEV_DIR, default ~/.modelctl/dev); anything else: a kubeconfig context.",
    show_default=False)]
Timeout = Annotated[str, typer.Option(help="How long --wait waits.")]


def open_backend(isvc: str, namespace: str | None, kubeconfig: str | None,
                 context: str | None, target: str | None = None,
                 canary_args: list[str] | None = None) -> TrafficBackend:
    """The backend ``--target`` names: ``local``, else KServe in that kubeconfig context."""
    from rollout import RolloutError
    from rollout.backends import make_backend

    if target == "local":
        return make_backend("local", isvc=isvc, canary_args=canary_args)
    if canary_args:
        raise RolloutError("--canary-arg works only with --target local")
    if target is not None:
        if context is not None and context != target:
            raise RolloutError(f"--target {target} and --context {context} disagree")
        context = target
    return make_backend("kserve", isvc=isvc, namespace=namespace, kubeconfig=kubeconfig,
                        context=context)


def open_registry(backend: TrafficBackend, url: str | None) -> Registry:
    """The registry: as given, else the backend's own (a dev environment's), else the default."""
    from registry import Registry

    return Registry.open(url if url is not None else backend.default_registry_url())


def prometheus_for(backend: TrafficBackend, url: str | None) -> str | None:
    """Prometheus: as given, else the backend's own (a dev environment's)."""
    return url if url is not None else backend.default_prometheus_url()


def analysis_for(backend: TrafficBackend, state: RolloutState, analysis_file: Path | None,
                 prometheus_url: str | None) -> Analysis:
    """The analysis of ``state`` (the file given, else the one stored with it, else the
    shipped default for its canary's task), checked against Prometheus before anything
    changes: unreachable or a bad query exits 2 now."""
    from rollout import analysis_context
    from rollout.analysis import analysis_spec, prepare_analysis

    url = prometheus_for(backend, prometheus_url)
    spec = analysis_spec(analysis_file, stored=state.analysis_yaml,
                         stored_source=f"the analysis stored on {state.ref}", task=state.task)
    return prepare_analysis(spec, url, analysis_context(state))


def show(result: StepResult, as_json: bool) -> None:
    """One step's outcome: its JSON document, or its decisions for people."""
    from cli.rollout._view import render_step, step_doc

    emit(step_doc(result), as_json, lambda console: render_step(console, result))
