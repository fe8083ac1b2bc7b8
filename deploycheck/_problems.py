"""One problem found in one document, printed as ``file:document:path: message``."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

JsonPath = tuple[str | int, ...]

_PLAIN_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]*$")


def format_path(path: Sequence[str | int]) -> str:
    """A JSONPath-like rendering: ``$.spec.containers[0]['serving.kserve.io/x']``."""
    out = ["$"]
    for part in path:
        if isinstance(part, int):
            out.append(f"[{part}]")
        elif _PLAIN_KEY.match(part):
            out.append(f".{part}")
        else:
            out.append(f"['{part}']")
    return "".join(out)


@dataclass(frozen=True)
class Problem:
    """What is wrong, and where: ``source`` is a file or kustomize directory, ``document``
    the 0-based index of the YAML document in that file (or in the rendered stream);
    ``rule`` names the check when it is one with a name (``kserve-webhook``)."""

    source: str
    document: int
    path: JsonPath
    message: str
    rule: str | None = None

    def __str__(self) -> str:
        line = f"{self.source}:{self.document}:{format_path(self.path)}: {self.message}"
        return f"{line} [{self.rule}]" if self.rule else line

    def to_dict(self) -> dict[str, object]:
        out: dict[str, object] = {
            "source": self.source,
            "document": self.document,
            "path": format_path(self.path),
            "message": self.message,
        }
        if self.rule:
            out["rule"] = self.rule
        return out


@dataclass(frozen=True)
class Finding:
    """A problem inside a document, before it is tied to a file and index."""

    path: JsonPath
    message: str
    rule: str | None = None
