"""The house's layout, as docs/ARCHITECTURE.md draws it: what each package exports, which
package may import which, no import cycles, and modules of a readable size.

The imports are read from the source with ``ast`` (lazy imports inside functions and
``TYPE_CHECKING`` blocks included), so a cycle that only shows at run time on one code
path is still caught here.
"""

from __future__ import annotations

import ast
import importlib
import types
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# Top-level package -> the packages of ours it may import. ARCHITECTURE.md draws this.
ALLOWED: dict[str, set[str]] = {
    "common": set(),
    "captures": {"common"},
    # Scores against ground truth: labels joined with captures, below shadow, which
    # scores generations with its text similarity.
    "accuracy": {"common", "captures"},
    "registry": {"common"},
    "predictor": {"common", "registry", "captures"},
    "devstack": {"common", "registry"},
    "deploycheck": {"common"},
    "rollout": {"common", "registry", "devstack"},
    # Offline evaluation reads what the server writes through captures, never the server.
    "shadow": {"common", "captures", "accuracy", "rollout"},
    "capacity": {"common", "registry", "predictor"},
    "bench": {"common", "captures", "registry", "predictor", "capacity"},
    "cli": {"common", "captures", "accuracy", "registry", "devstack", "deploycheck", "rollout",
            "shadow", "bench", "capacity"},
}
# Names a package's namespace holds that are not its API: typing helpers of lazy exports.
NOT_API = {"TYPE_CHECKING", "Any", "annotations"}
MAX_LINES = 400
# Private modules of one folder sharing a prefix (``_rollout``, ``_rollout_args``, …) are
# one room; from this many on they get a subpackage of their own.
MAX_FAMILY = 3


def _modules() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for top in ALLOWED:
        base = ROOT / top
        if not base.is_dir():
            continue
        for path in sorted(base.rglob("*.py")):
            rel = path.relative_to(ROOT).parts
            # bench/peers: other projects' servers; bench/.venv-*: their virtualenvs
            if "peers" in rel or any(part.startswith(".") for part in rel):
                continue
            parts = path.relative_to(ROOT).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            found[name] = path
    return found


MODULES = _modules()
PACKAGES = sorted(name for name, path in MODULES.items() if path.name == "__init__.py")


def _imports(name: str, path: Path) -> Iterator[tuple[str, int]]:
    """(our module imported, line) for every import in the file, at any depth."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join([*base, node.module] if node.module else base)
            else:
                module = node.module or ""
            targets = [module, *(f"{module}.{alias.name}" for alias in node.names)]
        else:
            continue
        for target in targets:
            if target in MODULES and target != name:
                yield target, node.lineno


GRAPH = {name: dict(_imports(name, path)) for name, path in MODULES.items()}


def test_the_layout_is_found() -> None:
    assert {"rollout.backends", "rollout.analysis", "shadow", "devstack", "deploycheck",
            "predictor.batching", "predictor.tap", "predictor.handlers"} <= set(PACKAGES)


@pytest.mark.parametrize("name", sorted(MODULES))
def test_a_package_imports_only_what_its_arrows_allow(name: str) -> None:
    top = name.split(".")[0]
    wrong = {target: line for target, line in GRAPH[name].items()
             if target.split(".")[0] not in ALLOWED[top] | {top}}
    assert not wrong, f"{MODULES[name]} imports {wrong} (allowed: {sorted(ALLOWED[top])})"


def test_no_import_cycles() -> None:
    """Tarjan's strongly connected components over the module graph. A package's
    ``__init__`` only re-exports, so the edges into one (a child importing its own
    package's public names) are left out, as Python resolves them without a cycle."""
    edges = {name: [t for t in targets if MODULES[t].name != "__init__.py"]
             for name, targets in GRAPH.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in edges[node]:
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for name in sorted(edges):
        if name not in index:
            visit(name)
    assert not cycles, f"import cycles: {cycles}"


@pytest.mark.parametrize("name", sorted(MODULES))
def test_modules_stay_readable(name: str) -> None:
    lines = len(MODULES[name].read_text().splitlines())
    assert lines <= MAX_LINES, f"{MODULES[name]} has {lines} lines; split it by concern"


def test_no_family_of_modules_hides_a_subpackage() -> None:
    families: dict[tuple[Path, str], list[str]] = {}
    for path in MODULES.values():
        if path.name.startswith("_") and not path.name.startswith("__"):
            prefix = path.stem.lstrip("_").split("_")[0]
            families.setdefault((path.parent, prefix), []).append(path.name)
    crowded = {f"{folder.relative_to(ROOT)}/_{prefix}*": sorted(names)
               for (folder, prefix), names in families.items() if len(names) >= MAX_FAMILY}
    assert not crowded, f"give each its own subpackage: {crowded}"


@pytest.mark.parametrize("name", PACKAGES)
def test_all_is_exactly_the_public_names(name: str) -> None:
    """As httpx tests its ``__all__``: every public name in the package's namespace is
    exported, every exported name resolves (a lazy one: its module defines it), and it
    is sorted the way ruff's RUF022 sorts it (CONSTANTS, Classes, functions)."""
    package = importlib.import_module(name)
    exported = getattr(package, "__all__", None)
    assert exported is not None, f"{name} has no __all__"

    def kind(item: str) -> tuple[int, str]:
        return (0 if item.isupper() else 1 if item[:1].isupper() else 2, item)

    assert list(exported) == sorted(exported, key=kind)
    public = {
        key for key, value in vars(package).items()
        if not key.startswith("_") and key not in NOT_API
        and not (isinstance(value, types.ModuleType) and value.__name__.startswith(f"{name}."))
    }
    assert public <= set(exported), f"{name} holds public names it does not export"
    lazy: dict[str, str] = getattr(package, "_LAZY", {})
    for item in exported:
        if item in lazy and item not in vars(package):
            # Loaded on first use, and heavy (KServe's gRPC protos clash with
            # tritonclient's in one process): read the module instead of importing it.
            defined = _top_level_names(MODULES[lazy[item]])
            assert item in defined, f"{name}.{item} is not in {lazy[item]}"
        else:
            assert getattr(package, item) is not None, f"{name}.{item} does not resolve"


def _top_level_names(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.ImportFrom):
            names.update(alias.asname or alias.name for alias in node.names)
    return names
