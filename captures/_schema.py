"""The capture files' columns, in order, each with its Arrow type as pyarrow names it.

docs/SHADOW.md describes each column. The one list: the predictor writes by it, and
every reader checks a file against it.
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


def capture_schema() -> pa.Schema:
    """The capture files' Parquet schema: ``CAPTURE_COLUMNS`` (pyarrow loads on first use)."""
    import pyarrow as pa

    types = {"string": pa.string(), "int32": pa.int32(), "double": pa.float64(),
             "timestamp[ms, tz=UTC]": pa.timestamp("ms", tz="UTC")}
    return pa.schema([(name, types[kind]) for name, kind in CAPTURE_COLUMNS])
