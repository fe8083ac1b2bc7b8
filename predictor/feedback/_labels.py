"""Ground-truth labels: what a feedback body holds, and a prediction judged against one. Pure.

A body is one label, ``{"request_id": ID, "label": L}``, or many, ``{"labels": [{...},
...]}`` (at most ``MAX_LABELS``). ``ID`` is the ``x-request-id`` the prediction was
answered with. ``L`` is the label of the request's one item (a class, a value, a
reference text), or a list with one label per item when the request had several.

An item is judged correct when its label equals the item's value: a classification's
``label`` field, or the item itself (a generation's text, a value), compared as
canonical JSON.
"""

from __future__ import annotations

import json
from typing import Any

from predictor._errors import BadInput

MAX_LABELS = 1000
MAX_ID_CHARS = 200


def parse_labels(body: bytes) -> list[tuple[str, Any]]:
    """The (request ID, label) pairs of a feedback body; BadInput naming the problem."""
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        raise BadInput("the body must be JSON: {\"request_id\": ..., \"label\": ...} or "
                       "{\"labels\": [...]}") from None
    if isinstance(data, dict) and set(data) == {"labels"}:
        entries = data["labels"]
        if not isinstance(entries, list) or not entries:
            raise BadInput("'labels' must be a non-empty list")
    elif isinstance(data, dict):
        entries = [data]
    else:
        raise BadInput("the body must be an object")
    if len(entries) > MAX_LABELS:
        raise BadInput(f"at most {MAX_LABELS} labels a request, got {len(entries)}")
    out = []
    for index, entry in enumerate(entries):
        where = f"labels[{index}]" if len(entries) > 1 or "labels" in data else "the body"
        if not isinstance(entry, dict) or set(entry) != {"request_id", "label"}:
            raise BadInput(f"{where} must hold exactly 'request_id' and 'label'")
        rid = entry["request_id"]
        if not isinstance(rid, str) or not rid or len(rid) > MAX_ID_CHARS:
            raise BadInput(f"{where}: 'request_id' must be a string of 1 to {MAX_ID_CHARS} "
                           "characters")
        if entry["label"] is None:
            raise BadInput(f"{where}: 'label' must not be null")
        out.append((rid, entry["label"]))
    return out


def canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def judge(items: list[Any], label: Any) -> tuple[int, int] | None:
    """(items labelled, items correct) of a prediction's items against ``label``; None
    when they cannot be compared (a list of labels of another length)."""
    if len(items) == 1:
        labels = label if isinstance(label, list) and len(label) == 1 else [label]
    elif isinstance(label, list) and len(label) == len(items):
        labels = label
    else:
        return None
    correct = sum(1 for item, want in zip(items, labels, strict=True)
                  if canonical(_value(item)) == canonical(want))
    return len(items), correct


def _value(item: Any) -> Any:
    if isinstance(item, dict) and "label" in item:  # a classification: its label
        return item["label"]
    return item
