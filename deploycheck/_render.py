"""``modelctl deploy render``: an overlay, built by kustomize, made concrete for one model.

The kustomize tree names its InferenceServices ``model`` (or ``model-...``) and points
them at placeholders ``modelctl-registry://MODEL@REF``. Rendering

- renames every InferenceService: the leading ``model`` becomes the chosen name;
- resolves each placeholder through the registry: ``MODEL`` is the model rendered,
  ``REF`` the ref asked for, anything else is taken literally (``MODEL@stable`` is the
  model's ``stable`` alias);
- moves namespaced objects to ``--namespace`` when given;
- rewrites ``isvc="..."`` and ``namespace="..."`` in KEDA Prometheus queries to match;
- makes the objects labelled ``app.kubernetes.io/instance: model`` (the queue
  overlay's worker, Redis, ScaledObject, ...) the rendered model's: they are renamed
  like the InferenceService, and in them every ``model`` token (a label value,
  ``--model_name=model``, ``redis://model-queue-redis``), ``.NAMESPACE.svc`` host,
  ``VERSION`` token (the version number REF names) and storage placeholder (an
  initContainer's args) is rewritten; the InferenceServices' references to their
  names follow;
- with ``trained_models`` (``--trained-model MODEL@REF``), adds one KServe TrainedModel
  per model for the rendered InferenceService, which must be a multi-model one
  (``_trained``: no storageUri, as KServe's ``IsMMSPredictor`` reads it).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from deploycheck import _kustomize
from deploycheck._errors import DeployError
from deploycheck._trained import Files, require_multi_model, trained_models
from deploycheck._yaml import YamlDocumentError, load_documents

PLACEHOLDER = re.compile(r"^modelctl-registry://(?P<model>[^@\s]+)@(?P<ref>\S+)$")
BASE_NAME = "model"
MODEL_TOKEN, REF_TOKEN = "MODEL", "REF"
_ISVC_NAME = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_NAMESPACE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_SELECTOR = re.compile(r'\b(isvc|namespace)(\s*=\s*)"([^"]*)"')

INSTANCE_LABEL = "app.kubernetes.io/instance"
VERSION_TOKEN = "VERSION"
_BEFORE, _AFTER = r"(?<![A-Za-z0-9_.-])", r"(?![A-Za-z0-9_])"

Resolver = Callable[[str, str], str]


@dataclass(frozen=True)
class RenderRequest:
    """One model version through one overlay; ``name`` defaults to the model's name.
    ``trained_models``: ``(model, ref)`` pairs served as TrainedModels of the rendered
    InferenceService (a multi-model overlay's), one version per model."""

    model: str
    ref: str
    overlay: str
    namespace: str | None = None
    name: str | None = None
    trained_models: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        seen: dict[str, str] = {}
        for model, ref in self.trained_models:
            if model in seen:
                raise DeployError(
                    f"--trained-model {model} is given twice ({model}@{seen[model]}, "
                    f"{model}@{ref}): a TrainedModel is named after its model, so one "
                    "version each"
                )
            seen[model] = ref
        isvc = self.isvc_name
        if not _ISVC_NAME.match(isvc) or len(isvc) > 63:
            raise DeployError(
                f"{isvc!r} is not a valid InferenceService name (lower-case letters, digits "
                "and '-', starting with a letter, at most 63): pass --name"
            )
        if self.namespace is not None and (
            not _NAMESPACE.match(self.namespace) or len(self.namespace) > 63
        ):
            raise DeployError(f"{self.namespace!r} is not a valid namespace name")

    @property
    def isvc_name(self) -> str:
        return self.name or self.model


def overlay_dir(overlay: str, kustomize_root: Path) -> Path:
    """An overlay by name (``kustomize/overlays/NAME``) or by path."""
    as_path = Path(overlay)
    if _kustomize.is_kustomization(as_path):
        return as_path
    candidate = kustomize_root / "overlays" / overlay
    if _kustomize.is_kustomization(candidate):
        return candidate
    names = sorted(
        p.name for p in (kustomize_root / "overlays").iterdir() if _kustomize.is_kustomization(p)
    )
    raise DeployError(
        f"no overlay {overlay!r} in {kustomize_root / 'overlays'} (have: {', '.join(names)})"
    )


def render(
    request: RenderRequest,
    directory: Path,
    kubectl: str,
    resolve: Resolver,
    version: Resolver | None = None,
    files: Files | None = None,
) -> list[dict[str, Any]]:
    """The overlay's objects, concrete for ``request``; ``resolve(model, ref)`` gives a
    storageUri (the registry's ``storage_uri``), ``version(model, ref)`` the version
    number a ref names (needed only where a per-model object says ``VERSION``),
    ``files(model, ref)`` a version's file sizes (needed only for trained models)."""
    text = _kustomize.build(directory, kubectl)
    try:
        docs = [doc for _, doc in load_documents(text) if isinstance(doc, dict)]
    except YamlDocumentError as exc:
        raise DeployError(f"kustomize output for {directory} is not YAML: {exc}") from exc
    renames = _rename(docs, request)
    served = [d for d in docs if d.get("kind") == "InferenceService"
              and d["metadata"].get("name") == request.isvc_name]
    if request.trained_models:
        if not served or files is None:
            raise DeployError(f"no InferenceService {request.isvc_name!r} (or no file sizes) "
                              "to render the trained models for")
        require_multi_model(served[0], request.overlay)
    per_model = [id(doc) for doc in docs if _is_owned(doc)]
    owned = _rename_owned(docs, request)
    for doc in docs:
        meta = doc.setdefault("metadata", {})
        old_namespace = meta.get("namespace")
        if request.namespace is not None and "namespace" in meta:
            meta["namespace"] = request.namespace
        if doc.get("kind") == "InferenceService":
            _resolve_storage(doc, request, resolve)
            _rewrite_queries(doc, renames, meta.get("namespace"))
            _rewrite_strings(doc, _names_fixer(owned))
        elif id(doc) in per_model:
            fix = _owned_fixer(request, old_namespace, resolve, version)
            for key in ("spec", "data", "stringData"):
                if key in doc:
                    doc[key] = _rewrite_strings(doc[key], fix)
    if request.trained_models and files is not None:
        docs.extend(trained_models(served[0], request.trained_models, resolve, files))
    return docs


def _is_owned(doc: dict[str, Any]) -> bool:
    labels = (doc.get("metadata") or {}).get("labels") or {}
    return doc.get("kind") != "InferenceService" and labels.get(INSTANCE_LABEL) == BASE_NAME


def _rename_owned(docs: Sequence[dict[str, Any]], request: RenderRequest) -> dict[str, str]:
    """Rename the per-model objects (and their instance label) like the InferenceService."""
    renames: dict[str, str] = {}
    for doc in docs:
        if not _is_owned(doc):
            continue
        meta = doc["metadata"]
        meta["labels"][INSTANCE_LABEL] = request.isvc_name
        old = str(meta.get("name", ""))
        if old == BASE_NAME or old.startswith(BASE_NAME + "-"):
            renames[old] = meta["name"] = request.isvc_name + old[len(BASE_NAME) :]
            if len(renames[old]) > 253:
                raise DeployError(f"name {renames[old]!r} is too long: pass --name")
    return renames


def _names_fixer(renames: dict[str, str]) -> Callable[[str], str]:
    patterns = [
        (re.compile(_BEFORE + re.escape(old) + r"(?![A-Za-z0-9_-])"), new)
        for old, new in sorted(renames.items(), key=lambda item: -len(item[0]))
    ]

    def fix(text: str) -> str:
        for pattern, new in patterns:
            text = pattern.sub(new, text)
        return text

    return fix


def _owned_fixer(
    request: RenderRequest,
    old_namespace: Any,
    resolve: Resolver,
    version: Resolver | None,
) -> Callable[[str], str]:
    token = re.compile(_BEFORE + BASE_NAME + _AFTER)
    version_token = re.compile(r"(?<![A-Za-z0-9_])" + VERSION_TOKEN + _AFTER)
    host = re.compile(r"\." + re.escape(str(old_namespace)) + r"\.svc\b")

    def fix(text: str) -> str:
        match = PLACEHOLDER.match(text)
        if match is not None:
            model = request.model if match["model"] == MODEL_TOKEN else match["model"]
            ref = request.ref if match["ref"] == REF_TOKEN else match["ref"]
            return resolve(model, ref)
        if version_token.search(text):
            if version is None:
                raise DeployError(f"{text!r} needs the version number, and none was given")
            text = version_token.sub(version(request.model, request.ref), text)
        if request.namespace is not None and old_namespace is not None:
            text = host.sub(f".{request.namespace}.svc", text)
        return token.sub(request.isvc_name, text)

    return fix


def _rewrite_strings(node: Any, fix: Callable[[str], str]) -> Any:
    """``node`` with ``fix`` applied to every string value (keys are left alone)."""
    if isinstance(node, dict):
        for key, value in node.items():
            node[key] = _rewrite_strings(value, fix)
        return node
    if isinstance(node, list):
        node[:] = [_rewrite_strings(item, fix) for item in node]
        return node
    return fix(node) if isinstance(node, str) else node


def _rename(docs: Sequence[dict[str, Any]], request: RenderRequest) -> dict[str, str]:
    renames: dict[str, str] = {}
    for doc in docs:
        if doc.get("kind") != "InferenceService":
            continue
        meta = doc.setdefault("metadata", {})
        old = str(meta.get("name", ""))
        if old == BASE_NAME or old.startswith(BASE_NAME + "-"):
            new = request.isvc_name + old[len(BASE_NAME) :]
            if len(new) > 63:
                raise DeployError(
                    f"InferenceService name {new!r} is longer than 63 characters: pass --name"
                )
            renames[old] = new
            meta["name"] = new
    if not renames:
        raise DeployError(
            f"the overlay has no InferenceService named {BASE_NAME!r} "
            f"(or {BASE_NAME}-...) to render"
        )
    return renames


def _storage_fields(node: Any) -> Iterator[tuple[dict[str, Any], str]]:
    """``(mapping, key)`` for every storageUri (and storageUris[].uri) under ``node``."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "storageUri" and isinstance(value, str):
                yield node, key
            elif key == "storageUris" and isinstance(value, list):
                yield from (
                    (item, "uri") for item in value if isinstance(item, dict) and "uri" in item
                )
            else:
                yield from _storage_fields(value)
    elif isinstance(node, list):
        for item in node:
            yield from _storage_fields(item)


def _resolve_storage(doc: dict[str, Any], request: RenderRequest, resolve: Resolver) -> None:
    cache: dict[tuple[str, str], str] = {}
    for holder, key in _storage_fields(doc.get("spec")):
        match = PLACEHOLDER.match(str(holder[key]))
        if match is None:
            continue
        model = request.model if match["model"] == MODEL_TOKEN else match["model"]
        ref = request.ref if match["ref"] == REF_TOKEN else match["ref"]
        if (model, ref) not in cache:
            cache[(model, ref)] = resolve(model, ref)
        holder[key] = cache[(model, ref)]


def _rewrite_queries(doc: dict[str, Any], renames: dict[str, str], namespace: str | None) -> None:
    def fix(match: re.Match[str]) -> str:
        label, eq, value = match.group(1), match.group(2), match.group(3)
        if label == "isvc":
            value = renames.get(value, value)
        elif namespace is not None:
            value = namespace
        return f'{label}{eq}"{value}"'

    for holder in _queries(doc.get("spec")):
        holder["query"] = _SELECTOR.sub(fix, holder["query"])


def _queries(node: Any) -> Iterator[dict[str, Any]]:
    if isinstance(node, dict):
        metric = node.get("metric")
        if isinstance(metric, dict) and isinstance(metric.get("query"), str):
            yield metric
        for value in node.values():
            yield from _queries(value)
    elif isinstance(node, list):
        for item in node:
            yield from _queries(item)
