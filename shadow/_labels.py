"""Each side's accuracy against ground-truth labels, when labels exist (docs/FEEDBACK.md).

Agreement says how often the shadow answers like the primary, not which one is right.
Where labels have come in beside the primary's captures (the feedback route, or
``modelctl feedback push``), the shadow report also scores both sides against them:
the accuracy report's own join (``accuracy.build_accuracy_report``), once over the
primary's captures and once over the shadow's, with the primary's labels. A request
mirrored to the shadow has the primary's request ID, so one label scores both answers.
No labels (or none of the model): no accuracy, the report is as before. Informational:
no check is made of it, since a label may judge only a part of the pairs.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from accuracy import AccuracyError, AccuracyRequest, build_accuracy_report
from captures import CaptureError


def label_accuracy(model: str, primary_uri: str, shadow_uri: str, *,
                   since: datetime | None, until: datetime | None,
                   shadow_version: str | None, memory_limit_mb: int,
                   now: datetime) -> dict[str, Any] | None:
    """``{"primary": {...}, "shadow": {...}}`` (labelled requests and items, correct,
    accuracy), or None when the primary's captures have no labels of ``model``; a side
    none of whose answers is labelled is left out."""
    out: dict[str, Any] = {}
    docs: dict[str, dict[str, Any]] = {}  # by captures URI: one join when both share it
    for side, uri in (("primary", primary_uri), ("shadow", shadow_uri)):
        request = AccuracyRequest(model, uri, since, until, memory_limit_mb=memory_limit_mb,
                                  labels_uri=primary_uri)
        try:
            doc = docs.get(uri) or build_accuracy_report(request, now=now)
        except (CaptureError, AccuracyError):  # no labels, none of the model, none matched
            if side == "primary":
                return None
            continue
        docs[uri] = doc
        groups = [g for g in doc["groups"] if (g["role"] == "shadow") == (side == "shadow")
                  and (side == "primary" or shadow_version in (None, g["version"]))]
        items = sum(int(g["items"]) for g in groups)
        if items:
            correct = sum(int(g["correct"]) for g in groups)
            out[side] = {"versions": [g["version"] for g in groups],
                         "requests": sum(int(g["requests"]) for g in groups),
                         "items": items, "correct": correct, "accuracy": correct / items}
    return out or None
