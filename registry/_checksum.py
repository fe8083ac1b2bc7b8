"""Streaming sha256: hash while copying, and check a local directory against a manifest.

Files are read in fixed chunks into one reused buffer, never whole, so memory
stays flat whatever the artifact size.
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from registry._manifest import MANIFEST_NAME, FileEntry, Manifest

CHUNK_BYTES = 8 * 1024 * 1024
EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()
HASH_THREADS = 4  # hashlib releases the GIL on large buffers, so threads add cores

Observer = Callable[[memoryview], None]
"""Called with each chunk as it streams past (e.g. a hash's ``update``)."""


class Digest:
    """A running sha256 and byte count, fed chunk by chunk."""

    def __init__(self) -> None:
        self._sha = hashlib.sha256()
        self.size = 0

    def update(self, chunk: memoryview | bytes) -> None:
        self._sha.update(chunk)
        self.size += len(chunk)

    def hexdigest(self) -> str:
        return self._sha.hexdigest()

    def entry(self) -> FileEntry:
        return FileEntry(self.hexdigest(), self.size)


_local = threading.local()


def _chunk_buffer() -> tuple[bytearray, memoryview]:
    """This thread's reusable chunk buffer: allocating (and zeroing) 8 MiB per
    file would cost more than copying a small file."""
    if not hasattr(_local, "buf"):
        _local.buf = bytearray(CHUNK_BYTES)
        _local.view = memoryview(_local.buf)
    return _local.buf, _local.view


def copy_stream(src: Path, dst: Path, observe: Observer) -> None:
    """Copy ``src`` to ``dst`` (created or truncated) in chunks, showing each to ``observe``."""
    buf, view = _chunk_buffer()
    with open(src, "rb") as fin, open(dst, "wb") as fout:
        while True:
            n = fin.readinto(buf)
            if not n:
                break
            observe(view[:n])
            fout.write(view[:n])


def scan_stream(src: Path, observe: Observer) -> None:
    """Read ``src`` in chunks, showing each to ``observe``."""
    buf, view = _chunk_buffer()
    with open(src, "rb") as fin:
        while True:
            n = fin.readinto(buf)
            if not n:
                break
            observe(view[:n])


def hash_file(path: Path) -> FileEntry:
    """sha256 and size of a local file, streamed."""
    digest = Digest()
    scan_stream(path, digest.update)
    return digest.entry()


def compare(path: str, expected: FileEntry, actual: FileEntry) -> str | None:
    """The problem with one file, or None if it matches."""
    if actual.size != expected.size:
        return f"{path}: size is {actual.size} bytes, the manifest says {expected.size}"
    if actual.sha256 != expected.sha256:
        return (
            f"{path}: sha256 mismatch (manifest {expected.sha256[:12]}…, "
            f"file {actual.sha256[:12]}…)"
        )
    return None


def extra_problems(present: Iterable[str], manifest: Manifest,
                   extra_ok: Callable[[str], bool] | None = None) -> list[str]:
    """Files that exist but are not in the manifest (the manifest itself excepted, and
    those ``extra_ok`` accepts)."""
    return [
        f"{path}: extra file, not in the manifest"
        for path in sorted(set(present) - set(manifest.files) - {MANIFEST_NAME})
        if extra_ok is None or not extra_ok(path)
    ]


def list_local_files(root: Path) -> list[str]:
    """Every file under ``root`` as a relative POSIX path (symlinks followed)."""
    found: list[str] = []
    for dirpath, _dirs, names in os.walk(root, followlinks=True):
        rel_dir = Path(dirpath).relative_to(root)
        found.extend((rel_dir / name).as_posix() for name in names)
    return sorted(found)


def verify_dir(
    path: str | Path, manifest: Manifest, *, missing_empty_ok: bool = False,
    extra_ok: Callable[[str], bool] | None = None,
) -> list[str]:
    """Recompute every checksum of a local copy of a version; problems by file name.

    A missing file, a file whose size or sha256 differs, and a file the manifest
    does not list are each one line; an empty list means the copy is exact.

    ``missing_empty_ok`` accepts a missing file whose manifest entry is the empty
    file (size 0, the sha256 of no bytes): copies made by downloaders that skip
    zero-byte objects, such as KServe's storage initializer, lack them. A size-0
    file that is present is checked all the same. ``extra_ok`` accepts files a
    downloader adds that are not the version's (KServe's model agent's success marker).
    """
    root = Path(path)
    if not root.is_dir():
        return [f"{root}: not a directory"]
    problems = extra_problems(list_local_files(root), manifest, extra_ok)

    def check(item: tuple[str, FileEntry]) -> str | None:
        rel, expected = item
        local = root / rel
        try:
            if local.stat().st_size != expected.size:
                return compare(rel, expected, FileEntry(expected.sha256, local.stat().st_size))
            return compare(rel, expected, hash_file(local))
        except FileNotFoundError:
            if not (missing_empty_ok and expected.size == 0):
                return f"{rel}: missing"
            if expected.sha256 != EMPTY_SHA256:
                return (f"{rel}: missing, and the manifest records 0 bytes with a sha256 "
                        f"({expected.sha256[:12]}…) that is not the empty file's")
            return None
        except OSError as exc:
            return f"{rel}: unreadable ({exc.strerror or exc})"

    with ThreadPoolExecutor(max_workers=HASH_THREADS) as pool:
        problems.extend(p for p in pool.map(check, sorted(manifest.files.items())) if p)
    return sorted(problems)
