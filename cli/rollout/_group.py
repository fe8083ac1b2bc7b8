"""``modelctl rollout``: move traffic to a new model version step by step, or back.

This module holds the group and the commands that start and read a rollout;
``cli/rollout/_verbs.py`` the ones that move it, ``cli/rollout/_args.py`` the options
they share, ``cli/rollout/_view.py`` the rendering.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Annotated

import typer

from cli._common import Context, JsonOption, Kubeconfig, Namespace, RegistryOption
from cli._output import emit
from cli.rollout._args import (
    AnalysisFile,
    DryRun,
    Isvc,
    PrometheusUrl,
    Target,
    analysis_for,
    open_backend,
    open_registry,
    prometheus_for,
    show,
)
from cli.rollout._report import report
from cli.rollout._verbs import pause, promote, resume, rollback, run

if TYPE_CHECKING:
    from rollout import StepResult
    from rollout.analysis._traffic import TrafficNeeds

app = typer.Typer(
    name="rollout",
    help=(
        "Canary rollouts on KServe: point an InferenceService at a new registry version, "
        "move traffic step by step while Prometheus says it is healthy, then promote "
        "or roll back. The rollout's state lives in the ConfigMap <isvc>-rollout beside "
        "the InferenceService, so any machine can pick it up."
    ),
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode="rich",
)


def start(
    isvc: Isvc,
    to: Annotated[str, typer.Option("--to", metavar="NAME@REF",
                                    help="The new version: NAME@VERSION, NAME@ALIAS or NAME.")],
    steps: Annotated[str, typer.Option(help="Canary weights in percent, strictly "
                                       "increasing within 1-100.")] = "5,25,50",
    interval: Annotated[str, typer.Option(help="Time at each step before it is analysed "
                                          "(60s, 2m, 1h).")] = "60s",
    failure_limit: Annotated[int, typer.Option(help="Failed analyses before rolling back.")] = 2,
    analysis: AnalysisFile = None,
    registry: RegistryOption = None,
    namespace: Namespace = None,
    kubeconfig: Kubeconfig = None,
    context: Context = None,
    prometheus_url: PrometheusUrl = None,
    target: Target = None,
    canary_arg: Annotated[list[str] | None, typer.Option(
        metavar="FLAG=VALUE", show_default=False,
        help="--target local: extra flag for the canary predictor (repeatable), e.g. "
        "inject_latency_ms=100.")] = None,
    require_shadow_pass: Annotated[bool, typer.Option(
        "--require-shadow-pass", help="Refuse unless the registry holds a passing shadow "
        "report for the new version (modelctl shadow report --save-to-registry).")] = False,
    dry_run: DryRun = False,
    json_out: JsonOption = False,
) -> None:
    """Start a canary: point ISVC at NAME@REF with the first step's traffic.

    Sets the registry alias [bold]canary[/bold]. An --analysis file is checked
    (with --prometheus-url, its queries too) before anything is written, and
    is kept with the rollout, so every later run analyses the same way. Without
    one, the new version's registry task, kept with the rollout too, picks the
    shipped default (--analysis below): for task llm time to first token and
    per output token instead of request latency.

    Examples:

        modelctl rollout start demo-embed --to demo-embed@7

        modelctl rollout start demo-embed --to demo-embed@canary \\
            --steps 10,50 --interval 5m --analysis slo.yaml --dry-run

        modelctl rollout start demo-fixed --to demo-fixed@2 --target local
    """
    from common import parse_duration_s
    from registry import parse_ref
    from rollout import Plan, parse_steps, start_rollout
    from rollout.analysis import (
        AnalysisContext,
        analysis_spec,
        prepare_analysis,
        stable_traffic_needs,
    )

    plan = Plan(parse_steps(steps), parse_duration_s(interval), failure_limit)
    model, ref = parse_ref(to)
    analysis_yaml = None
    spec = analysis_spec(analysis) if analysis is not None else None  # a bad file fails first
    if analysis is not None:
        analysis_yaml = analysis.read_text(encoding="utf-8")
    backend = open_backend(isvc, namespace, kubeconfig, context, target, canary_arg)
    reg = open_registry(backend, registry)
    # Resolved once: the version checked, the task read and the version started agree.
    resolved = reg.resolve(model, ref)
    task = reg.manifest(model, resolved).task  # picks the default analysis, kept in the state
    if require_shadow_pass:  # before anything is written anywhere
        from shadow import require_shadow_pass as check_shadow_pass

        check_shadow_pass(reg, model, resolved)
    prometheus_url = prometheus_for(backend, prometheus_url)
    checked = None
    if prometheus_url:  # ask Prometheus every query once: a bad one fails here, not later
        version = str(resolved)
        ctx = AnalysisContext(backend.namespace, isvc, version, version, plan.interval_s)
        checked = prepare_analysis(spec or analysis_spec(task=task), prometheus_url, ctx)
    result = start_rollout(backend, reg, model=model, ref=str(resolved), plan=plan,
                           analysis_yaml=analysis_yaml, task=task, dry_run=dry_run)
    if checked is not None:  # can the traffic stable serves now ever promote this plan?
        stable = str(result.state.stable_version)
        ctx = AnalysisContext(backend.namespace, isvc, stable, stable, plan.interval_s)
        result = _with_traffic_notes(result, stable_traffic_needs(checked, ctx, plan.steps_pct))
    show(result, json_out)


def _with_traffic_notes(result: StepResult, needs: TrafficNeeds | None) -> StepResult:
    """The traffic check's findings, as notes of the start's result."""
    if needs is None:
        note = "could not measure stable's traffic: no estimate of when this can promote"
        return dataclasses.replace(result, notes=(*result.notes, note))
    notes = [f"traffic: {n}" for n in needs.notes]
    served = f"stable served {needs.requests_per_interval:.0f} requests in the last interval"
    if needs.holds_forever:
        notes.append(f"{served}: at that traffic this rollout will hold and never promote; "
                     f"it needs at least {needs.min_requests_per_interval:.0f} an interval")
    elif needs.intervals_to_promote is not None:
        notes.append(f"{served}: at that traffic an equal canary would be promoted after "
                     f"about {needs.intervals_to_promote} interval(s)")
    return dataclasses.replace(result, notes=(*result.notes, *notes))


def status(
    isvc: Isvc,
    namespace: Namespace = None,
    kubeconfig: Kubeconfig = None,
    context: Context = None,
    target: Target = None,
    json_out: JsonOption = False,
) -> None:
    """Show versions, weight, step, the last analysis and recent decisions.

    Example:

        modelctl rollout status demo-embed -n modelctl
    """
    from cli.rollout._view import render_status, status_doc
    from rollout import Engine

    seen, state = Engine(open_backend(isvc, namespace, kubeconfig, context, target)).observe()
    emit(status_doc(seen, state), json_out, lambda console: render_status(console, seen, state))


def analyze(
    isvc: Isvc,
    analysis: AnalysisFile = None,
    namespace: Namespace = None,
    kubeconfig: Kubeconfig = None,
    context: Context = None,
    target: Target = None,
    prometheus_url: PrometheusUrl = None,
    json_out: JsonOption = False,
) -> None:
    """Run the analysis now and print each metric for canary and stable; change nothing.

    Example:

        modelctl rollout analyze demo-embed --prometheus-url http://localhost:9090
    """
    from cli.rollout._view import render_analysis
    from rollout import Engine, analysis_context

    backend = open_backend(isvc, namespace, kubeconfig, context, target)
    _, state = Engine(backend).observe()
    result = analysis_for(backend, state, analysis, prometheus_url).analyze(
        analysis_context(state))
    emit(result.to_dict(), json_out, lambda console: render_analysis(console, result))


def history(
    isvc: Isvc,
    events: Annotated[bool, typer.Option(
        "--events", help="Show the Kubernetes Events instead (kept ~1 h by default).")] = False,
    namespace: Namespace = None,
    kubeconfig: Kubeconfig = None,
    context: Context = None,
    target: Target = None,
    json_out: JsonOption = False,
) -> None:
    """Every decision of the rollout, oldest first, with its numbers.

    Example:

        modelctl rollout history demo-embed --json
    """
    from cli.rollout._view import render_events, render_history
    from rollout import Engine

    backend = open_backend(isvc, namespace, kubeconfig, context, target)
    _, state = Engine(backend).observe()
    if events:
        found = backend.list_events()
        emit(found, json_out, lambda console: render_events(console, found))
        return
    docs = [d.to_dict() for d in state.history]
    emit(docs, json_out, lambda console: render_history(console, state))


# Registered in this order, which is the order `modelctl rollout --help` lists them in.
for _command in (start, status, analyze, promote, rollback, pause, resume, history, report,
                 run):
    app.command()(_command)
