"""Where captures live: a directory, ``file://`` or ``s3://bucket/prefix``, and the writer.

``ParquetFiles`` writes record batches as Parquet files (zstd) under
``<uri>/<model>/<role>/<YYYY-MM-DD>/<HHMMSS>-v<version>-<host>-<pid>-<rand>-<n>.parquet``;
labels are the role ``labels`` (``is_label_file`` tells readers of captures to skip them).
Local files are written under a ``.tmp`` name and renamed, so a reader never sees a
partial file; on S3 an object appears only when its upload completes. S3 goes through
s3fs, configured from the standard ``AWS_*`` variables, never from the URI.
"""

from __future__ import annotations

import os
import re
import secrets
import socket
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from captures._errors import CaptureSetupError
from captures._schema import capture_schema

# Label files live beside the captures, as the role ``labels``: <uri>/<model>/labels/...
LABELS_ROLE = "labels"


def is_label_file(path: str) -> bool:
    """Whether a Parquet file under a capture URI holds labels, not capture records."""
    parts = path.replace("\\", "/").split("/")
    return len(parts) >= 4 and parts[-3] == LABELS_ROLE


def safe_uri(uri: str) -> str:
    """The URI without any user:password part, for logs and messages."""
    if "://" not in uri:
        return uri
    parts = urlsplit(uri)
    host = parts.hostname or ""
    port = f":{parts.port}" if parts.port else ""
    return f"{parts.scheme}://{host}{port}{parts.path}"


class ParquetFiles:
    """Writes record batches as Parquet files under a local directory or an S3 prefix."""

    def __init__(self, uri: str, model: str, version: str, *,
                 schema: Callable[[], Any] = capture_schema) -> None:
        """``schema``: the files' Arrow schema (captures by default; ``label_schema`` for
        the label files, written with role ``LABELS_ROLE``)."""
        self.uri = safe_uri(uri).rstrip("/")
        self._model = model
        self._schema = schema
        self._fs, self._root, self._local = _open_fs(uri)
        host = re.sub(r"[^A-Za-z0-9_.-]", "_", socket.gethostname())[:40] or "host"
        # The random part keeps names unique across restarts (a container's pid is 1).
        self._stem = f"v{version}-{host}-{os.getpid()}-{secrets.token_hex(3)}"
        self._seq = 0
        if self._local:
            try:
                Path(self._root).mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise CaptureSetupError(f"cannot create the capture directory {self._root}: "
                                        f"{exc.strerror or exc}") from exc

    def write(self, role: str, records: Sequence[dict[str, Any]]) -> str:
        """Write one file; returns its path (relative to the capture URI)."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        now = datetime.now(tz=UTC)
        self._seq += 1
        rel = (f"{self._model}/{role}/{now:%Y-%m-%d}/"
               f"{now:%H%M%S}-{self._stem}-{self._seq:06d}.parquet")
        table = pa.Table.from_pylist(list(records), schema=self._schema())
        path = f"{self._root}/{rel}"
        if self._local:
            target = Path(path)
            target.parent.mkdir(parents=True, exist_ok=True)
            tmp = target.with_name(target.name + ".tmp")
            pq.write_table(table, str(tmp), compression="zstd")
            os.replace(tmp, target)
        else:
            with self._fs.open(path, "wb") as handle:
                pq.write_table(table, handle, compression="zstd")
        return rel


def _open_fs(uri: str) -> tuple[Any, str, bool]:
    """(filesystem, root path, is local) for a directory, file:// or s3:// URI."""
    if "://" not in uri or uri.lower().startswith("file://"):
        path = uri[len("file://"):] if uri.lower().startswith("file://") else uri
        return None, str(Path(path).expanduser().absolute()), True
    parts = urlsplit(uri)
    fs = s3_filesystem()
    return fs, f"{parts.hostname}{parts.path}".rstrip("/"), False


def s3_filesystem(*, listings_cache: bool = True) -> Any:
    """s3fs for the capture bucket, from the standard ``AWS_*`` variables (endpoint,
    region, credentials: never from the URI), with bounded timeouts and retries."""
    import s3fs

    endpoint = next((os.environ[n].strip() for n in ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL")
                     if os.environ.get(n, "").strip()), None)
    region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
    options: dict[str, Any] = {} if listings_cache else {"use_listings_cache": False}
    return s3fs.S3FileSystem(
        endpoint_url=endpoint,
        client_kwargs={"region_name": region or "us-east-1"} if (region or endpoint) else {},
        config_kwargs={"connect_timeout": 5, "read_timeout": 60,
                       "retries": {"max_attempts": 3, "mode": "standard"}},
        skip_instance_cache=True, **options,
    )
