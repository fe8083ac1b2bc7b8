"""Captures: the data the predictor writes and the evaluators read, and where it lives.

One schema, one place. The predictor's tap writes one capture record per answered
request (``CAPTURE_COLUMNS``), and the feedback route one label per request ID
(``LABEL_COLUMNS``); ``shadow`` (and, next, feedback reports) read them, joined by
request ID. Both sides import this package, which imports neither: the arrow from
offline evaluation to the server stays out. ``_schema`` holds the columns and their
Arrow types; ``_storage`` the URIs (a directory, ``file://`` or ``s3://``), the S3
filesystem from the standard ``AWS_*`` variables, and ``ParquetFiles``, the writer of
``<uri>/<model>/<role>/<day>/<file>.parquet`` (labels: the role ``labels``).
"""

from captures._schema import CAPTURE_COLUMNS, LABEL_COLUMNS, capture_schema, label_schema
from captures._storage import (
    LABELS_ROLE,
    CaptureSetupError,
    ParquetFiles,
    is_label_file,
    s3_filesystem,
    safe_uri,
)

__all__ = [
    "CAPTURE_COLUMNS",
    "LABELS_ROLE",
    "LABEL_COLUMNS",
    "CaptureSetupError",
    "ParquetFiles",
    "capture_schema",
    "is_label_file",
    "label_schema",
    "s3_filesystem",
    "safe_uri",
]
