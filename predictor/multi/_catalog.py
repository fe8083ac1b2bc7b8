"""The models a multi-model predictor knows: every subdirectory of ``--model_dir`` that
holds a ``MANIFEST.json``, named by the subdirectory.

That is the layout KServe's model agent writes for TrainedModels
(``/mnt/models/<TrainedModel name>/``, one directory per model, added and removed while
the server runs) and that ``modelctl serve --model`` writes from the registry. The
directory is read again whenever a name is asked for that it did not hold, and by the
repository index, so a model added later is found without a restart. A directory whose
manifest cannot be read is listed, UNAVAILABLE with the reason.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

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
