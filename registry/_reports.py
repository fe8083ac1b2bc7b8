"""Evaluation reports kept next to a version: ``<root>/<model>/reports/<version>/<name>.json``.

A report (e.g. the shadow report that gates a rollout) is a JSON object. Unlike a
version it may be replaced: the latest evaluation wins, by compare-and-swap so two
writers never interleave. Reports are outside the version's directory, so they never
touch its manifest or checksums.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from registry._errors import InvalidName, ManifestError, StoreError
from registry._names import _name_problem
from registry._store import ArtifactStore

REPORTS_DIR = "reports"
_MAX_TRIES = 8


def report_key(model: str, version: int, name: str) -> str:
    problem = _name_problem(name)
    if problem is not None:
        raise InvalidName(f"invalid report name {name!r}: {problem}")
    return f"{model}/{REPORTS_DIR}/{version}/{name}.json"


def write_report(store: ArtifactStore, key: str, data: Mapping[str, Any]) -> None:
    payload = (json.dumps(dict(data), indent=2, sort_keys=True, default=str) + "\n").encode()
    for _ in range(_MAX_TRIES):
        _, token = store.read_with_token(key)
        if store.write_if(key, payload, token):
            return
    raise StoreError(f"report {store.url}/{key} kept changing while we wrote it; try again")


def read_report(store: ArtifactStore, key: str) -> dict[str, Any] | None:
    raw = store.read_bytes(key)
    if raw is None:
        return None
    try:
        data = json.loads(raw)
    except ValueError as exc:
        raise ManifestError(f"report {store.url}/{key} is not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ManifestError(f"report {store.url}/{key} is not a JSON object")
    return data
