"""Aliases (``stable``, ``canary``, …): one ``aliases.json`` per model, changed only
by compare-and-swap on the store, so two writers can never both win."""

from __future__ import annotations

import enum
import json
import random
import time
from typing import Any, Literal

from registry._errors import AliasConflict, ManifestError, NotFound
from registry._manifest import utc_now
from registry._names import check_alias
from registry._store import ArtifactStore

ALIASES_FILE = "aliases.json"
CAS_ATTEMPTS = 50  # re-reads after a lost write that did not touch *our* alias


class Expect(enum.Enum):
    """Sentinels for the ``expected`` argument of alias changes."""

    CURRENT = "current"
    """Whatever the alias is when the change starts: the change still fails if
    another writer moves it before ours lands."""


CURRENT = Expect.CURRENT
Expected = int | None | Literal[Expect.CURRENT]


def aliases_key(model: str) -> str:
    return f"{model}/{ALIASES_FILE}"


def parse_aliases(raw: bytes | None, where: str) -> tuple[dict[str, int], int]:
    """The alias table and its generation from an aliases.json (absent: empty, 0)."""
    if raw is None:
        return {}, 0
    try:
        doc: Any = json.loads(raw)
        table = doc["aliases"]
        generation = doc.get("generation", 0)
        if not isinstance(table, dict) or not isinstance(generation, int):
            raise TypeError("bad types")
        for alias, version in table.items():
            check_alias(alias)
            if isinstance(version, bool) or not isinstance(version, int) or version < 1:
                raise TypeError(f"bad version for {alias}")
    except Exception as exc:  # any defect at all means the file is corrupted
        raise ManifestError(f"corrupted alias file {where}: {exc}") from exc
    return dict(table), generation


def _render(table: dict[str, int], generation: int) -> bytes:
    # The generation makes every write's content (and so its ETag) unique.
    doc = {"aliases": dict(sorted(table.items())), "generation": generation, "updated": utc_now()}
    return (json.dumps(doc, indent=2, sort_keys=True) + "\n").encode()


def read_aliases(store: ArtifactStore, model: str) -> dict[str, int]:
    key = aliases_key(model)
    return parse_aliases(store.read_bytes(key), f"{store.url}/{key}")[0]


def _describe(version: int | None) -> str:
    return "unset" if version is None else f"version {version}"


def change_alias(
    store: ArtifactStore, model: str, alias: str, new: int | None, expected: Expected
) -> int | None:
    """Point ``alias`` at ``new`` (or remove it when None) if it is still
    ``expected``; returns the version it pointed at before.

    A write that loses to a change of some *other* alias is retried; a change of
    this alias by someone else is an AliasConflict.
    """
    key = aliases_key(model)
    where = f"{store.url}/{key}"
    snapshot = expected
    for attempt in range(CAS_ATTEMPTS):
        raw, token = store.read_with_token(key)
        table, generation = parse_aliases(raw, where)
        current = table.get(alias)
        if snapshot is CURRENT:
            snapshot = current
        if current != snapshot:
            raise AliasConflict(
                f"alias {alias!r} of {model} is {_describe(current)}, expected "
                f"{_describe(snapshot)}: someone else changed it; re-read and retry"
            )
        if new is None and current is None:
            raise NotFound(f"model {model} has no alias {alias!r}")
        if new == current:
            return current
        if new is None:
            del table[alias]
        else:
            table[alias] = new
        if store.write_if(key, _render(table, generation + 1), token):
            return current
        # Lost to a concurrent write (maybe to another alias): back off, re-read.
        time.sleep(random.uniform(0, 0.005 * 2 ** min(attempt, 6)))
    raise AliasConflict(
        f"gave up changing alias {alias!r} of {model} after {CAS_ATTEMPTS} attempts: "
        "too many concurrent alias changes"
    )
