"""The columns of the files the predictor writes, in order, with their Arrow types.

``CAPTURE_COLUMNS``: one record per answered request (docs/SHADOW.md describes each
column). ``LABEL_COLUMNS``: one ground-truth label per request ID, sent later through
the feedback route or pushed in bulk (docs/FEEDBACK.md). The one list of each: the
predictor writes by it, and every reader checks a file against it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pyarrow as pa

CAPTURE_COLUMNS: tuple[tuple[str, str], ...] = (
    ("request_id", "string"),
    ("ts", "timestamp[ms, tz=UTC]"),
    ("model", "string"),
    ("version", "string"),
    ("role", "string"),
    ("task", "string"),
    ("protocol", "string"),
    ("status", "int32"),
    ("latency_ms", "double"),
    ("items", "int32"),
    ("input_hash", "string"),
    ("input", "string"),
    ("output", "string"),
    ("error", "string"),
)


LABEL_COLUMNS: tuple[tuple[str, str], ...] = (
    ("request_id", "string"),  # the x-request-id of the prediction it labels
    ("ts", "timestamp[ms, tz=UTC]"),  # when the label arrived (the latest one counts)
    ("model", "string"),
    ("label", "string"),  # canonical JSON: a class, a value, a text, or one per item
    ("source", "string"),  # "api" (the feedback route) or "push" (modelctl feedback push)
)


def _schema(columns: tuple[tuple[str, str], ...]) -> pa.Schema:
    import pyarrow as pa

    types = {"string": pa.string(), "int32": pa.int32(), "double": pa.float64(),
             "timestamp[ms, tz=UTC]": pa.timestamp("ms", tz="UTC")}
    return pa.schema([(name, types[kind]) for name, kind in columns])


def capture_schema() -> pa.Schema:
    """The capture files' Parquet schema: ``CAPTURE_COLUMNS`` (pyarrow loads on first use)."""
    return _schema(CAPTURE_COLUMNS)


def label_schema() -> pa.Schema:
    """The label files' Parquet schema: ``LABEL_COLUMNS``."""
    return _schema(LABEL_COLUMNS)
