"""Reading captures and labels: the files under a capture URI, opened in DuckDB.

A capture URI is a local directory, ``file://``, ``s3://bucket/prefix``, or one
``.parquet`` file; every ``*.parquet`` under it is read (the predictor writes
``<model>/<role>/<day>/<file>.parquet``; ``.tmp`` files being written are not
matched). The label files beside them, ``<model>/labels/...``, are read apart:
``find_captures`` skips them, ``find_captures(..., labels=True)`` finds only them.
S3 goes through s3fs, registered with DuckDB as an fsspec filesystem, so no DuckDB
extension has to be downloaded; endpoint and keys come from the usual AWS variables.

Why DuckDB: the shadow and accuracy reports are joins by request ID plus aggregates,
which is what DuckDB's streaming, out-of-core engine does over Parquet without
loading it: it reads only the columns a query names, spills the join and aggregate
state to disk past ``memory_limit`` and runs on every core. pandas or pyarrow would
hold the whole join in memory; a hand-written merge would need both sides sorted.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from captures._errors import CaptureError
from captures._schema import CAPTURE_COLUMNS, LABEL_COLUMNS
from captures._storage import is_label_file, s3_filesystem, safe_uri

_MAGIC = b"PAR1"


@dataclass(frozen=True)
class CaptureSource:
    """The Parquet files under one capture URI."""

    uri: str  # as given, without credentials
    files: tuple[str, ...]  # paths DuckDB can open (local paths or s3://...)
    fs: Any = None  # the fsspec filesystem for remote files, None for local


def find_captures(uri: str, side: str = "", *, labels: bool = False) -> CaptureSource:
    """Every capture file under ``uri`` (``labels``: every label file instead); a
    CaptureError if there is none. ``side`` (``primary``, ``shadow``) starts messages."""
    shown = safe_uri(uri)
    what = f"{side} capture".lstrip()
    if "://" not in uri or uri.lower().startswith("file://"):
        root = Path(uri[len("file://"):] if uri.lower().startswith("file://") else uri)
        root = root.expanduser()
        if root.is_file():
            files = [str(root)]
        elif root.is_dir():
            files = sorted(str(p) for p in root.rglob("*.parquet")
                           if p.is_file() and is_label_file(str(p)) == labels)
        else:
            raise CaptureError(f"{what} {shown} does not exist")
        fs = None
    else:
        parts = urlsplit(uri)
        if parts.scheme.lower() not in ("s3", "s3a"):
            raise CaptureError(f"{what} {shown}: use a directory, file:// or s3://")
        if parts.username or parts.password:
            raise CaptureError(f"{what}: put S3 credentials in AWS_* variables, not in the URI")
        fs = s3_filesystem(listings_cache=False)
        root_key = f"{parts.hostname}{parts.path}".rstrip("/")
        try:
            if root_key.endswith(".parquet") and fs.isfile(root_key):
                found = [root_key]
            else:
                found = [p for p in fs.find(root_key)
                         if p.endswith(".parquet") and is_label_file(p) == labels]
        except Exception as exc:  # s3fs raises many kinds: one line, no secrets
            raise CaptureError(f"cannot list {what} {shown}: {type(exc).__name__}: "
                               f"{_first_line(exc)}") from None
        files = sorted(f"s3://{p}" for p in found)
    if not files:
        kind = "label files (<model>/labels/...)" if labels else ".parquet capture files"
        raise CaptureError(f"{what} {shown} holds no {kind}")
    return CaptureSource(shown, tuple(files), fs)


def connect_duckdb(sources: Sequence[CaptureSource], *, memory_limit_mb: int,
                   temp_dir: str | None = None) -> Any:
    """A DuckDB connection with bounded memory that can read every source."""
    import duckdb

    con = duckdb.connect(":memory:")
    spill = temp_dir or tempfile.gettempdir()
    con.execute(f"SET memory_limit='{int(memory_limit_mb)}MB'")
    con.execute(f"SET temp_directory='{_sql_text(os.path.join(spill, 'modelctl-duckdb'))}'")
    con.execute("SET preserve_insertion_order=false")
    # Its progress bar writes to stdout, which must hold nothing but the report.
    con.execute("SET enable_progress_bar=false")
    # One filesystem per protocol: DuckDB routes s3:// paths by name, and every S3
    # source is configured from the same environment.
    registered: set[str] = set()
    for source in sources:
        if source.fs is not None and source.fs.protocol[0] not in registered:
            con.register_filesystem(source.fs)
            registered.add(source.fs.protocol[0])
    return con


def parquet_scan(source: CaptureSource, *, file_order: bool = False) -> str:
    """The SQL table expression reading every file of ``source``; ``file_order`` adds the
    columns ``filename`` and ``file_row_number`` (which of two equal times came later)."""
    files = ", ".join(f"'{_sql_text(f)}'" for f in source.files)
    extra = ", filename=true, file_row_number=true" if file_order else ""
    return f"read_parquet([{files}], union_by_name=true{extra})"


def check_columns(con: Any, source: CaptureSource, side: str = "", *,
                  labels: bool = False) -> None:
    """The files have every column the predictor writes (``CAPTURE_COLUMNS``; with
    ``labels``, ``LABEL_COLUMNS``), else a CaptureError naming what is missing."""
    try:
        described = con.execute(f"DESCRIBE SELECT * FROM {parquet_scan(source)}").fetchall()
    except Exception as exc:
        raise explain_read_error(exc, source, side) from None
    have = {row[0] for row in described}
    missing = ", ".join(name for name, _ in (LABEL_COLUMNS if labels else CAPTURE_COLUMNS)
                        if name not in have)
    if missing:
        what = f"{side} capture".lstrip()
        if labels:
            raise CaptureError(f"the label files of {what} {source.uri} are not modelctl "
                               f"labels (no column {missing})")
        raise CaptureError(f"{what} {source.uri} is not a modelctl capture (no column "
                           f"{missing})")


def explain_read_error(exc: BaseException, source: CaptureSource, side: str = "") -> CaptureError:
    """Turn a DuckDB read failure into one line, naming a truncated file when there is one."""
    what = f"{side} capture".lstrip()
    bad = _first_broken_file(source)
    if bad is not None:
        return CaptureError(f"{what} file {bad} is truncated or not Parquet (no "
                            "Parquet footer): remove it or capture again")
    return CaptureError(f"cannot read {what} {source.uri}: {_first_line(exc)}")


def _first_broken_file(source: CaptureSource) -> str | None:
    """The first file without Parquet's magic bytes at both ends (a cut-off write)."""
    for path in source.files:
        try:
            if source.fs is None:
                size = os.path.getsize(path)
                with open(path, "rb") as handle:
                    head = handle.read(4)
                    handle.seek(max(0, size - 4))
                    tail = handle.read(4)
            else:
                key = path[len("s3://"):]
                size = int(source.fs.size(key))
                head = source.fs.cat_file(key, start=0, end=4)
                tail = source.fs.cat_file(key, start=max(0, size - 4), end=size)
        except OSError:
            return path
        if size < 12 or head != _MAGIC or tail != _MAGIC:
            return path
    return None


def _sql_text(text: str) -> str:
    return text.replace("'", "''")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return (text.splitlines()[0] if text else type(exc).__name__)[:300]
