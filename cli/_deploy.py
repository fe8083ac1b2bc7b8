"""``modelctl deploy``: render an overlay for one model version, and check manifests
the way a real API server would, against a folder's CRDs or a cluster's."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from cli._common import JsonOption, RegistryOption

app = typer.Typer(
    name="deploy",
    help="Render InferenceServices for a registry version, and validate manifests "
    "(offline, or against the CRDs a cluster serves).",
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode="rich",
)

CrdsOption = Annotated[
    Path | None,
    typer.Option(
        "--crds",
        help="Folder of CRD YAML to validate against, offline (default: $MODELCTL_CRDS_DIR, "
        "else the cluster's CRDs, else .modelctl/crds in a checkout, which make setup fills).",
        show_default=False,
    ),
]
CrdKubeconfigOption = Annotated[
    str | None,
    typer.Option(
        "--kubeconfig",
        help="Read the CRDs the cluster of this kubeconfig serves "
        "(default: $KUBECONFIG, else ~/.kube/config, when present; --crds wins).",
        show_default=False,
    ),
]
CrdContextOption = Annotated[
    str | None,
    typer.Option("--context", help="kubeconfig context to read CRDs from.", show_default=False),
]
KubeVersionOption = Annotated[
    str, typer.Option("--kube-version", help="Kubernetes release whose built-in schemas apply.")
]


@app.command()
def render(
    ref: Annotated[
        str, typer.Argument(metavar="NAME@REF", help="Model and version, alias or latest.")
    ],
    overlay: Annotated[
        str,
        typer.Option("--overlay", "-o", help="Overlay name (kustomize/overlays/NAME) or folder."),
    ] = "cpu",
    registry: RegistryOption = None,
    namespace: Annotated[
        str | None,
        typer.Option("--namespace", "-n", help="Namespace for every object.", show_default=False),
    ] = None,
    name: Annotated[
        str | None,
        typer.Option(
            "--name", help="InferenceService name (default: the model's).", show_default=False
        ),
    ] = None,
    pvc: Annotated[
        str | None,
        typer.Option(
            "--pvc",
            help="storageUri as pvc://CLAIM/... where the registry root is mounted.",
            show_default=False,
        ),
    ] = None,
    kustomize_dir: Annotated[
        Path | None,
        typer.Option(
            "--kustomize",
            help="Folder with overlays/ (default: ./kustomize, else the checkout's).",
            show_default=False,
        ),
    ] = None,
    crds: CrdsOption = None,
    kubeconfig: CrdKubeconfigOption = None,
    context: CrdContextOption = None,
    kube_version: KubeVersionOption = "1.33",
    validate: Annotated[
        bool, typer.Option("--validate/--no-validate", help="Check the result before printing.")
    ] = True,
    trained_model: Annotated[
        list[str] | None,
        typer.Option(
            "--trained-model",
            metavar="NAME@REF",
            help="Serve this registry version as a KServe TrainedModel of the rendered "
            "InferenceService (repeatable; a multi-model overlay only).",
            show_default=False,
        ),
    ] = None,
    plan_file: Annotated[
        Path | None,
        typer.Option(
            "--plan",
            metavar="FILE",
            help="Write this capacity plan (`modelctl plan NAME@REF ... --json`) into the "
            "result: batching flags, replica bounds, autoscaler targets (docs/CAPACITY.md). "
            "It must be for NAME@REF's version and the overlay's mode.",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Print an overlay's manifests for NAME@REF, ready for kubectl apply.

    kustomize builds the overlay; each modelctl-registry://MODEL@REF
    storageUri becomes the registry's URI for that version (MODEL@stable,
    as in standard-canary, is the model's stable alias); InferenceServices
    take the model's name. Each --trained-model adds a TrainedModel of the
    InferenceService, its storageUri resolved the same way and its memory
    from the version's size; the overlay must be a multi-model one, whose
    InferenceService has no storageUri (there NAME only names it). --plan
    FILE writes a capacity plan's numbers into the objects (args, replica
    bounds, autoscaler targets; docs/CAPACITY.md); notes on stderr say
    what the overlay has no field for. The result is checked like
    `deploy validate` before anything is printed.

    Examples:

        modelctl deploy render demo-embed@stable --overlay gpu \\
            | kubectl apply -f -

        modelctl deploy render demo-embed@3 --overlay standard-canary \\
            -n prod --registry s3://models/registry

        modelctl deploy render pool --overlay multi-model \\
            --trained-model demo-embed@stable --trained-model sentiment@3

        modelctl deploy render demo-embed@3 --overlay gpu --plan plan.json
    """
    import yaml

    from deploycheck import (
        CheckConfig,
        Checker,
        DeployError,
        RenderRequest,
        find_crds,
        find_kubectl,
        find_kustomize_dir,
        find_rollout_src,
        overlay_dir,
    )
    from deploycheck import render as render_overlay
    from registry import InvalidName, Registry, parse_ref

    model, version_ref = parse_ref(ref)
    trained: list[tuple[str, str]] = []
    for raw in trained_model or []:
        try:
            trained.append(parse_ref(raw))
        except InvalidName as exc:
            raise DeployError(f"--trained-model {raw!r}: {exc}") from exc
    request = RenderRequest(
        model=model,
        ref=version_ref,
        overlay=overlay,
        namespace=namespace,
        name=name,
        trained_models=tuple(trained),
    )
    directory = overlay_dir(overlay, find_kustomize_dir(kustomize_dir))
    reg = Registry.open(registry)
    plan = None
    if plan_file is not None:
        from cli._deploy_plan import load_plan

        plan = load_plan(plan_file, model, reg.resolve(model, version_ref))
    kubectl = find_kubectl()
    resolved: list[str] = []

    def resolve(model_name: str, model_ref: str) -> str:
        resolved.append(reg.storage_uri(model_name, model_ref, pvc=pvc))
        return resolved[-1]

    def version(model_name: str, model_ref: str) -> str:
        return str(reg.resolve(model_name, model_ref))

    def files(model_name: str, model_ref: str) -> dict[str, int]:
        manifest = reg.manifest(model_name, model_ref)
        return {path: entry.size for path, entry in manifest.files.items()}

    docs = render_overlay(request, directory, kubectl, resolve, version, files)
    if plan is not None:
        from deploycheck import apply_plan

        for note in apply_plan(docs, plan, overlay):
            sys.stderr.write(f"note: {note}\n")
    if any(uri.startswith("file://") for uri in resolved):
        sys.stderr.write(
            "warning: storageUri is a file:// path, which pods cannot read: use an s3:// "
            "registry, or --pvc CLAIM where a volume holds the registry\n"
        )
    text = yaml.safe_dump_all(docs, sort_keys=False, default_flow_style=False)
    if validate:
        config = CheckConfig(kube_version=kube_version, rollout_src=find_rollout_src())
        index = find_crds(crds, kubeconfig, context)
        checker = Checker(config, kubectl=kubectl, crds=index)
        problems, _ = checker.check_text(f"render:{directory}", text)
        if problems:
            sys.stderr.write(f"{index.source.describe()}\n")
            for problem in problems:
                sys.stderr.write(f"{problem}\n")
            sys.stderr.write(
                f"error: the rendered manifests have {len(problems)} problem(s); nothing printed\n"
            )
            raise typer.Exit(2)
    sys.stdout.write(text)


@app.command("validate")
def validate_command(
    paths: Annotated[list[Path], typer.Argument(help="Files, folders, or kustomize folders.")],
    crds: CrdsOption = None,
    kubeconfig: CrdKubeconfigOption = None,
    context: CrdContextOption = None,
    kube_version: KubeVersionOption = "1.33",
    rollout_src: Annotated[
        Path | None,
        typer.Option(
            "--rollout-src",
            help="Source the rollout Role's verbs "
            "are derived from (default: the installed rollout "
            "package).",
            show_default=False,
        ),
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """Check manifests as a real API server and KServe's webhook would accept them.

    Custom resources meet their CRD schema (unknown fields are errors):
    from --crds DIR or $MODELCTL_CRDS_DIR, else as the cluster of
    --kubeconfig/--context ($KUBECONFIG, ~/.kube/config) serves them,
    else .modelctl/crds in a checkout (make setup); the first stderr line says
    which. Built-in kinds meet Kubernetes' own schemas for --kube-version;
    kustomize folders are rendered first. Then the rules: KServe's
    validating webhook for each InferenceService (its lines name the
    rule kserve-webhook), GPU request = limit, the canary field matches the
    deployment mode, no latest images, every container has resources,
    and the rollout Role grants exactly what the rollout code calls.

    One line per problem, file:document:path: message (documents count
    from 0 in the file, or in kustomize's output); exit code 2 if any.

    Examples:

        modelctl deploy validate manifests/ kustomize/

        modelctl deploy validate my-overlay/ --kube-version 1.31 --json

        modelctl deploy validate kustomize/ --context prod
    """
    from cli import _output
    from deploycheck import CheckConfig, Checker, find_crds, find_rollout_src

    config = CheckConfig(
        kube_version=kube_version,
        rollout_src=rollout_src if rollout_src is not None else find_rollout_src(),
    )
    index = find_crds(crds, kubeconfig, context)
    report = Checker(config, crds=index).check_paths(paths)
    if as_json:
        _output.print_json(
            {
                "ok": report.ok,
                "documents": report.documents,
                "sources": list(report.sources),
                "crds": index.source.to_dict(),
                "problems": [p.to_dict() for p in report.problems],
            }
        )
    else:
        sys.stderr.write(f"{index.source.describe()}\n")
        for problem in report.problems:
            sys.stdout.write(f"{problem}\n")
        checked = f"{report.documents} document(s) from {len(report.sources)} source(s)"
        sys.stderr.write(
            f"{len(report.problems)} problem(s) in {checked}\n"
            if report.problems
            else f"ok: {checked} valid\n"
        )
    if not report.ok:
        raise typer.Exit(2)
