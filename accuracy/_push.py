"""``modelctl feedback push FILE``: ground-truth labels in bulk, into the label store.

FILE is JSON lines (one object a line; blank lines are skipped) or Parquet (told by
its magic bytes, whatever its name). Each row holds ``request_id`` and ``label`` and
may hold ``ts``, when the label became known (ISO 8601, naive meaning UTC, or
seconds since the epoch; a Parquet timestamp; absent or null: now). In Parquet a
``label`` column holds the values themselves (a string column is text, not JSON).

Every row is checked first, by the feedback route's own rules
(``captures.check_label``); one bad row stops the push, naming its line (JSON lines)
or row (Parquet), before anything is written. Then the labels are written by
``captures.ParquetFiles`` in the label schema, ``source`` ``push``, under
``<capture_uri>/<model>/labels/<day>/``, ``CHUNK_ROWS`` to a file: the offline join
reads them exactly as the route's. A store that fails part way keeps the files
already written; pushing the file again is harmless (the latest label of an ID counts).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from accuracy._errors import AccuracyError
from captures import (
    LABELS_ROLE,
    CaptureError,
    LabelError,
    ParquetFiles,
    canonical_label,
    check_label,
    label_schema,
    safe_uri,
)

SOURCE = "push"
CHUNK_ROWS = 100_000
MODEL_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*\Z")
_OPTIONAL = frozenset({"ts"})
_PARQUET_MAGIC = b"PAR1"


@dataclass(frozen=True)
class PushResult:
    """What a push wrote: how many labels, and the files (relative to the URI)."""

    model: str
    capture_uri: str
    written: int
    files: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"model": self.model, "capture_uri": self.capture_uri, "source": SOURCE,
                "written": self.written, "files": list(self.files)}


def check_model(model: str) -> None:
    """A model name that can be a path segment (and a label value in a route)."""
    if not MODEL_NAME.match(model):
        raise AccuracyError(f"invalid model name {model!r}: letters, digits, '.', '_' and "
                            "'-', starting with a letter or digit")


def check_target(capture_uri: str, model: str) -> None:
    """A model name that can be a path segment and a URI the label store can use."""
    check_model(model)
    scheme = capture_uri.split("://", 1)[0].lower() if "://" in capture_uri else "file"
    if scheme not in ("file", "s3", "s3a"):
        raise AccuracyError(f"capture URI {safe_uri(capture_uri)}: use a directory, file:// "
                            "or s3://")
    parts = urlsplit(capture_uri)
    if "://" in capture_uri and (parts.username or parts.password):
        raise AccuracyError("capture URI: put S3 credentials in AWS_* variables, not in the "
                            "URI")


def read_labels(path: Path, model: str, *, now: datetime) -> list[dict[str, Any]]:
    """The label files' records of every row of ``path``, each checked; a LabelError
    naming the first bad row."""
    records = []
    for where, row in _rows(path):
        rid, label = check_label(row, where, optional=_OPTIONAL)
        when = _time(row.get("ts"), where) or now
        records.append({"request_id": rid, "ts": when, "model": model,
                        "label": canonical_label(label), "source": SOURCE})
    if not records:
        raise LabelError(f"{path} holds no labels")
    return records


def push_labels(path: Path, capture_uri: str, model: str, *,
                now: datetime | None = None) -> PushResult:
    """Check every row of ``path``, then write them all as labels of ``model``."""
    check_target(capture_uri, model)
    records = read_labels(path, model, now=now or datetime.now(tz=UTC))
    files = ParquetFiles(capture_uri, model, SOURCE, schema=label_schema)
    written: list[str] = []
    for start in range(0, len(records), CHUNK_ROWS):
        try:
            written.append(files.write(LABELS_ROLE, records[start:start + CHUNK_ROWS]))
        except Exception as exc:  # fsspec and pyarrow raise many kinds: one line
            reason = (str(exc).strip().splitlines() or [""])[0][:300]
            raise CaptureError(f"cannot write labels to {files.uri}: {type(exc).__name__}: "
                               f"{reason} ({start} of {len(records)} written before)") \
                from None
    return PushResult(model, files.uri, len(records), tuple(written))


def _rows(path: Path) -> Iterator[tuple[str, Any]]:
    """(where, row) of every row: ``NAME line N`` of JSON lines, ``NAME row N`` of Parquet."""
    try:
        with path.open("rb") as handle:
            parquet = handle.read(4) == _PARQUET_MAGIC
    except OSError as exc:
        raise LabelError(f"cannot read {path}: {exc.strerror or exc}") from None
    if parquet:
        yield from _parquet_rows(path)
        return
    with path.open("rb") as handle:
        for number, raw in enumerate(handle, start=1):
            where = f"{path.name} line {number}"
            if not raw.strip():
                continue
            try:
                row = json.loads(raw)
            except (ValueError, UnicodeDecodeError) as exc:
                reason = exc.msg if isinstance(exc, json.JSONDecodeError) else "not UTF-8"
                raise LabelError(f"{where}: not JSON ({reason}); each line must be one "
                                 "object, {\"request_id\": ..., \"label\": ...}") from None
            yield where, row


def _parquet_rows(path: Path) -> Iterator[tuple[str, Any]]:
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path)
    except Exception as exc:  # pyarrow's ArrowInvalid and OSError: one line
        raise LabelError(f"{path} is not a readable Parquet file: {type(exc).__name__}") \
            from None
    columns = set(table.column_names)
    missing = [c for c in ("request_id", "label") if c not in columns]
    extra = sorted(columns - {"request_id", "label", "ts"})
    if missing or extra:
        raise LabelError(f"{path}: the columns must be request_id, label and optionally ts "
                         f"({'no ' + ', '.join(missing) if missing else ''}"
                         f"{'; ' if missing and extra else ''}"
                         f"{'also ' + ', '.join(extra) if extra else ''})")
    number = 0
    for batch in table.to_batches(max_chunksize=10_000):
        for row in batch.to_pylist():
            number += 1
            yield f"{path.name} row {number}", _drop_null_ts(row)


def _drop_null_ts(row: dict[str, Any]) -> dict[str, Any]:
    if "ts" in row and row["ts"] is None:
        del row["ts"]
    return row


def _time(value: Any, where: str) -> datetime | None:
    """A row's ``ts`` as an aware UTC time; None when it has none."""
    if value is None:
        return None
    if isinstance(value, datetime):
        return value.astimezone(UTC) if value.tzinfo else value.replace(tzinfo=UTC)
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        try:
            return datetime.fromtimestamp(float(value), tz=UTC)
        except (OverflowError, OSError, ValueError):
            pass
    elif isinstance(value, str):
        try:
            parsed = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
        except ValueError:
            pass
        else:
            return parsed.astimezone(UTC) if parsed.tzinfo else parsed.replace(tzinfo=UTC)
    raise LabelError(f"{where}: 'ts' must be ISO 8601 (2026-12-01T10:00:00Z) or seconds "
                     "since the epoch")
