"""The rollout's Role must grant exactly the verbs the rollout code uses.

The verbs come from the code, not from a list kept by hand: every ``*.py`` under the
rollout package is parsed (never imported) and each call of an official ``kubernetes``
client method is mapped to the (API group, resource, verb) it needs:

    get/list/create/patch/replace/delete_namespaced_custom_object   -> group=, plural=
    ..._custom_object_status                                        -> plural + "/status"
    read/list/create/patch/replace/delete_namespaced_<resource>     -> a table of built-ins
    watch.Watch().stream(api.list_namespaced_..., ...)              -> list and watch

``group=`` and ``plural=`` must be string literals or module-level string constants;
anything else is reported, as is any cluster-wide call (the rollout stays namespaced).
The Role checked is the one labelled ``app.kubernetes.io/component: rollout`` and
``app.kubernetes.io/part-of: modelctl``.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from deploycheck._problems import Finding

ROLLOUT_LABELS = {"app.kubernetes.io/component": "rollout", "app.kubernetes.io/part-of": "modelctl"}

_VERBS = {
    "get": "get",
    "read": "get",
    "list": "list",
    "create": "create",
    "patch": "patch",
    "replace": "update",
    "delete": "delete",
    "delete_collection": "deletecollection",
}
_CUSTOM = re.compile(
    r"^(get|list|create|patch|replace|delete|delete_collection)_namespaced_custom_object"
    r"(_status|_scale)?(_with_http_info)?$"
)
_BUILTIN = re.compile(
    r"^(read|list|create|patch|replace|delete|delete_collection)_namespaced_([a-z_]+?)"
    r"(_status|_scale|_log)?(_with_http_info)?$"
)
_CLUSTER_WIDE = re.compile(
    r"^\w+_(cluster_custom_object\w*|\w+_for_all_namespaces)(_with_http_info)?$"
)
# Built-in resources by the name the client methods use (CoreV1Api, AppsV1Api, ...).
_BUILTIN_RESOURCES = {
    "event": ("", "events"),
    "pod": ("", "pods"),
    "config_map": ("", "configmaps"),
    "secret": ("", "secrets"),
    "service": ("", "services"),
    "service_account": ("", "serviceaccounts"),
    "endpoints": ("", "endpoints"),
    "persistent_volume_claim": ("", "persistentvolumeclaims"),
    "deployment": ("apps", "deployments"),
    "replica_set": ("apps", "replicasets"),
    "stateful_set": ("apps", "statefulsets"),
    "lease": ("coordination.k8s.io", "leases"),
    "job": ("batch", "jobs"),
    "horizontal_pod_autoscaler": ("autoscaling", "horizontalpodautoscalers"),
}
# Positional arguments of CustomObjectsApi methods: (group, version, namespace, plural, ...).
_GROUP_ARG, _PLURAL_ARG = 0, 3


@dataclass(frozen=True)
class Use:
    """One permission the code needs, and where it needs it."""

    group: str
    resource: str
    verb: str
    where: str  # "rollout/backends/_kserve/_kube.py:42 (patch_namespaced_custom_object)"


def resource_label(group: str, resource: str) -> str:
    return resource if not group else f"{resource}.{group}"


def scan_sources(root: Path) -> tuple[list[Use], list[str]]:
    """Every Kubernetes permission used under ``root``, and what could not be worked out."""
    files = sorted(p for p in root.rglob("*.py") if "__pycache__" not in p.parts)
    trees = []
    for path in files:
        try:
            trees.append((path, ast.parse(path.read_text(), filename=str(path))))
        except SyntaxError as exc:
            return [], [f"cannot parse {path}: {exc.msg} (line {exc.lineno})"]
    constants = _string_constants(tree for _, tree in trees)
    uses: list[Use] = []
    unresolved: list[str] = []
    for path, tree in trees:
        shown = f"{root.name}/{path.relative_to(root)}"
        _scan_tree(tree, shown, constants, uses, unresolved)
    return uses, unresolved


def _string_constants(trees: Iterable[ast.Module]) -> dict[str, str]:
    out: dict[str, str] = {}
    for tree in trees:
        for node in tree.body:
            targets: list[ast.expr] = []
            if isinstance(node, ast.Assign):
                targets, value = node.targets, node.value
            elif isinstance(node, ast.AnnAssign) and node.value is not None:
                targets, value = [node.target], node.value
            else:
                continue
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                for target in targets:
                    if isinstance(target, ast.Name):
                        out[target.id] = value.value
    return out


def _scan_tree(
    tree: ast.Module,
    shown: str,
    constants: Mapping[str, str],
    uses: list[Use],
    unresolved: list[str],
) -> None:
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        if isinstance(node.func, ast.Attribute):
            _record(
                node.func.attr,
                node.args,
                node.keywords,
                None,
                f"{shown}:{node.lineno}",
                constants,
                uses,
                unresolved,
            )
        # watch.Watch().stream(api.list_namespaced_x, ...): a method passed, not called.
        if isinstance(node.func, ast.Attribute) and node.func.attr == "stream" and node.args:
            first = node.args[0]
            if isinstance(first, ast.Attribute):
                _record(
                    first.attr,
                    node.args[1:],
                    node.keywords,
                    "watch",
                    f"{shown}:{node.lineno}",
                    constants,
                    uses,
                    unresolved,
                )


def _record(
    method: str,
    args: list[ast.expr],
    keywords: list[ast.keyword],
    extra_verb: str | None,
    where: str,
    constants: Mapping[str, str],
    uses: list[Use],
    unresolved: list[str],
) -> None:
    label = f"{where} ({method})"
    if _CLUSTER_WIDE.match(method):
        unresolved.append(f"{label} is cluster-wide: the rollout must stay in its namespace")
        return
    custom = _CUSTOM.match(method)
    builtin = None if custom else _BUILTIN.match(method)
    if custom:
        verb, sub = _VERBS[custom.group(1)], (custom.group(2) or "").lstrip("_")
        group = _argument(args, keywords, "group", _GROUP_ARG, constants)
        plural = _argument(args, keywords, "plural", _PLURAL_ARG, constants)
        if group is None or plural is None:
            unresolved.append(
                f"{label}: cannot tell group=/plural=; pass string literals or "
                "module-level constants"
            )
            return
        resource = f"{plural}/{sub}" if sub else plural
    elif builtin:
        verb, sub = _VERBS[builtin.group(1)], (builtin.group(3) or "").lstrip("_")
        known = _BUILTIN_RESOURCES.get(builtin.group(2))
        if known is None:
            unresolved.append(f"{label}: unknown built-in resource {builtin.group(2)!r}")
            return
        group, resource = known[0], f"{known[1]}/{sub}" if sub else known[1]
    else:
        return
    uses.append(Use(group, resource, verb, label))
    if extra_verb:
        uses.append(Use(group, resource, extra_verb, label))


def _argument(
    args: list[ast.expr],
    keywords: list[ast.keyword],
    name: str,
    index: int,
    constants: Mapping[str, str],
) -> str | None:
    node: ast.expr | None = next((k.value for k in keywords if k.arg == name), None)
    if (
        node is None
        and len(args) > index
        and not any(isinstance(a, ast.Starred) for a in args[: index + 1])
    ):
        node = args[index]
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.Name):
        return constants.get(node.id)
    if isinstance(node, ast.Attribute):
        return constants.get(node.attr)
    return None


def is_rollout_role(doc: Mapping[str, Any]) -> bool:
    labels = (doc.get("metadata") or {}).get("labels") or {}
    return doc.get("kind") in ("Role", "ClusterRole") and all(
        labels.get(k) == v for k, v in ROLLOUT_LABELS.items()
    )


def check_role(doc: Mapping[str, Any], src: Path | None) -> list[Finding]:
    """Findings for a rollout Role against the code under ``src`` (None: not found)."""
    if doc.get("kind") == "ClusterRole":
        return [
            Finding(
                ("kind",), "the rollout's permissions must be a namespaced Role, not a ClusterRole"
            )
        ]
    if src is None or not src.is_dir():
        return [
            Finding(
                ("rules",),
                f"cannot derive the rollout's verbs: no rollout source at {src}; "
                "pass --rollout-src DIR",
            )
        ]
    uses, unresolved = scan_sources(src)
    out = [Finding(("rules",), message) for message in unresolved]
    needed: dict[tuple[str, str, str], str] = {}
    for use in uses:
        needed.setdefault((use.group, use.resource, use.verb), use.where)
    granted: dict[tuple[str, str, str], tuple[int, int]] = {}
    for index, rule in enumerate(doc.get("rules") or []):
        groups, resources, verbs = (rule.get(k) or [] for k in ("apiGroups", "resources", "verbs"))
        if "*" in groups or "*" in resources or "*" in verbs:
            out.append(
                Finding(("rules", index), "wildcards grant more than the rollout uses: list verbs")
            )
        for group in groups:
            for resource in resources:
                for verb_index, verb in enumerate(verbs):
                    granted.setdefault((group, resource, verb), (index, verb_index))
    for key in sorted(set(granted) - set(needed)):
        index, verb_index = granted[key]
        out.append(
            Finding(
                ("rules", index, "verbs", verb_index),
                f'verb "{key[2]}" on {resource_label(key[0], key[1])} is granted but no '
                f"call under {src.name}/ uses it",
            )
        )
    for key in sorted(set(needed) - set(granted)):
        out.append(
            Finding(
                ("rules",),
                f'missing verb "{key[2]}" on {resource_label(key[0], key[1])}, '
                f"used by {needed[key]}",
            )
        )
    return out
