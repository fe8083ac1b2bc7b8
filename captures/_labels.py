"""One ground-truth label as a client sends it, checked, and as the label files hold it. Pure.

The feedback route (``predictor/feedback``) and ``modelctl feedback push``
(``accuracy``) take labels by the same rules, so the offline join cannot tell where a
label came from: each entry holds ``request_id``, the ``x-request-id`` the prediction
was answered with (a string of 1 to ``MAX_ID_CHARS`` characters), and ``label``, any
JSON value but null and without NaN or Infinity (a class, a value, a reference text,
or a list with one label per item). ``canonical_label`` is the text stored in the
label files' ``label`` column.
"""

from __future__ import annotations

import json
from typing import Any

from captures._errors import LabelError

MAX_ID_CHARS = 200
_KEYS = frozenset({"request_id", "label"})


def check_label(entry: object, where: str, *,
                optional: frozenset[str] = frozenset()) -> tuple[str, Any]:
    """The (request ID, label) of one entry; a LabelError starting with ``where`` (``the
    body``, ``labels[3]``, ``labels.jsonl line 7``) otherwise. ``optional``: keys an
    entry may hold besides the two (push's ``ts``); the caller reads them."""
    if not isinstance(entry, dict) or not _KEYS <= set(entry) <= _KEYS | optional:
        besides = (f", and at most {', '.join(repr(k) for k in sorted(optional))} besides"
                   if optional else "")
        exactly = "" if optional else "exactly "
        raise LabelError(f"{where} must hold {exactly}'request_id' and 'label'{besides}")
    rid = entry["request_id"]
    if not isinstance(rid, str) or not rid or len(rid) > MAX_ID_CHARS:
        raise LabelError(f"{where}: 'request_id' must be a string of 1 to {MAX_ID_CHARS} "
                         "characters")
    label = entry["label"]
    if label is None:
        raise LabelError(f"{where}: 'label' must not be null")
    try:
        canonical_label(label)
    except (TypeError, ValueError):
        raise LabelError(f"{where}: 'label' must be JSON (text, a number, true or false, a "
                         "list or an object) without NaN or Infinity") from None
    return rid, label


def canonical_label(value: Any) -> str:
    """The label as the label files store it: JSON, keys sorted, no spaces (ValueError
    for NaN or Infinity, TypeError for what JSON cannot hold)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                      allow_nan=False)
