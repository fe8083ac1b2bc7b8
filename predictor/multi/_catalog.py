"""The models a multi-model predictor knows: every subdirectory of ``--model_dir`` that
holds a ``MANIFEST.json``, named by the subdirectory; or, with ``--model_catalog``, the
registry versions a catalog file lists (``modelctl serve --model`` writes it), each
fetched and verified into its cache directory when it is first loaded.

That is the layout KServe's model agent writes for TrainedModels
(``/mnt/models/<TrainedModel name>/``, one directory per model, added and removed while
the server runs) and that ``modelctl serve --model`` writes from the registry. The
directory is read again whenever a name is asked for that it did not hold, and by the
repository index, so a model added later is found without a restart. A directory whose
manifest cannot be read is listed, UNAVAILABLE with the reason.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MANIFEST = "MANIFEST.json"
# KServe's model names (and Kubernetes object names): lower case, digits, - . _
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")


@dataclass(frozen=True)
class Entry:
    """One model directory: its manifest's version, task and file sizes, or why not."""

    name: str
    model_dir: Path
    version: str = ""
    task: str = ""
    file_sizes: tuple[tuple[str, int], ...] = ()
    problem: str = ""
    source: tuple[str, str, int] | None = None  # (registry, model, version) to fetch from

    def fetch_if_needed(self) -> None:
        """A catalog entry: fetch the version into ``model_dir`` unless a verified copy is
        there (the registry's fetch verifies every checksum, and leaves nothing behind
        when one is wrong). Blocking: the host runs it on a load thread."""
        from registry import Registry, read_manifest_file, verify_dir

        if self.source is None:
            return
        url, model, version = self.source
        registry = Registry.open(url)
        if (self.model_dir / MANIFEST).is_file():
            manifest = read_manifest_file(self.model_dir / MANIFEST)
            if manifest.version == version and not verify_dir(self.model_dir, manifest):
                return
        registry.fetch(model, version, self.model_dir)


def scan(models_dir: Path) -> dict[str, Entry]:
    """Every model directory under ``models_dir``, by name (sorted)."""
    from registry import RegistryError, read_manifest_file

    found: dict[str, Entry] = {}
    try:
        children = sorted(p for p in models_dir.iterdir() if p.is_dir())
    except OSError:
        return found
    for child in children:
        if not _NAME.match(child.name) or not (child / MANIFEST).is_file():
            continue
        try:
            manifest = read_manifest_file(child / MANIFEST)
        except (RegistryError, OSError) as exc:
            found[child.name] = Entry(child.name, child, problem=f"unreadable manifest: {exc}")
            continue
        sizes = tuple(sorted((path, entry.size) for path, entry in manifest.files.items()))
        found[child.name] = Entry(child.name, child, str(manifest.version), manifest.task, sizes)
    return found


def read_catalog(path: Path) -> dict[str, Entry]:
    """The models of a catalog file: ``{"registry": URL, "models": [{"name", "model",
    "version", "task", "dir", "files": {path: size}}]}``; ``ValueError`` when it is not."""
    try:
        data: Any = json.loads(path.read_text())
        url = str(data["registry"])
        found = {}
        for row in data["models"]:
            name = str(row["name"])
            if not _NAME.match(name):
                raise ValueError(f"bad model name {name!r}")
            sizes = tuple(sorted((str(p), int(n)) for p, n in dict(row["files"]).items()))
            found[name] = Entry(name, Path(row["dir"]), str(int(row["version"])),
                                str(row["task"]), sizes,
                                source=(url, str(row["model"]), int(row["version"])))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"--model_catalog {path} is not a model catalog: {exc}") from None
    return found


def signature(model_dir: Path) -> tuple[tuple[str, int, int], ...]:
    """What a model directory holds now (names, sizes, modification times): a failed load
    is tried again once it changes (a download that was still under way, a fixed file)."""
    found = []
    for path in sorted(model_dir.rglob("*")):
        try:
            stat = path.stat()
        except OSError:
            continue
        found.append((path.relative_to(model_dir).as_posix(), stat.st_size, stat.st_mtime_ns))
    return tuple(found)
