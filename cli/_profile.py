"""``modelctl profile``: measure a version's batch latency here and store it with the version."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from cli._common import JsonOption, RegistryOption
from cli._output import emit, table

if TYPE_CHECKING:
    from rich.console import Console

    from capacity import Profile


def profile(
    ref: Annotated[str, typer.Argument(
        metavar="NAME[@REF]", help="Model name, optionally @version, @alias or @latest.")],
    device: Annotated[str, typer.Option(
        help="cpu or cuda: where the model runs, and the key the profile is stored under.")]
    = "cpu",
    batch_sizes: Annotated[str | None, typer.Option(
        "--batch-sizes", metavar="B1,B2,...",
        help="Batch sizes to time, e.g. 1,2,4,8,16,32 (default: powers of two, at least up "
        "to 32, then on while a doubling still cuts the time per item by 5%, up to the "
        "task's own limit, device memory or 1024).", show_default=False)] = None,
    inputs: Annotated[Path | None, typer.Option(
        "--inputs", metavar="FILE", help="JSON lines, one V1 instance a line, that batches "
        "cycle through (default: short and longer texts).", show_default=False)] = None,
    runs: Annotated[int, typer.Option(
        help="Fewest timed runs per batch size.")] = 100,
    min_seconds: Annotated[float, typer.Option(
        help="Fewest seconds of timed runs per batch size (after the warm-up).")] = 2.0,
    warmup: Annotated[int, typer.Option(
        help="Untimed runs before each batch size is timed.")] = 5,
    edge_requests: Annotated[int, typer.Option(
        help="Sequential single-instance requests timed against the real predictor.")] = 200,
    load_timeout_s: Annotated[float, typer.Option(
        help="How long the predictor may take to load and become ready.")] = 600.0,
    torch_threads: Annotated[int, typer.Option(
        help="Torch threads per forward pass to measure with; a plan from this profile "
        "serves with the same --torch_threads. 0: every usable core but one on cpu (the "
        "HTTP edge keeps one), torch's choice on cuda.")] = 0,
    prompt_lengths: Annotated[str | None, typer.Option(
        "--prompt-lengths", metavar="N1,N2,...", help="LLM: prompt lengths whose prefill is "
        "timed (default 16,64,256,1024).", show_default=False)] = None,
    concurrency: Annotated[str | None, typer.Option(
        "--concurrency", metavar="N1,N2,...", help="LLM: running sequences whose decode step "
        "is timed (default 1,2,4,8,16,32).", show_default=False)] = None,
    prefill_runs: Annotated[int, typer.Option(
        "--prefill-runs", help="LLM: timed prefills per prompt length.")] = 5,
    decode_tokens: Annotated[int, typer.Option(
        "--decode-tokens", help="LLM: tokens each sequence generates while the step is "
        "timed.")] = 32,
    no_store: Annotated[bool, typer.Option(
        "--no-store", help="Only print the profile; do not store it with the version.")]
    = False,
    cache_dir: Annotated[Path | None, typer.Option(
        help="Where fetched versions are kept (default $MODELCTL_CACHE, else "
        "~/.modelctl/cache).", show_default=False)] = None,
    registry: RegistryOption = None,
    as_json: JsonOption = False,
) -> None:
    """Measure NAME\\[@REF]'s batch latency t(b) here; store it with the version.

    The version is fetched and verified, then built as the predictor builds
    it. Each batch size runs --warmup times untimed, then is timed at least
    --runs times and for at least --min-seconds (p50, p99 of every run).
    Host RSS (and peak GPU memory with --device cuda) is read after each
    size. Then the real predictor is started on the version
    (--max_batch_size 1) to time its load and its HTTP edge: the latency
    and the server CPU a request costs besides its batch; then once more
    (--max_batch_size at the largest size timed) under load, for the CPU a
    request costs when batches are full. Both run at
    --torch-threads (on cpu, by default, one core is left to the edge), and
    a plan made from the profile deploys that thread count.

    The profile is stored in the registry next to the version, as the
    report profile-cpu or profile-cuda, for `modelctl plan`; --json prints
    it.

    A version of task llm is profiled on its continuous-batching engine
    instead: prefill time against prompt length (--prompt-lengths, alone,
    --prefill-runs each), decode step time against running sequences
    (--concurrency, --decode-tokens each) and KV memory per token, stored as
    llm-profile-cpu or llm-profile-cuda.

    On a cluster, manifests/templates/profile-job.yaml runs it in a GPU pod
    (docs/CAPACITY.md).

    Examples:

        modelctl profile demo-embed@stable

        modelctl profile demo-embed@3 --device cuda \\
            --batch-sizes 1,2,4,8,16,32,64

        modelctl profile demo-classify@stable --inputs requests.jsonl \\
            --json --no-store

        modelctl profile demo-fixed@1 --batch-sizes 1,4 --runs 20 --min-seconds 0

        modelctl profile demo-chat@stable --concurrency 1,2,4,8,16
    """
    from capacity import (
        DEFAULT_INPUTS,
        ProfileOptions,
        parse_batch_sizes,
        read_inputs,
        report_name,
    )
    from registry import Registry, parse_ref

    name, version_ref = parse_ref(ref)
    report = report_name(device)
    options = ProfileOptions(
        device=device, batch_sizes=parse_batch_sizes(batch_sizes) if batch_sizes else (),
        inputs=read_inputs(inputs) if inputs is not None else DEFAULT_INPUTS,
        runs=runs, min_seconds=min_seconds, warmup_runs=warmup, edge_requests=edge_requests,
        load_timeout_s=load_timeout_s, torch_threads=torch_threads)
    reg = Registry.open(registry)
    version = reg.resolve(name, version_ref)  # an unknown model or ref fails before loading
    if reg.manifest(name, version).task == "llm":
        from cli._llm_capacity import profile_llm

        profile_llm(reg, name, str(version), device=device, prompt_lengths=prompt_lengths,
                    concurrency=concurrency, runs=prefill_runs, decode_tokens=decode_tokens,
                    torch_threads=torch_threads, no_store=no_store, cache_dir=cache_dir,
                    as_json=as_json)
        return

    from capacity import measure_profile

    measured = measure_profile(reg, name, version_ref, options, cache_dir=cache_dir,
                               progress=_quiet if as_json else _progress)
    where = None if no_store else reg.put_report(name, measured.version, report,
                                                 measured.to_json())
    emit(measured.to_json(), as_json, lambda console: _render(console, measured, where))


def _progress(line: str) -> None:
    sys.stderr.write(f"profile: {line}\n")
    sys.stderr.flush()


def _quiet(_: str) -> None:
    return None


def _render(console: Console, measured: Profile, where: str | None) -> None:
    console.print(table(
        f"{measured.model} version {measured.version} on {measured.device} "
        f"({measured.device_name or 'unknown device'})",
        ["BATCH", "RUNS", "P50 MS", "P99 MS", "PER-ITEM P50 MS", "RSS MB", "DEVICE MB"],
        [(b.size, len(b.samples_ms), f"{b.p50_ms:.2f}", f"{b.p99_ms:.2f}",
          f"{b.p50_ms / b.size:.3f}", f"{b.host_rss_mb:.0f}",
          "-" if b.device_mb is None else f"{b.device_mb:.0f}") for b in measured.batches]))
    host = measured.host
    console.print(f"edge: {measured.edge_ms:.2f} ms per request, {measured.edge_cpu_ms:.2f} ms "
                  f"server CPU per request ({host.get('edge_requests', '?')} sequential "
                  "requests, the batch aside)")
    if measured.edge_cpu_loaded_ms is not None:
        console.print(f"edge under load: {measured.edge_cpu_loaded_ms:.2f} ms server CPU per "
                      f"request in batches of {measured.edge_loaded_batch:.1f} on average")
    console.print(f"load: {measured.load_s:.2f} s from process start to ready; "
                  f"floor p99 {measured.floor_ms:.2f} ms")
    console.print(f"host: {host.get('cpus_usable') or host.get('cpu_count')} usable CPUs, "
                  "torch threads "
                  f"{host.get('torch_threads')}")
    console.print(f"stored: {where}" if where else "not stored (--no-store)")
