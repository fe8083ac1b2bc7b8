"""``modelctl plan NAME@REF``: knobs, replicas and autoscaler targets for a p99 SLO."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, cast

import typer

from cli._common import JsonOption, RegistryOption
from cli._output import emit, table

if TYPE_CHECKING:
    from rich.console import Console

    from capacity import Mode, PlanFile

RefArg = Annotated[str, typer.Argument(metavar="NAME@REF",
                                       help="Model name and a version, alias or latest.")]


def plan(
    ref: RefArg,
    peak_rps: Annotated[str, typer.Option("--peak-rps", metavar="RATE",
                                          help="Peak requests per second, e.g. 5000 or 5k.")],
    slo_p99: Annotated[str | None, typer.Option(
        "--slo-p99", metavar="DURATION", help="p99 latency objective, e.g. 200ms (every task "
        "but llm).", show_default=False)] = None,
    mean_rps: Annotated[str | None, typer.Option(
        "--mean-rps", metavar="RATE", help="Mean requests per second (default: half the peak).",
        show_default=False)] = None,
    burst: Annotated[str | None, typer.Option(
        "--burst", metavar="FACTORx:DURATION",
        help="A burst over the peak to absorb while new replicas start, e.g. 2x:30s.",
        show_default=False)] = None,
    spare: Annotated[int, typer.Option("--spare", help="Replicas kept for a failed one.")] = 1,
    mode: Annotated[str, typer.Option("--mode", help="in-process or queue.")] = "in-process",
    device: Annotated[str, typer.Option("--device", help="The profile's device: cpu or cuda.")
                      ] = "cpu",
    cpus: Annotated[float, typer.Option("--cpus", help="CPUs per replica (the edge's limit).")
                    ] = 1.0,
    slo_ttft_p99: Annotated[str | None, typer.Option(
        "--slo-ttft-p99", metavar="DURATION", help="LLM: time to first token objective, e.g. "
        "2s.", show_default=False)] = None,
    slo_tpot_p99: Annotated[str | None, typer.Option(
        "--slo-tpot-p99", metavar="DURATION", help="LLM: time per output token objective, "
        "e.g. 250ms.", show_default=False)] = None,
    prompt_tokens: Annotated[int | None, typer.Option(
        "--prompt-tokens", help="LLM: prompt tokens of a typical request.",
        show_default=False)] = None,
    output_tokens: Annotated[int | None, typer.Option(
        "--output-tokens", help="LLM: output tokens of a typical request.",
        show_default=False)] = None,
    utilisation: Annotated[float, typer.Option(
        "--utilisation", help="LLM: the share of one instance's capacity planned for (rho).")
    ] = 0.8,
    registry: RegistryOption = None,
    as_json: JsonOption = False,
) -> None:
    """Plan serving for a p99 SLO from the version's measured batch latency.

    For a version of task llm the SLO is TTFT and TPOT (--slo-ttft-p99,
    --slo-tpot-p99) for requests of --prompt-tokens and --output-tokens: the plan
    checks the SLO against the measured floors, takes one instance's capacity as the
    smaller of the measured knee and the KV memory gate, and sizes the fleet as
    ceil(peak / (utilisation x capacity)) plus the spare.

    Reads the profile `modelctl profile` stored next to the version, simulates the
    predictor's own batching policy under Poisson arrivals to find one replica's capacity
    at the SLO, and sizes replicas and autoscaler targets from it (docs/CAPACITY.md).

    Examples:

        modelctl plan demo-embed@stable --slo-p99 200ms --peak-rps 5000

        modelctl plan demo-embed@3 --slo-p99 150ms --peak-rps 2k --mean-rps 600 \\
            --burst 2x:30s --device cuda --json > plan.json

        modelctl plan demo-embed@stable --slo-p99 300ms --peak-rps 800 --mode queue

        modelctl plan demo-chat@stable --slo-ttft-p99 2s --slo-tpot-p99 250ms \\
            --peak-rps 10 --prompt-tokens 40 --output-tokens 64
    """
    from capacity import (
        MODES,
        PlanRequest,
        Profile,
        ProfileError,
        parse_burst,
        parse_ms,
        parse_rate,
        report_name,
    )
    from capacity import plan as make_plan
    from registry import Registry, parse_ref

    model, version_ref = parse_ref(ref)
    reg = Registry.open(registry)
    version = reg.resolve(model, version_ref)
    if reg.manifest(model, version).task == "llm":
        from cli._llm_capacity import plan_llm_cli

        plan_llm_cli(reg, model, version, device=device, slo_ttft=slo_ttft_p99,
                     slo_tpot=slo_tpot_p99, peak_rps=peak_rps, prompt_tokens=prompt_tokens,
                     output_tokens=output_tokens, utilisation=utilisation, spare=spare,
                     as_json=as_json)
        return
    if slo_p99 is None:
        raise ProfileError("--slo-p99 is required (--slo-ttft-p99 and --slo-tpot-p99 are for "
                           "task llm)")
    slo_ms = parse_ms(slo_p99, "--slo-p99")
    peak = parse_rate(peak_rps, "--peak-rps")
    mean = parse_rate(mean_rps, "--mean-rps") if mean_rps is not None else None
    shape = parse_burst(burst) if burst is not None else None
    if mode not in MODES:
        raise ProfileError(f"--mode {mode!r}: use {' or '.join(MODES)}")
    name = report_name(device)
    data = reg.get_report(model, version, name)
    if data is None:
        raise ProfileError(f"{model}@{version} has no {device} profile: run `modelctl profile "
                           f"{model}@{version} --device {device}`")
    profile = Profile.from_json(data)
    profile.check_version(model, version)
    request = PlanRequest(slo_p99_ms=slo_ms, peak_rps=peak, mean_rps=mean, burst=shape,
                          spare=spare, mode=cast("Mode", mode), cpus=cpus)
    result = make_plan(profile, request)
    emit(result.to_json(), as_json, lambda c: _render(c, result))


def _render(console: Console, p: PlanFile) -> None:
    k, r, a = p.knobs, p.replicas, p.autoscaler
    console.print(f"{p.model}@{p.version} on {p.device}, {p.mode}: SLO p99 {p.slo_p99_ms:g} ms "
                  f"is feasible (floor {p.floor_ms:g} ms)")
    console.print(f"knobs: --max_batch_size {k.max_batch_size} --max_batch_wait_ms "
                  f"{k.max_batch_wait_ms:g} --max_queue_size {k.max_queue_size} "
                  f"--request_timeout_ms {k.request_timeout_ms:g}"
                  + (f" --queue_claim_timeout_ms {k.queue_claim_timeout_ms}"
                     if k.queue_claim_timeout_ms is not None else "")
                  + (f" --torch_threads {k.torch_threads}" if k.torch_threads is not None
                     else ""))
    console.print(f"capacity: {p.capacity_rps:g} req/s per replica at the SLO, planned at "
                  f"{p.utilisation:.0%} ({p.capacity_rps * p.utilisation:.0f} req/s)")
    burst = (f"a {p.burst_factor:g}x burst for {p.reaction_s:g} s reaction + "
             f"{p.load_s:g} s load" if p.burst_factor > 1 else "no burst given")
    console.print(table("replicas", ["", "COUNT", "WHY"], [
        ("for peak", r.for_peak, f"{p.peak_rps:g} req/s"),
        ("for mean", r.for_mean, f"{p.mean_rps:g} req/s"),
        ("spare", r.spare, "a failed replica"),
        ("cold start", r.cold_start, burst),
        ("min", r.min, "for mean + spare"),
        ("max", r.max, "for peak + spare + cold start"),
    ]))
    if p.mode == "queue":
        console.print(f"KEDA redis-streams: lagCount {a.lag_per_worker}, activationLagCount "
                      f"{a.activation_lag}")
    else:
        console.print(f"Knative: scaleMetric concurrency, scaleTarget {a.scale_target}, "
                      f"autoscaling.knative.dev/target-utilization-percentage "
                      f"{a.target_utilization_percentage}, activation-scale "
                      f"{a.activation_scale}")
    console.print(table("predicted", ["AT", "REQ/S", "REPLICAS", "P50 MS", "P99 MS", "ON TIME"], [
        ("mean", f"{p.mean.rps:g}", r.for_mean, f"{p.mean.p50_ms:g}", f"{p.mean.p99_ms:g}",
         f"{p.mean.success_rate:.2%}"),
        ("peak", f"{p.peak.rps:g}", r.for_peak, f"{p.peak.p50_ms:g}", f"{p.peak.p99_ms:g}",
         f"{p.peak.success_rate:.2%}"),
    ]))
