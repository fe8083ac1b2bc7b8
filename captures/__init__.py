"""Captures: the data the predictor writes and the evaluators read, and where it lives.

One schema, one place. The predictor's tap writes one capture record per answered
request (``CAPTURE_COLUMNS``), and the feedback route (or ``modelctl feedback push``)
one label per request ID (``LABEL_COLUMNS``); ``shadow`` and ``accuracy`` read them,
joined by request ID. Both sides import this package, which imports neither: the arrow
from offline evaluation to the server stays out. ``_schema`` holds the columns and
their Arrow types; ``_storage`` the URIs (a directory, ``file://`` or ``s3://``), the
S3 filesystem from the standard ``AWS_*`` variables, and ``ParquetFiles``, the writer
of ``<uri>/<model>/<role>/<day>/<file>.parquet`` (labels: the role ``labels``);
``_labels`` the rules a label must meet and its stored form; ``_read`` the readers'
side: the files under a URI, opened in DuckDB; ``_errors`` the error branch.
"""

from captures._errors import CaptureError, CaptureSetupError, LabelError
from captures._labels import MAX_ID_CHARS, canonical_label, check_label
from captures._read import (
    CaptureSource,
    check_columns,
    connect_duckdb,
    explain_read_error,
    find_captures,
    parquet_scan,
)
from captures._schema import CAPTURE_COLUMNS, LABEL_COLUMNS, capture_schema, label_schema
from captures._storage import (
    LABELS_ROLE,
    ParquetFiles,
    is_label_file,
    s3_filesystem,
    safe_uri,
)

__all__ = [
    "CAPTURE_COLUMNS",
    "LABELS_ROLE",
    "LABEL_COLUMNS",
    "MAX_ID_CHARS",
    "CaptureError",
    "CaptureSetupError",
    "CaptureSource",
    "LabelError",
    "ParquetFiles",
    "canonical_label",
    "capture_schema",
    "check_columns",
    "check_label",
    "connect_duckdb",
    "explain_read_error",
    "find_captures",
    "is_label_file",
    "label_schema",
    "parquet_scan",
    "s3_filesystem",
    "safe_uri",
]
