"""Options shared by several command groups."""

from __future__ import annotations

from typing import Annotated

import typer

RegistryOption = Annotated[
    str | None,
    typer.Option(
        "--registry",
        envvar="MODELCTL_REGISTRY",
        help="Registry URL: a directory, file:// or s3://bucket/prefix "
        "(default ~/.modelctl/registry).",
        show_default=False,
    ),
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON for scripts.")]

# Kubernetes connection options, shared by every group that talks to a cluster.
Namespace = Annotated[str | None, typer.Option(
    "--namespace", "-n", help="Namespace (default: the kubeconfig context's, else default).",
    show_default=False)]
Kubeconfig = Annotated[str | None, typer.Option(
    "--kubeconfig", help="kubeconfig file (default: $KUBECONFIG, ~/.kube/config, in-cluster).",
    show_default=False)]
Context = Annotated[str | None, typer.Option(
    "--context", help="kubeconfig context (default: the current one).", show_default=False)]
