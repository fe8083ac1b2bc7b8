"""``modelctl rollout promote / rollback / pause / resume / run``: the commands that move a
rollout (``cli/rollout/_group.py`` registers them on the group)."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING, Annotated, Any

import typer

from cli._common import Context, JsonOption, Kubeconfig, Namespace, RegistryOption
from cli._output import print_json
from cli.rollout._args import (
    EXIT_ROLLED_BACK,
    EXIT_UNFINISHED,
    AnalysisFile,
    DryRun,
    Isvc,
    PrometheusUrl,
    Reason,
    Target,
    Timeout,
    analysis_for,
    open_backend,
    open_registry,
    show,
)

if TYPE_CHECKING:
    from rollout import Engine, RolloutExporter, RolloutState, StepResult
    from rollout.backends import TrafficBackend


def _verb(kind: str, reason: str, isvc: str, namespace: str | None, kubeconfig: str | None,
          context: str | None, registry: str | None, dry_run: bool,
          target: str | None = None) -> tuple[Engine, StepResult]:
    from rollout import Command, Engine

    backend = open_backend(isvc, namespace, kubeconfig, context, target)
    needs_registry = kind in ("promote", "promote-full", "rollback")
    engine = Engine(backend, registry=open_registry(backend, registry) if needs_registry
                    else None, dry_run=dry_run)
    return engine, engine.step(Command(kind, reason))


def promote(
    isvc: Isvc,
    full: Annotated[bool, typer.Option("--full", help="Straight to 100% and promote.")] = False,
    reason: Reason = "manual promotion",
    wait: Annotated[bool, typer.Option(
        help="After a promotion, wait until it is in effect.")] = True,
    timeout: Timeout = "5m",
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
    from common import parse_duration_s
    from rollout import Phase, wait_final

    kind = "promote-full" if full else "promote"
    engine, result = _verb(kind, reason, isvc, namespace, kubeconfig, context, registry,
                           dry_run, target)
    promoting = result.state.phase is Phase.PROMOTED and wait and not dry_run
    if promoting:
        result = wait_final(engine, result, kind, timeout_s=parse_duration_s(timeout))
    show(result, json_out)
    if promoting and not result.is_final:
        sys.stderr.write(f"{result.seen.target}: {result.state.canary_label} is promoted, but "
                         f"the promotion is not in effect yet ({result.waiting}); run the "
                         "command again to finish\n")
        raise typer.Exit(EXIT_UNFINISHED)


def rollback(
    isvc: Isvc,
    reason: Reason = "manual rollback",
    wait: Annotated[bool, typer.Option(help="Wait until the stable spec is restored.")] = True,
    timeout: Timeout = "5m",
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
    from common import parse_duration_s
    from rollout import Phase, wait_final

    engine, result = _verb("rollback", reason, isvc, namespace, kubeconfig, context, registry,
                           dry_run, target)
    if wait and not dry_run:
        result = wait_final(engine, result, "rollback", timeout_s=parse_duration_s(timeout))
    show(result, json_out)
    if not dry_run and result.state.phase is not Phase.ROLLED_BACK and wait:
        sys.stderr.write(f"{result.seen.target}: traffic is on {result.state.stable_label}, "
                         f"but restoring it is not finished ({result.waiting}); run the "
                         "command again to finish\n")
        raise typer.Exit(EXIT_UNFINISHED)


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
    show(result, json_out)


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
    show(result, json_out)


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
    metrics_port: Annotated[int | None, typer.Option(
        "--metrics-port", help="Serve the rollout's weight, phase and decisions on "
        "/metrics at this port (0: any free one) for Prometheus; --target local does it "
        "by default, on a free port its Prometheus is told of. The run waits up to two "
        "scrape intervals (31 s on a cluster) for its first and its last scrape.",
        show_default=False)] = None,
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
    from cli.rollout._view import Progress, render_step, step_doc
    from common import parse_duration_s
    from rollout import Engine, new_holder_id
    from rollout import run as run_loop

    deadline_s = parse_duration_s(deadline) if deadline else None
    poll_s, lease_s = parse_duration_s(poll), parse_duration_s(lease)
    backend = open_backend(isvc, namespace, kubeconfig, context, target)
    _, state = Engine(backend).observe()
    analyzer = (analysis_for(backend, state, analysis, prometheus_url)
                if not state.phase.is_final else None)
    engine = Engine(backend, analyzer=analyzer, registry=open_registry(backend, registry),
                    holder=new_holder_id(), lease_s=lease_s, dry_run=dry_run)
    with Progress(stderr() if json_out else stdout()) as progress, \
            _exported(backend, state, metrics_port, dry_run) as exporter:
        def report(step: StepResult) -> None:
            progress(step)
            exporter.update(step.state)

        result = run_loop(engine, poll_s=poll_s, deadline_s=deadline_s, progress=report)
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


# A cluster's PodMonitor scrapes every 15 s (manifests/40-monitoring.yaml): a run that
# ends waits up to two scrapes for its last decisions to be read.
CLUSTER_SCRAPE_S = 15.0


@contextlib.contextmanager
def _exported(backend: TrafficBackend, state: RolloutState, port: int | None,
              dry_run: bool) -> Iterator[RolloutExporter]:
    """The run's exporter: serving on ``port`` (a cluster's Job passes one), or for a
    target that can announce it (``--target local``) on a free loopback port; else
    collecting for nobody. It waits (up to two scrape intervals) until its state has
    been scraped once before the run decides anything, so that each decision is an
    increase Prometheus sees (the dashboards' annotations), and at the end until its
    last state has been scraped, so that the final decisions reach Prometheus."""
    from rollout import RolloutExporter

    exporter = RolloutExporter()
    exporter.update(state)
    every = backend.announce_exporter(None) if port is None and not dry_run else None
    if port is None and every is None:
        yield exporter
        return
    local = every is not None
    served = exporter.serve(port or 0, host="127.0.0.1" if local else "0.0.0.0")
    if local:
        backend.announce_exporter(f"127.0.0.1:{served}")
    bound_s = 2 * (every or CLUSTER_SCRAPE_S) + 1.0
    try:
        exporter.wait_scraped(bound_s)
        yield exporter
        exporter.wait_scraped(bound_s)
    finally:
        if local:
            backend.announce_exporter(None)
        exporter.close()
