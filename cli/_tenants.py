"""``modelctl tenants``: make API keys and check a tenants file (docs/TENANTS.md)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from cli._common import JsonOption
from cli._output import emit, table

if TYPE_CHECKING:
    from rich.console import Console

app = typer.Typer(
    name="tenants",
    help=(
        "API keys and tenants for a predictor's --tenants_file.\n\n"
        "A tenants file maps the SHA-256 of each API key to a tenant, with the models it "
        "may use and its limits; mount it from a Secret. Keys are never stored in the clear."
    ),
    no_args_is_help=True,
)


@app.command("key")
def key(
    tenant: Annotated[str, typer.Argument(help="The tenant the key is for (shown in the "
                                               "snippet to paste).")],
    as_json: JsonOption = False,
) -> None:
    """Make a new API key: give the key to the tenant, put its hash in the tenants file.

    The key is printed once and kept nowhere.

    Example:

        modelctl tenants key acme
    """
    from common.tenants import hash_key, new_key

    made = new_key()
    data = {"tenant": tenant, "key": made, "hash": hash_key(made)}

    def render(console: Console) -> None:
        sys.stdout.write(
            f"API key for {tenant} (shown once; give it to the tenant):\n  {made}\n\n"
            f"Its entry in the tenants file:\n"
            f"tenants:\n  {tenant}:\n    keys: [\"{data['hash']}\"]\n")

    emit(data, as_json, render)


@app.command("check")
def check(
    path: Annotated[Path, typer.Argument(help="The tenants file (YAML).")],
    as_json: JsonOption = False,
) -> None:
    """Read a tenants file as the predictor does: exit 2 with the first problem.

    Example:

        modelctl tenants check tenants.yaml
    """
    from common.tenants import TenantsError, read_tenants

    try:
        tenants = read_tenants(path)
    except TenantsError as exc:
        sys.stderr.write(f"error: {exc}\n")
        raise typer.Exit(2) from None
    rows: dict[str, dict[str, object]] = {}
    for tenant in tenants.by_hash.values():
        row = rows.setdefault(tenant.name, {
            "tenant": tenant.name, "keys": 0,
            "models": sorted(tenant.models) if tenant.models is not None else None,
            "requests": tenant.requests, "concurrent": tenant.concurrent,
            "weight": tenant.weight})
        row["keys"] = int(str(row["keys"])) + 1
    data = [rows[name] for name in sorted(rows)]

    def render(console: Console) -> None:
        console.print(table(f"{path}: {len(data)} tenants", (
            "tenant", "keys", "models", "requests", "concurrent", "weight"), [
            (r["tenant"], str(r["keys"]), _models(r["models"]), r["requests"] or "-",
             str(r["concurrent"] or "-"), f"{r['weight']:g}") for r in data]))

    emit(data, as_json, render)


def _models(models: object) -> str:
    return ", ".join(models) if isinstance(models, list) and models else "any"
