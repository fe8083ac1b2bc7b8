"""Request capture: one record per answered request, written as Parquet off the request path.

``CaptureSink.offer`` runs on the event loop after the response has gone out: it
appends the exchange to an in-memory buffer bounded in bytes, or drops it (counted in
``modelctl_capture_dropped_total{reason="buffer_full"}``) when the buffer is full.
A writer thread wakes every ``--capture_flush_s`` (or as soon as a file's worth has
arrived), turns the buffer into records (JSON parsing and hashing happen there, not
on the loop) and writes them as one or more Parquet files, each at most
``--capture_max_file_mb`` of raw record bytes. ``close`` flushes what is left
(SIGTERM).

Why Parquet and not JSON Lines: the shadow report reads millions of records but
only a few columns of each (ID, status, latency, output); Parquet is columnar,
typed and compressed (zstd), and DuckDB reads just those columns and skips row
groups by their statistics. Its one cost, a file being readable only once it is
closed, is why every flush closes its file: a record is readable within one flush
interval, and a killed process loses at most its unflushed buffer, never a file.

Layout and writer: ``captures.ParquetFiles``
(``<uri>/<model>/<role>/<YYYY-MM-DD>/<file>.parquet``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from captures import ParquetFiles
from predictor.tap._record import Identity, build_record

if TYPE_CHECKING:
    from predictor._config import ServerConfig
    from predictor._metrics import TapMetrics
    from predictor.tap._exchange import Exchange

logger = logging.getLogger("predictor")

MIB = 1024 * 1024
MIN_BUFFER_BYTES = 16 * MIB
_WARN_EVERY_S = 60.0


@dataclass(frozen=True)
class CaptureConfig:
    """Where records go and how they are batched (sizes in bytes of raw records)."""

    uri: str
    include_inputs: bool = False
    flush_s: float = 30.0
    max_file_bytes: int = 64 * MIB
    max_buffer_bytes: int = 128 * MIB

    def __post_init__(self) -> None:
        if not self.uri:
            raise ValueError("capture uri is empty")
        if self.flush_s <= 0 or self.max_file_bytes < 1 or self.max_buffer_bytes < 1:
            raise ValueError("flush_s, max_file_bytes and max_buffer_bytes must be > 0")

    @classmethod
    def from_server(cls, config: ServerConfig) -> CaptureConfig:
        file_bytes = max(1, int(config.capture_max_file_mb * MIB))
        # Two files' worth: one being written while the next one fills.
        return cls(uri=config.capture_uri, include_inputs=config.capture_inputs,
                   flush_s=config.capture_flush_s, max_file_bytes=file_bytes,
                   max_buffer_bytes=max(MIN_BUFFER_BYTES, 2 * file_bytes))


class CaptureSink:
    """A bounded buffer of exchanges and the thread that writes them out."""

    def __init__(self, config: CaptureConfig, identity: Identity, metrics: TapMetrics,
                 files: ParquetFiles | None = None) -> None:
        self.config = config
        self.identity = identity
        self._metrics = metrics
        self._files = files or ParquetFiles(config.uri, identity.model, identity.version)
        self._buffer: deque[Exchange] = deque()
        self._bytes = 0
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._closed = False
        self._thread: threading.Thread | None = None
        self._last_warning = 0.0
        labels = metrics.labels
        self._written = metrics.capture_records.labels(**labels)
        self._file_count = metrics.capture_files.labels(**labels)

    @property
    def buffered(self) -> int:
        return len(self._buffer)

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="capture-writer", daemon=True)
            self._thread.start()

    def offer(self, exchange: Exchange) -> None:
        """Buffer an answered request, or drop it (counted) when the buffer is full."""
        size = exchange.size_bytes
        with self._lock:
            if self._closed:
                reason = "closed"
            elif self._bytes + size > self.config.max_buffer_bytes:
                reason = "buffer_full"
            else:
                self._buffer.append(exchange)
                self._bytes += size
                if self._bytes >= self.config.max_file_bytes:
                    self._wake.set()
                return
        self._drop(reason)

    def close(self, timeout_s: float = 10.0) -> None:
        """Refuse new records, write what is buffered, stop the thread."""
        with self._lock:
            self._closed = True
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
            if self._thread.is_alive():
                logger.warning("capture: the last flush to %s did not finish in %.0f s",
                               self._files.uri, timeout_s)
        else:
            self.flush()

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(self.config.flush_s)
            self._wake.clear()
            self.flush()
        self.flush()

    def flush(self) -> int:
        """Write everything buffered now; returns the number of records written."""
        with self._lock:
            batch = list(self._buffer)
            self._buffer.clear()
            self._bytes = 0
        if not batch:
            return 0
        by_role: dict[str, list[tuple[dict[str, Any], int]]] = {}
        for exchange in batch:
            try:
                record = build_record(exchange, self.identity,
                                      with_input=self.config.include_inputs)
            except Exception:  # a bug must cost one record, not the writer thread
                logger.exception("capture: cannot record request %s", exchange.request_id)
                self._drop("error")
                continue
            by_role.setdefault(record["role"], []).append((record, exchange.size_bytes))
        written = 0
        for role, rows in by_role.items():
            for chunk in _chunks(rows, self.config.max_file_bytes):
                written += self._write(role, chunk)
        return written

    def _write(self, role: str, records: list[dict[str, Any]]) -> int:
        try:
            self._files.write(role, records)
        except Exception as exc:  # the store is down or refuses us: count, warn, go on
            self._drop("write_error", len(records))
            now = time.monotonic()
            if now - self._last_warning > _WARN_EVERY_S:
                self._last_warning = now
                first = (str(exc).strip().splitlines() or [""])[0][:200]
                logger.warning("capture: could not write %d records to %s: %s: %s",
                               len(records), self._files.uri, type(exc).__name__, first)
            return 0
        self._written.inc(len(records))
        self._file_count.inc()
        return len(records)

    def _drop(self, reason: str, count: int = 1) -> None:
        self._metrics.capture_dropped.labels(**self._metrics.labels, reason=reason).inc(count)


def _chunks(rows: list[tuple[dict[str, Any], int]], max_bytes: int) -> Iterator[
        list[dict[str, Any]]]:
    """Consecutive groups of records whose raw sizes add up to at most ``max_bytes``."""
    chunk: list[dict[str, Any]] = []
    size = 0
    for record, record_bytes in rows:
        if chunk and size + record_bytes > max_bytes:
            yield chunk
            chunk, size = [], 0
        chunk.append(record)
        size += record_bytes
    if chunk:
        yield chunk
