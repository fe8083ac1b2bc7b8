"""``modelctl rollout``: move traffic to a new model version step by step, or back."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from cli._common import Context, JsonOption, Kubeconfig, Namespace, RegistryOption
from cli._output import emit, print_json

if TYPE_CHECKING:
    from registry import Registry
    from rollout import Engine, RolloutState, StepResult
    from rollout.analysis import Analysis
    from rollout.backends import KServeBackend, LocalNginxBackend

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

EXIT_ROLLED_BACK = 1
EXIT_UNFINISHED = 3

Isvc = Annotated[str, typer.Argument(metavar="ISVC", help="InferenceService name.")]
PrometheusUrl = Annotated[str | None, typer.Option(
    "--prometheus-url", envvar="MODELCTL_PROMETHEUS_URL",
    help="Prometheus that scrapes the predictors, e.g. http://prometheus:9090.",
    show_default=False)]
AnalysisFile = Annotated[Path | None, typer.Option(
    "--analysis", help="Analysis YAML (default: the one given to start, else the shipped "
    "error-rate, p99-latency and throttle-rate checks).", show_default=False)]
DryRun = Annotated[bool, typer.Option(
    "--dry-run", help="Decide and show the change, but write nothing anywhere.")]
Reason = Annotated[str, typer.Option("--reason", help="Why; recorded in the history and "
                                     "the Kubernetes Event.")]
Target = Annotated[str | None, typer.Option(
    "--target", help="`local`: the `modelctl dev` environment named ISVC (state under "
    "$MODELCTL_DEV_DIR, default ~/.modelctl/dev); anything else: a kubeconfig context.",
    show_default=False)]


def _backend(isvc: str, namespace: str | None, kubeconfig: str | None, context: str | None,
             target: str | None = None, canary_args: list[str] | None = None
             ) -> KServeBackend | LocalNginxBackend:
    from rollout import RolloutError
    from rollout.backends import KServeBackend, KubeClient, LocalNginxBackend

    if target == "local":
        return LocalNginxBackend.open(isvc, canary_args=canary_args)
    if canary_args:
        raise RolloutError("--canary-arg works only with --target local")
    if target is not None:
        if context is not None and context != target:
            raise RolloutError(f"--target {target} and --context {context} disagree")
        context = target
    kube = KubeClient.from_kubeconfig(kubeconfig, context)
    return KServeBackend(kube, namespace or kube.namespace, isvc)


def _registry(backend: KServeBackend | LocalNginxBackend, url: str | None) -> Registry:
    """The registry: as given, else (local target) the dev environment's own."""
    from registry import Registry
    from rollout.backends import LocalNginxBackend

    if url is None and isinstance(backend, LocalNginxBackend):
        return Registry.open(backend.env.read().registry)
    return Registry.open(url)


def _prometheus(backend: KServeBackend | LocalNginxBackend, url: str | None) -> str | None:
    """Prometheus: as given, else (local target) the dev environment's own."""
    from rollout.backends import LocalNginxBackend

    if url is None and isinstance(backend, LocalNginxBackend):
        return backend.env.read().prometheus_url
    return url


def _analysis(state: RolloutState, analysis_file: Path | None,
              prometheus_url: str | None) -> Analysis:
    """The analysis for ``state``, checked against Prometheus before anything changes."""
    from rollout import RolloutError, analysis_context
    from rollout.analysis import Analysis, PrometheusSource, load_analysis, parse_analysis

    if analysis_file is not None:
        spec = load_analysis(analysis_file)
    elif state.analysis_yaml is not None:
        spec = parse_analysis(state.analysis_yaml, source=f"the analysis stored on {state.ref}")
    else:
        spec = load_analysis(None)
    if not prometheus_url:
        raise RolloutError("no Prometheus to analyse with: pass --prometheus-url or set "
                           "MODELCTL_PROMETHEUS_URL")
    analysis = Analysis(spec, PrometheusSource(prometheus_url))
    analysis.validate(analysis_context(state))  # unreachable or a bad query: exit 2 now
    return analysis


def _show(result: StepResult, as_json: bool) -> None:
    from cli._rollout_view import render_step, step_doc

    emit(step_doc(result), as_json, lambda console: render_step(console, result))


@app.command()
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
    is kept with the rollout, so every later run analyses the same way.

    Examples:

        modelctl rollout start demo-embed --to demo-embed@7

        modelctl rollout start demo-embed --to demo-embed@canary \\
            --steps 10,50 --interval 5m --analysis slo.yaml --dry-run

        modelctl rollout start demo-fixed --to demo-fixed@2 --target local
    """
    from registry import parse_ref
    from rollout import Plan, parse_duration_s, parse_steps, start_rollout
    from rollout.analysis import Analysis, AnalysisContext, PrometheusSource, load_analysis

    plan = Plan(parse_steps(steps), parse_duration_s(interval), failure_limit)
    model, ref = parse_ref(to)
    analysis_yaml = None
    spec = load_analysis(analysis) if analysis is not None else None
    if analysis is not None:
        analysis_yaml = analysis.read_text(encoding="utf-8")
    backend = _backend(isvc, namespace, kubeconfig, context, target, canary_arg)
    reg = _registry(backend, registry)
    if require_shadow_pass:  # before anything is written anywhere
        from shadow import require_shadow_pass as check_shadow_pass

        check_shadow_pass(reg, model, reg.resolve(model, ref))
    prometheus_url = _prometheus(backend, prometheus_url)
    if prometheus_url:  # ask Prometheus every query once: a bad one fails here, not later
        version = str(reg.resolve(model, ref))
        ctx = AnalysisContext(backend.namespace, isvc, version, version, plan.interval_s)
        Analysis(spec or load_analysis(None), PrometheusSource(prometheus_url)).validate(ctx)
    result = start_rollout(backend, reg, model=model, ref=ref, plan=plan,
                           analysis_yaml=analysis_yaml, dry_run=dry_run)
    _show(result, json_out)


@app.command()
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
    from cli._rollout_view import render_status, status_doc
    from rollout import Engine

    seen, state = Engine(_backend(isvc, namespace, kubeconfig, context, target)).observe()
    emit(status_doc(seen, state), json_out, lambda console: render_status(console, seen, state))


@app.command()
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
    from cli._rollout_view import render_analysis
    from rollout import Engine, analysis_context

    backend = _backend(isvc, namespace, kubeconfig, context, target)
    _, state = Engine(backend).observe()
    result = _analysis(state, analysis, _prometheus(backend, prometheus_url)).analyze(
        analysis_context(state))
    emit(result.to_dict(), json_out, lambda console: render_analysis(console, result))


def _verb(kind: str, reason: str, isvc: str, namespace: str | None, kubeconfig: str | None,
          context: str | None, registry: str | None, dry_run: bool,
          target: str | None = None) -> tuple[Engine, StepResult]:
    from rollout import Command, Engine

    backend = _backend(isvc, namespace, kubeconfig, context, target)
    needs_registry = kind in ("promote", "promote-full", "rollback")
    engine = Engine(backend, registry=_registry(backend, registry) if needs_registry else None,
                    dry_run=dry_run)
    return engine, engine.step(Command(kind, reason))


def _wait_final(engine: Engine, result: StepResult, kind: str, timeout_s: float) -> StepResult:
    """Repeat ``kind`` until the rollout's end is in effect or ``timeout_s`` passes;
    the decisions of every step are kept."""
    from dataclasses import replace

    from rollout import Command

    decisions = result.decisions
    deadline = time.monotonic() + timeout_s
    while not result.is_final and time.monotonic() < deadline:
        time.sleep(0.5)
        result = engine.step(Command(kind))
        decisions = (*decisions, *result.decisions)
    return replace(result, decisions=decisions)


@app.command()
def promote(
    isvc: Isvc,
    full: Annotated[bool, typer.Option("--full", help="Straight to 100% and promote.")] = False,
    reason: Reason = "manual promotion",
    wait: Annotated[bool, typer.Option(
        help="After a promotion, wait until it is in effect.")] = True,
    timeout: Annotated[str, typer.Option(help="How long --wait waits.")] = "5m",
    registry: RegistryOption = None,
    namespace: Namespace = None,
    kubeconfig: Kubeconfig = None,
    context: Context = None,
    target: Target = None,
    dry_run: DryRun = False,
    json_out: JsonOption = False,
) -> None:
    """Move the canary to the next step now; --full promotes it to stable.

    Promotion moves the registry alias stable and removes canary once it is in
    effect (KServe's Standard mode first moves all traffic to a full-size canary,
    then renames it). Refused while the canary is not Ready. Exits 3 if the
    promotion is not in effect within --timeout (run the command again to finish).

    Examples:

        modelctl rollout promote demo-embed

        modelctl rollout promote demo-embed --full --reason "load test passed"
    """
    from rollout import Phase, parse_duration_s

    kind = "promote-full" if full else "promote"
    engine, result = _verb(kind, reason, isvc, namespace, kubeconfig, context, registry,
                           dry_run, target)
    promoting = result.state.phase is Phase.PROMOTED and wait and not dry_run
    result = _wait_final(engine, result, kind, parse_duration_s(timeout)) if promoting else result
    _show(result, json_out)
    if promoting and not result.is_final:
        sys.stderr.write(f"{result.seen.target}: {result.state.canary_label} is promoted, but "
                         f"the promotion is not in effect yet ({result.waiting}); run the "
                         "command again to finish\n")
        raise typer.Exit(EXIT_UNFINISHED)


@app.command()
def rollback(
    isvc: Isvc,
    reason: Reason = "manual rollback",
    wait: Annotated[bool, typer.Option(help="Wait until the stable spec is restored.")] = True,
    timeout: Annotated[str, typer.Option(help="How long --wait waits.")] = "5m",
    registry: RegistryOption = None,
    namespace: Namespace = None,
    kubeconfig: Kubeconfig = None,
    context: Context = None,
    target: Target = None,
    dry_run: DryRun = False,
    json_out: JsonOption = False,
) -> None:
    """Send all traffic back to the stable version at once; restore its spec.

    Exits 3 if the restored version is not Ready within --timeout (traffic
    is already back on stable by then; run the command again to finish).

    Example:

        modelctl rollout rollback demo-embed --reason "p99 up in dashboards"
    """
    from rollout import Phase, parse_duration_s

    engine, result = _verb("rollback", reason, isvc, namespace, kubeconfig, context, registry,
                           dry_run, target)
    if wait and not dry_run:
        result = _wait_final(engine, result, "rollback", parse_duration_s(timeout))
    _show(result, json_out)
    if not dry_run and result.state.phase is not Phase.ROLLED_BACK and wait:
        sys.stderr.write(f"{result.seen.target}: traffic is on {result.state.stable_label}, "
                         f"but restoring it is not finished ({result.waiting}); run the "
                         "command again to finish\n")
        raise typer.Exit(EXIT_UNFINISHED)


@app.command()
def pause(
    isvc: Isvc,
    reason: Reason = "",
    namespace: Namespace = None,
    kubeconfig: Kubeconfig = None,
    context: Context = None,
    target: Target = None,
    dry_run: DryRun = False,
    json_out: JsonOption = False,
) -> None:
    """Hold the rollout at its current weight (a running `run` holds too).

    Example:

        modelctl rollout pause demo-embed --reason "investigating alert"
    """
    _, result = _verb("pause", reason, isvc, namespace, kubeconfig, context, None, dry_run,
                      target)
    _show(result, json_out)


@app.command()
def resume(
    isvc: Isvc,
    reason: Reason = "",
    namespace: Namespace = None,
    kubeconfig: Kubeconfig = None,
    context: Context = None,
    target: Target = None,
    dry_run: DryRun = False,
    json_out: JsonOption = False,
) -> None:
    """Resume a paused rollout; the current step's interval starts again.

    Example:

        modelctl rollout resume demo-embed
    """
    _, result = _verb("resume", reason, isvc, namespace, kubeconfig, context, None, dry_run,
                      target)
    _show(result, json_out)


@app.command()
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
    from cli._rollout_view import render_events, render_history
    from rollout import Engine
    from rollout.backends import LocalNginxBackend

    backend = _backend(isvc, namespace, kubeconfig, context, target)
    _, state = Engine(backend).observe()
    if events:
        found = (backend.list_events() if isinstance(backend, LocalNginxBackend)
                 else backend.kube.list_events(backend.namespace, isvc))
        emit(found, json_out, lambda console: render_events(console, found))
        return
    docs = [d.to_dict() for d in state.history]
    emit(docs, json_out, lambda console: render_history(console, state))


@app.command()
def run(
    isvc: Isvc,
    deadline: Annotated[str | None, typer.Option(
        help="Give up (exit 3) if not promoted or rolled back by then, e.g. 2h.",
        show_default=False)] = None,
    poll: Annotated[str, typer.Option(help="How often to look between analyses.")] = "5s",
    lease: Annotated[str, typer.Option(help="How long this run's claim lasts if it dies; "
                                       "renewed while it runs.")] = "60s",
    analysis: AnalysisFile = None,
    registry: RegistryOption = None,
    namespace: Namespace = None,
    kubeconfig: Kubeconfig = None,
    context: Context = None,
    target: Target = None,
    prometheus_url: PrometheusUrl = None,
    dry_run: DryRun = False,
    json_out: JsonOption = False,
) -> None:
    """Drive the rollout to its end: wait, analyse, advance, hold or roll back.

    Pass: the next step; after the last, promote. Fail: counted, and rolled
    back at the failure limit. Inconclusive (too few requests, no data,
    Prometheus unreachable): hold, never promote.

    A second run refuses while this one holds the lease. After a crash,
    start another run: it resumes where the last one stopped.

    Exit codes: 0 promoted, 1 rolled back, 3 not done by --deadline, 2 errors.

    Example:

        modelctl rollout run demo-embed --deadline 2h \\
            --prometheus-url http://prometheus:9090
    """
    from cli._output import stderr, stdout
    from cli._rollout_view import Progress, render_step, step_doc
    from rollout import Engine, new_holder_id, parse_duration_s
    from rollout import run as run_loop

    deadline_s = parse_duration_s(deadline) if deadline else None
    poll_s, lease_s = parse_duration_s(poll), parse_duration_s(lease)
    backend = _backend(isvc, namespace, kubeconfig, context, target)
    _, state = Engine(backend).observe()
    analyzer = (_analysis(state, analysis, _prometheus(backend, prometheus_url))
                if not state.phase.is_final else None)
    engine = Engine(backend, analyzer=analyzer, registry=_registry(backend, registry),
                    holder=new_holder_id(), lease_s=lease_s, dry_run=dry_run)
    with Progress(stderr() if json_out else stdout()) as progress:
        result = run_loop(engine, poll_s=poll_s, deadline_s=deadline_s, progress=progress)
    if json_out:
        doc: dict[str, Any] = {"outcome": result.outcome, **step_doc(result.last)}
        print_json(doc)
    elif result.outcome == "dry-run":
        render_step(stdout(), result.last)
    codes = {"promoted": 0, "dry-run": 0, "rolled-back": EXIT_ROLLED_BACK,
             "deadline": EXIT_UNFINISHED}
    if result.outcome == "deadline":
        sys.stderr.write(f"{result.last.seen.target}: not finished by the deadline "
                         f"({result.last.waiting})\n")
    raise typer.Exit(codes[result.outcome])
