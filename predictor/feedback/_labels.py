"""Ground-truth labels: what a feedback body holds, and a prediction judged against one. Pure.

A body is one label, ``{"request_id": ID, "label": L}``, or many, ``{"labels": [{...},
...]}`` (at most ``MAX_LABELS``). ``ID`` is the ``x-request-id`` the prediction was
answered with. ``L`` is the label of the request's one item (a class, a value, a
reference text), or a list with one label per item when the request had several.

Each entry is checked by ``captures.check_label``, the rules ``modelctl feedback push``
applies to each row too. An item is judged correct when its label equals the item's
value: a classification's ``label`` field, or the item itself (a generation's text, a
value), compared as canonical JSON (``captures.canonical_label``, the labels' stored form).
"""

from __future__ import annotations

import json
from typing import Any

from captures import LabelError, canonical_label, check_label
from predictor._errors import BadInput

MAX_LABELS = 1000


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
        try:
            out.append(check_label(entry, where))
        except LabelError as exc:
            raise BadInput(str(exc)) from None
    return out


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
                  if _canonical(_value(item)) == canonical_label(want))
    return len(items), correct


def _canonical(value: Any) -> str:
    """An answer's value as a label would be stored (an answer may hold a NaN score)."""
    try:
        return canonical_label(value)
    except ValueError:
        return ""


def _value(item: Any) -> Any:
    if isinstance(item, dict) and "label" in item:  # a classification: its label
        return item["label"]
    return item
