"""``modelctl serve``: fetch a version from the registry, verify it, and serve it."""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
from typer.core import TyperCommand

from cli._common import RegistryOption


class PassThroughCommand(TyperCommand):
    """A command whose arguments after the first ``--`` are the predictor's, every one.

    Click fills positional parameters from both sides of ``--``, so ``serve --model A
    -- --min_residency_s 0`` would hand ``--min_residency_s`` to REF; here only what
    comes before ``--`` is parsed, and the rest is appended to ``ctx.args`` unread."""

    # ctx is the Context of the click typer vendors (private typer._click), hence Any.
    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        if "--" not in args:
            return super().parse_args(ctx, args)
        cut = args.index("--")
        ctx.args = [*super().parse_args(ctx, args[:cut]), *args[cut + 1:]]
        return ctx.args


def serve(
    ctx: typer.Context,
    ref: Annotated[str | None, typer.Argument(
        help="NAME\\[@REF]: REF is a version number, alias or latest.")] = None,
    model: Annotated[list[str] | None, typer.Option(
        "--model", help="NAME\\[@REF] of one model of a multi-model predictor (repeat it; "
        "each version is fetched when first needed). Needs --memory-budget-mb.")] = None,
    memory_budget_mb: Annotated[float | None, typer.Option(
        help="With --model: host memory the resident models may take, MiB.")] = None,
    adapter: Annotated[list[str] | None, typer.Option(
        "--adapter", help="NAME\\[@REF] of a LoRA adapter (task lora-adapter) made for the "
        "LLM served; tenants whose 'adapter' it names get it (repeat it; each is fetched "
        "when first needed).")] = None,
    registry: RegistryOption = None,
    port: Annotated[int, typer.Option(help="HTTP port (V1, V2, /metrics).")] = 8080,
    grpc_port: Annotated[int, typer.Option(help="gRPC port (V2).")] = 8081,
    host: Annotated[str, typer.Option(help="Address to bind; 0.0.0.0 to serve other hosts.")]
    = "127.0.0.1",
    role: Annotated[str, typer.Option(help="Metric role label: stable, canary or shadow.")]
    = "stable",
    cache_dir: Annotated[
        Path | None,
        typer.Option(help="Where fetched versions are kept (default ~/.modelctl/cache)."),
    ] = None,
) -> None:
    """Serve NAME\\[@REF] from the registry with the batching predictor.

    The version is fetched and its checksums verified before anything loads; a
    version that fails verification is never served. Flags after -- go to the
    predictor unchanged (see `python -m predictor --help`), the queue-decoupled
    mode's among them (docs/QUEUE.md): a frontend and a worker of one version,
    sharing a Redis, are two serve commands.

    With --adapter (repeated) an LLM serves each tenant's LoRA adapter
    (docs/TENANTS.md "Adapters"): the adapter is chosen from the tenant's key,
    and at most --max_resident_adapters (after --) run at once.

    With --model (repeated) one predictor serves several versions, each loaded
    when first asked for and evicted least recently used under --memory-budget-mb
    (docs/MULTI_MODEL.md); each is fetched and verified when first loaded.

    Examples:

        modelctl serve demo-embed@stable

        modelctl serve --model demo-embed@stable --model demo-classify@1 \\
            --memory-budget-mb 2048 -- --min_residency_s 0

        modelctl serve demo-fixed@stable --port 9000 -- --max_batch_size 100 --max_batch_wait_ms 50

        modelctl serve demo-chat@stable --adapter demo-chat-acme@stable \\
            --adapter demo-chat-beta@stable -- --tenants_file tenants.yaml --enable_grpc false

        modelctl serve demo-fixed@stable --port 9000 -- --queue_url redis://127.0.0.1:6379/0 \\
            --queue_role frontend

        modelctl serve demo-fixed@stable --port 9001 -- --queue_url redis://127.0.0.1:6379/0 \\
            --queue_role worker
    """
    from registry import Registry, parse_ref, verify_dir

    root = cache_dir or Path(os.environ.get("MODELCTL_CACHE", Path.home() / ".modelctl/cache"))
    where = ["--http_host", host, "--http_port", str(port), "--grpc_port", str(grpc_port),
             "--role", role]
    if (model or memory_budget_mb is not None) and adapter:
        raise typer.BadParameter("--adapter serves one LLM's adapters: not with --model",
                                 param_hint="--adapter")
    if model or memory_budget_mb is not None:
        _exec([*_multi_model_argv(ref, model or [], memory_budget_mb, registry, root),
               *where, *ctx.args], f"serving {len(model or [])} models on http://{host}:{port}")
    if ref is None:
        raise typer.BadParameter("give NAME[@REF], or --model NAME[@REF] (repeatable) with "
                                 "--memory-budget-mb", param_hint="REF")
    name, version_ref = parse_ref(ref)
    reg = Registry.open(registry)
    version = reg.resolve(name, version_ref)
    model_dir = root / name / str(version)
    manifest = reg.manifest(name, version)
    if adapter:  # checked before the base is fetched
        where += _adapter_argv(reg, f"{name}@{version}", manifest.task, adapter, root)
    if not (model_dir / "MANIFEST.json").exists() or verify_dir(model_dir, manifest):
        sys.stderr.write(f"fetching {name} version {version} into {model_dir}\n")
        reg.fetch(name, version, model_dir)
    _exec(["--model_name", name, "--model_dir", str(model_dir), *where, *ctx.args],
          f"serving {name} version {version} ({manifest.task}) on http://{host}:{port}")


def _multi_model_argv(ref: str | None, models: list[str], budget_mb: float | None,
                      registry: str | None, cache: Path) -> list[str]:
    """The predictor's flags for --model: a catalog of the resolved versions (their
    manifests read now, their files fetched when each is first loaded)."""
    from registry import Registry, parse_ref

    if ref is not None:
        raise typer.BadParameter("give NAME[@REF] or --model, not both", param_hint="REF")
    if not models or budget_mb is None or budget_mb <= 0:
        raise typer.BadParameter("a multi-model predictor needs --model NAME[@REF] (one or "
                                 "more) and --memory-budget-mb > 0", param_hint="--model")
    reg = Registry.open(registry)
    rows: dict[str, dict[str, object]] = {}
    for text in models:
        name, version_ref = parse_ref(text)
        if name in rows:
            raise typer.BadParameter(f"{name} is given twice: one version per model name",
                                     param_hint="--model")
        version = reg.resolve(name, version_ref)
        manifest = reg.manifest(name, version)
        rows[name] = {"name": name, "model": name, "version": version, "task": manifest.task,
                      "dir": str(cache / name / str(version)),
                      "files": {path: entry.size for path, entry in manifest.files.items()}}
    catalog = {"registry": reg.url, "models": list(rows.values())}
    text = json.dumps(catalog, sort_keys=True)
    path = cache / "catalogs" / f"{hashlib.sha256(text.encode()).hexdigest()[:16]}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n")
    for row in rows.values():
        sys.stderr.write(f"  {row['name']} version {row['version']} ({row['task']})\n")
    return ["--multi_model", "--model_catalog", str(path), "--model_dir", str(cache),
            "--memory_budget_mb", f"{budget_mb:g}"]


def _adapter_argv(reg: Any, base: str, task: str, adapters: list[str],
                  cache: Path) -> list[str]:
    """The predictor's flags for --adapter: a catalog of the resolved adapter versions,
    each checked to be a lora-adapter made for ``base`` (NAME@VERSION)."""
    from registry import parse_ref

    if task != "llm":
        raise typer.BadParameter(f"{base} is a {task!r} version: adapters need an 'llm'",
                                 param_hint="--adapter")
    rows: dict[str, dict[str, object]] = {}
    for text in adapters:
        name, version_ref = parse_ref(text)
        if name in rows:
            raise typer.BadParameter(f"{name} is given twice", param_hint="--adapter")
        version = reg.resolve(name, version_ref)
        manifest = reg.manifest(name, version)
        made_for = manifest.metadata.get("base", "")
        if manifest.task != "lora-adapter" or made_for != base:
            what = (f"a {manifest.task!r} version" if manifest.task != "lora-adapter"
                    else f"made for {made_for or 'no base'}")
            raise typer.BadParameter(f"{name}@{version} is {what}, not a lora-adapter of "
                                     f"{base}", param_hint="--adapter")
        rows[name] = {"name": name, "version": version, "base": base,
                      "dir": str(cache / name / str(version)),
                      "files": {path: entry.size for path, entry in manifest.files.items()}}
    text = json.dumps({"registry": reg.url, "adapters": list(rows.values())}, sort_keys=True)
    path = cache / "catalogs" / f"adapters-{hashlib.sha256(text.encode()).hexdigest()[:16]}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n")
    for row in rows.values():
        sys.stderr.write(f"  adapter {row['name']} version {row['version']}\n")
    return ["--adapter_catalog", str(path)]


def _exec(flags: list[str], banner: str) -> NoReturn:
    """Become the predictor: exec, not a child, so signals (SIGTERM drain) reach it."""
    sys.stderr.write(banner + "\n")
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(sys.executable, [sys.executable, "-m", "predictor", *flags])
