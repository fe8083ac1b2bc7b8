"""``modelctl profile`` and ``modelctl plan`` for a version whose task is ``llm``: the
measuring and planning of ``capacity.llm``, rendered (docs/CAPACITY.md, "LLMs")."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cli._output import emit, table

if TYPE_CHECKING:
    from rich.console import Console

    from capacity.llm import LLMPlan, LLMProfile
    from registry import Registry


def _ints(text: str | None, flag: str, default: tuple[int, ...]) -> tuple[int, ...]:
    from capacity import ProfileError

    if text is None:
        return default
    try:
        return tuple(int(part) for part in text.split(","))
    except ValueError:
        raise ProfileError(f"{flag} {text!r}: give numbers separated by commas") from None


def profile_llm(reg: Registry, name: str, ref: str, *, device: str, prompt_lengths: str | None,
                concurrency: str | None, runs: int, decode_tokens: int, torch_threads: int,
                no_store: bool, cache_dir: Path | None, as_json: bool) -> None:
    from capacity.llm import LLMProfileOptions, llm_report_name, measure_llm_profile
    from capacity.llm._measure import DEFAULT_CONCURRENCY, DEFAULT_PROMPT_LENGTHS

    options = LLMProfileOptions(
        device=device, runs=runs, decode_tokens=decode_tokens, torch_threads=torch_threads,
        prompt_lengths=_ints(prompt_lengths, "--prompt-lengths", DEFAULT_PROMPT_LENGTHS),
        concurrency=_ints(concurrency, "--concurrency", DEFAULT_CONCURRENCY))

    def progress(line: str) -> None:
        if not as_json:
            sys.stderr.write(f"profile: {line}\n")
            sys.stderr.flush()

    measured = measure_llm_profile(reg, name, ref, options, cache_dir=cache_dir,
                                   progress=progress)
    where = None if no_store else reg.put_report(name, measured.version,
                                                 llm_report_name(device), measured.to_json())
    emit(measured.to_json(), as_json, lambda console: _render_profile(console, measured, where))


def _render_profile(console: Console, p: LLMProfile, where: str | None) -> None:
    console.print(table(f"{p.model} version {p.version} on {p.device}: prefill, alone",
                        ["PROMPT TOKENS", "P50 MS", "P99 MS"],
                        [(x.x, f"{x.p50_ms:.1f}", f"{x.p99_ms:.1f}") for x in p.prefill]))
    console.print(table("decode: the gap between two tokens", ["RUNNING", "P50 MS", "P99 MS",
                                                                "TOKENS/S"],
                        [(x.x, f"{x.p50_ms:.1f}", f"{x.p99_ms:.1f}",
                          f"{x.x * 1000 / x.p50_ms:.0f}") for x in p.decode]))
    console.print(f"KV cache: {p.kv_bytes_per_token / 1024:.1f} KiB a token, the engine's "
                  f"cache holds {p.kv_capacity_tokens} tokens; context {p.context_tokens}")
    console.print(f"load: {p.load_s:.1f} s to a started engine")
    console.print(f"stored: {where}" if where else "not stored (--no-store)")


def plan_llm_cli(reg: Registry, model: str, version: int, *, device: str,
                 slo_ttft: str | None, slo_tpot: str | None, peak_rps: str,
                 prompt_tokens: int | None, output_tokens: int | None, utilisation: float,
                 spare: int, as_json: bool) -> None:
    from capacity import ProfileError, parse_ms, parse_rate
    from capacity.llm import LLMPlanRequest, LLMProfile, llm_report_name, plan_llm

    missing = [flag for flag, value in (("--slo-ttft-p99", slo_ttft), ("--slo-tpot-p99", slo_tpot),
                                        ("--prompt-tokens", prompt_tokens),
                                        ("--output-tokens", output_tokens)) if value is None]
    if missing:
        raise ProfileError(f"{model}@{version} is an LLM: give {', '.join(missing)}")
    assert slo_ttft and slo_tpot and prompt_tokens and output_tokens
    data = reg.get_report(model, version, llm_report_name(device))
    if data is None:
        raise ProfileError(f"{model}@{version} has no {device} LLM profile: run `modelctl "
                           f"profile {model}@{version} --device {device}`")
    profile = LLMProfile.from_json(data)
    profile.check_version(model, version)
    request = LLMPlanRequest(
        slo_ttft_ms=parse_ms(slo_ttft, "--slo-ttft-p99"),
        slo_tpot_ms=parse_ms(slo_tpot, "--slo-tpot-p99"),
        peak_rps=parse_rate(peak_rps, "--peak-rps"), prompt_tokens=prompt_tokens,
        output_tokens=output_tokens, utilisation=utilisation, spare=spare)
    result = plan_llm(profile, request)
    emit(result.to_json(), as_json, lambda console: _render_plan(console, result))
    if not result.feasible:
        raise ProfileError(f"infeasible: {result.reason}")


def _row(label: str, op: Any) -> tuple[str, ...]:
    if op is None:
        return (label, "-", "-", "-", "-", "-")
    return (label, f"{op.rps:.3g}", f"{op.running:.1f}", f"{op.ttft_p99_ms:.0f}",
            f"{op.tpot_p99_ms:.0f}", f"{op.output_tokens_per_s:.0f}")


def _render_plan(console: Console, p: LLMPlan) -> None:
    r = p.request
    console.print(f"{p.model}@{p.version} on {p.device}: TTFT p99 {r.slo_ttft_ms:g} ms, TPOT "
                  f"p99 {r.slo_tpot_ms:g} ms, {r.prompt_tokens} prompt and {r.output_tokens} "
                  f"output tokens a request")
    console.print(f"floors: TPOT {p.tpot_floor_ms:.0f} ms (one sequence's step), TTFT "
                  f"{p.ttft_floor_ms:.0f} ms (one prefill and a step)")
    if not p.feasible:
        console.print(f"[bold red]infeasible[/]: {p.reason}")
        return
    console.print(table("one instance", ["AT", "REQ/S", "RUNNING", "TTFT P99 MS",
                                         "TPOT P99 MS", "TOKENS/S"], [
        _row("knee", p.knee), _row("memory gate", p.memory_gate),
        _row("planned peak", p.at_peak)]))
    console.print(f"capacity: {p.capacity_rps:.3g} req/s an instance (bound by the "
                  f"{'measured knee' if p.bound_by == 'knee' else 'KV memory'}), planned at "
                  f"{r.utilisation:.0%}")
    console.print(f"replicas: {p.replicas} = ceil({r.peak_rps:g} / ({r.utilisation:g} x "
                  f"{p.capacity_rps:.3g})) + {r.spare} spare")
