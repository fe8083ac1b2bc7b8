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
