"""``modelctl registry``: push, list, show, alias, verify, pull and address versions."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from cli._common import JsonOption, RegistryOption
from cli._output import emit, print_json, table

if TYPE_CHECKING:
    from rich.console import Console

    from registry import Manifest, Registry

app = typer.Typer(
    name="registry",
    help=(
        "Immutable, checksummed model versions on a directory or S3.\n\n"
        "A REF is a version number, an alias (stable, canary, …) or latest. The "
        "registry is --registry URL, else $MODELCTL_REGISTRY, else ~/.modelctl/registry; "
        "for s3://bucket/prefix set AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID and "
        "AWS_SECRET_ACCESS_KEY."
    ),
    no_args_is_help=True,
)

RefArg = Annotated[str, typer.Argument(metavar="NAME[@REF]",
                                       help="Model name, optionally @version, @alias or @latest.")]


def _open(url: str | None) -> Registry:
    from registry import Registry

    return Registry.open(url)


def _size(n: int) -> str:
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{n} B"


def _parse_meta(items: list[str]) -> dict[str, str]:
    from registry import InvalidName

    meta: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise InvalidName(f"bad --meta {item!r}: want key=value")
        meta[key] = value
    return meta


@app.command()
def push(
    src: Annotated[Path, typer.Argument(metavar="DIR", help="Directory with the artifact files.")],
    model: Annotated[str, typer.Option(
        "--model", help="Model name: lower-case letters, digits, '-'.")],
    task: Annotated[str, typer.Option("--task", help="feature-extraction, text-classification, "
                                      "text-generation, fixed-latency, llm or lora-adapter "
                                      "(with --meta base=NAME@VERSION).")],
    alias: Annotated[str | None, typer.Option(help="Point this alias at the new version.")] = None,
    meta: Annotated[list[str] | None, typer.Option(
        "--meta", metavar="KEY=VALUE", help="Free-form metadata; repeat for more.")] = None,
    parent: Annotated[int | None, typer.Option(help="Version this one derives from.")] = None,
    registry: RegistryOption = None,
    as_json: JsonOption = False,
) -> None:
    """Copy DIR into a new version of a model and print its number.

    Each file's sha256 and size go into MANIFEST.json, which is written last;
    concurrent pushes get distinct versions.

    Examples:

        v=$(modelctl registry push ./out --model demo --task feature-extraction)

        modelctl registry push ./out --model demo --task text-generation \\
            --alias canary --meta commit=3f2a --meta data=v7 --parent 4
    """
    from cli._progress import transfer_progress

    reg = _open(registry)
    with transfer_progress(f"pushing {model}", as_json) as progress:
        manifest = reg.push(src, model, task, alias=alias, metadata=_parse_meta(meta or []),
                            parent=parent, progress=progress)
    if as_json:
        print_json(manifest.to_dict())
    else:
        sys.stdout.write(f"{manifest.version}\n")


@app.command("list")
def list_(
    name: Annotated[str | None, typer.Argument(help="Show this model's versions.")] = None,
    registry: RegistryOption = None,
    as_json: JsonOption = False,
) -> None:
    """List models, or the versions of one model.

    Examples:

        modelctl registry list

        modelctl registry list demo-embed --json
    """
    reg = _open(registry)
    if name is None:
        found = [(m, reg.versions(m), reg.aliases(m)) for m in reg.models()]
        rows = [{"name": m, "versions": vs, "aliases": al} for m, vs, al in found]
        emit(rows, as_json, lambda c: c.print(table(
            f"models in {reg.url}", ["MODEL", "VERSIONS", "LATEST", "ALIASES"],
            [(m, len(vs), vs[-1], _alias_text(al)) for m, vs, al in found])))
        return
    aliases = reg.aliases(name)
    manifests = [reg.manifest(name, v) for v in reg.versions(name)]
    if not manifests:
        reg.resolve(name, "latest")  # raises the right NotFound
    by_version: dict[int, list[str]] = {}
    for alias, version in sorted(aliases.items()):
        by_version.setdefault(version, []).append(alias)
    data = {"name": name, "aliases": aliases, "versions": [m.to_dict() for m in manifests]}
    emit(data, as_json, lambda c: c.print(table(
        f"{name} in {reg.url}",
        ["VERSION", "CREATED", "TASK", "FILES", "SIZE", "PARENT", "ALIASES"],
        [(m.version, m.created, m.task, len(m.files), _size(m.total_size), m.parent,
          ", ".join(by_version.get(m.version, []))) for m in manifests])))


def _alias_text(aliases: dict[str, int]) -> str:
    return ", ".join(f"{a}={v}" for a, v in sorted(aliases.items()))


@app.command()
def show(ref: RefArg, registry: RegistryOption = None, as_json: JsonOption = False) -> None:
    """Show one version's manifest: task, files, checksums, metadata.

    Examples:

        modelctl registry show demo-embed@stable

        modelctl registry show demo-embed@3 --json | jq .files
    """
    from registry import parse_ref

    model, version_ref = parse_ref(ref)
    reg = _open(registry)
    manifest = reg.manifest(model, version_ref)
    aliases = [a for a, v in sorted(reg.aliases(model).items()) if v == manifest.version]
    emit(manifest.to_dict(), as_json, lambda c: _render_manifest(c, manifest, aliases))


def _render_manifest(console: Console, m: Manifest, aliases: list[str]) -> None:
    facts = [("name", m.name), ("version", m.version), ("aliases", ", ".join(aliases)),
             ("created", m.created), ("task", m.task), ("framework", m.framework),
             ("parent", m.parent), ("size", _size(m.total_size))]
    facts += [(f"meta {k}", v) for k, v in sorted(m.metadata.items())]
    facts += [(f"metric {k}", v) for k, v in sorted(m.metrics.items())]
    console.print(table(f"{m.name}@{m.version}", ["FIELD", "VALUE"], facts))
    console.print(table(None, ["FILE", "SIZE", "SHA256"],
                        [(p, e.size, e.sha256) for p, e in sorted(m.files.items())]))


@app.command()
def alias(
    name: Annotated[str, typer.Argument(help="Model name.")],
    alias_name: Annotated[str, typer.Argument(
        metavar="ALIAS", help="Alias: lower-case letters, digits, '-'.")],
    version: Annotated[str, typer.Argument(help="Version number (or a ref: latest, canary…).")],
    registry: RegistryOption = None,
    as_json: JsonOption = False,
) -> None:
    """Point ALIAS at VERSION (compare-and-swap: fails if someone moves it meanwhile).

    Examples:

        modelctl registry alias demo-embed stable 4

        modelctl registry alias demo-embed stable canary     # promote what canary names
    """
    reg = _open(registry)
    target = reg.resolve(name, version)
    previous = reg.set_alias(name, alias_name, target)
    data = {"model": name, "alias": alias_name, "version": target, "previous": previous}
    was = "unset" if previous is None else previous
    emit(data, as_json, lambda c: c.print(f"{name}: {alias_name} -> {target} (was {was})"))


@app.command()
def unalias(
    name: Annotated[str, typer.Argument(help="Model name.")],
    alias_name: Annotated[str, typer.Argument(metavar="ALIAS", help="Alias to remove.")],
    registry: RegistryOption = None,
    as_json: JsonOption = False,
) -> None:
    """Remove an alias (the version it named stays).

    Example:

        modelctl registry unalias demo-embed canary
    """
    reg = _open(registry)
    previous = reg.remove_alias(name, alias_name)
    data = {"model": name, "alias": alias_name, "previous": previous}
    emit(data, as_json, lambda c: c.print(f"{name}: removed {alias_name} (was {previous})"))


@app.command()
def verify(ref: RefArg, registry: RegistryOption = None, as_json: JsonOption = False) -> None:
    """Recompute every checksum of a stored version.

    Exit 0 if intact; otherwise exit 2 with one problem per line on stderr (a
    changed, missing or extra file, by name).

    Example:

        modelctl registry verify demo-embed@stable
    """
    from cli._progress import transfer_progress
    from registry import parse_ref

    model, version_ref = parse_ref(ref)
    reg = _open(registry)
    manifest = reg.manifest(model, version_ref)
    with transfer_progress(f"verifying {model}@{manifest.version}", as_json) as progress:
        problems = reg.verify(model, manifest.version, progress=progress)
    data: dict[str, Any] = {"model": model, "version": manifest.version, "ok": not problems,
                            "files": len(manifest.files), "problems": problems}
    if as_json:
        print_json(data)
    if problems:
        for problem in problems:
            sys.stderr.write(f"{model}@{manifest.version}: {problem}\n")
        raise typer.Exit(2)
    if not as_json:
        sys.stdout.write(f"{model}@{manifest.version}: {len(manifest.files)} files, "
                         f"{_size(manifest.total_size)}, all checksums match\n")


@app.command()
def pull(
    ref: RefArg,
    dest: Annotated[Path, typer.Argument(metavar="DIR", help="New or empty directory.")],
    registry: RegistryOption = None,
    as_json: JsonOption = False,
) -> None:
    """Download a version into DIR (files + MANIFEST.json), verifying every checksum.

    Nothing usable is left in DIR if verification fails. DIR must be new, empty,
    or an earlier pull (which is replaced).

    Example:

        modelctl registry pull demo-embed@stable ./models/demo-embed
    """
    from cli._progress import transfer_progress
    from registry import parse_ref

    model, version_ref = parse_ref(ref)
    reg = _open(registry)
    with transfer_progress(f"pulling {model}@{version_ref}", as_json) as progress:
        manifest = reg.fetch(model, version_ref, dest, progress=progress)
    data = {"path": str(dest), **manifest.to_dict()}
    emit(data, as_json, lambda c: c.print(
        f"{model}@{manifest.version}: {len(manifest.files)} files, "
        f"{_size(manifest.total_size)} verified into {dest}"))


@app.command()
def uri(
    ref: RefArg,
    pvc: Annotated[str | None, typer.Option(
        metavar="NAME", help="PVC holding the registry root (NAME or NAME/sub/path).")] = None,
    registry: RegistryOption = None,
    as_json: JsonOption = False,
) -> None:
    """Print the storageUri an InferenceService takes for a version.

    s3://bucket/prefix/NAME/VERSION/ for S3, file:///…/NAME/VERSION for a
    directory, pvc://NAME/MODEL/VERSION with --pvc.

    Examples:

        modelctl registry uri demo-embed@stable

        modelctl registry uri demo-embed@3 --pvc models
    """
    from registry import parse_ref

    model, version_ref = parse_ref(ref)
    reg = _open(registry)
    version = reg.resolve(model, version_ref)
    value = reg.storage_uri(model, version, pvc=pvc)
    if as_json:
        print_json({"model": model, "version": version, "uri": value})
    else:
        sys.stdout.write(value + "\n")
