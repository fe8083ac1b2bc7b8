"""``modelctl serve``: fetch a version from the registry, verify it, and serve it."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Annotated

import typer

from cli._common import RegistryOption


def serve(
    ctx: typer.Context,
    ref: Annotated[str, typer.Argument(help="NAME\\[@REF]: REF is a version number, alias "
                                        "or latest.")],
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

    Examples:

        modelctl serve demo-embed@stable

        modelctl serve demo-fixed@3 --port 9000 -- --max_batch_size 100 --max_batch_wait_ms 50

        modelctl serve demo-fixed@3 --port 9000 -- --queue_url redis://127.0.0.1:6379/0 \\
            --queue_role frontend

        modelctl serve demo-fixed@3 --port 9001 -- --queue_url redis://127.0.0.1:6379/0 \\
            --queue_role worker
    """
    from registry import Registry, parse_ref, verify_dir

    name, version_ref = parse_ref(ref)
    reg = Registry.open(registry)
    version = reg.resolve(name, version_ref)
    root = cache_dir or Path(os.environ.get("MODELCTL_CACHE", Path.home() / ".modelctl/cache"))
    model_dir = root / name / str(version)
    manifest = reg.manifest(name, version)
    if not (model_dir / "MANIFEST.json").exists() or verify_dir(model_dir, manifest):
        sys.stderr.write(f"fetching {name} version {version} into {model_dir}\n")
        reg.fetch(name, version, model_dir)
    argv = [
        sys.executable, "-m", "predictor",
        "--model_name", name,
        "--model_dir", str(model_dir),
        "--http_host", host,
        "--http_port", str(port),
        "--grpc_port", str(grpc_port),
        "--role", role,
        *ctx.args,
    ]
    sys.stderr.write(f"serving {name} version {version} ({manifest.task}) on "
                     f"http://{host}:{port}\n")
    sys.stdout.flush()
    sys.stderr.flush()
    # exec, not a child: signals (SIGTERM drain) reach the predictor directly.
    os.execv(sys.executable, argv)
