"""Pushing a directory: check the source, claim a version number, stream the files
up while hashing them, and commit by writing the manifest last."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from registry._checksum import Digest
from registry._errors import ManifestError, SourceError, StoreError
from registry._manifest import MANIFEST_NAME, FileEntry, check_relpath, utc_now
from registry._progress import NO_PROGRESS, Progress, observing
from registry._store import ArtifactStore

CLAIMS_DIR = "_claims"
CLAIM_ATTEMPTS = 1000  # each failed attempt means another pusher took that number

T = TypeVar("T")
R = TypeVar("R")


def version_key(model: str, version: int) -> str:
    return f"{model}/{version}"


def manifest_key(model: str, version: int) -> str:
    return f"{model}/{version}/{MANIFEST_NAME}"


def claim_key(model: str, version: int) -> str:
    return f"{model}/{CLAIMS_DIR}/{version}"


@dataclass(frozen=True)
class SourceFile:
    """One file to push: its path in the version, where it is, and its size."""

    rel: str
    path: Path
    size: int


def _inside(path: Path, root: Path) -> bool:
    return path == root or path.is_relative_to(root)


def _check_link(link: Path, root: Path, rel: str) -> Path:
    """Where a symlink in the source points; it must stay inside the source."""
    target = link.resolve()
    if not _inside(target, root):
        raise SourceError(f"symlink {rel} points outside the source directory (to {target})")
    return target


def scan_source(src_dir: Path) -> list[SourceFile]:
    """Every file to push, or a SourceError naming what makes the source unsafe."""
    if not src_dir.exists():
        raise SourceError(f"source directory {src_dir} does not exist")
    if not src_dir.is_dir():
        raise SourceError(f"source {src_dir} is not a directory")
    root = src_dir.resolve()
    if (root / MANIFEST_NAME).exists() or (root / MANIFEST_NAME).is_symlink():
        raise SourceError(
            f"source {src_dir} contains {MANIFEST_NAME}: the registry writes that file "
            "itself; remove it (e.g. when re-pushing a pulled version)"
        )
    files: list[SourceFile] = []
    for dirpath, dirnames, filenames in os.walk(root):
        here = Path(dirpath)
        for name in dirnames:
            if (here / name).is_symlink():
                rel = (here / name).relative_to(root).as_posix()
                _check_link(here / name, root, rel)
                raise SourceError(f"symlinked directory {rel} is not supported: copy it instead")
        for name in filenames:
            path = here / name
            rel = path.relative_to(root).as_posix()
            try:
                check_relpath(rel)
            except ManifestError as exc:
                raise SourceError(f"cannot push file {rel!r}: {exc}") from exc
            real = _check_link(path, root, rel) if path.is_symlink() else path
            if not real.is_file():
                raise SourceError(f"{rel} is not a regular file (or a dangling symlink)")
            if not os.access(real, os.R_OK):
                raise SourceError(f"{rel} is not readable")
            files.append(SourceFile(rel, real, real.stat().st_size))
    if not files:
        raise SourceError(f"source directory {src_dir} is empty")
    return sorted(files, key=lambda f: f.rel)


def _claim_record() -> bytes:
    """Who claimed a number: for people reading a stuck claim, never parsed."""
    owner = {"host": socket.gethostname(), "pid": os.getpid(), "token": uuid.uuid4().hex,
             "claimed": utc_now()}
    return json.dumps(owner, sort_keys=True).encode()


def claim_version(store: ArtifactStore, model: str) -> int:
    """Atomically reserve the next free version number of ``model``.

    Each number is claimed by an exclusive create of ``_claims/<n>``; whoever
    loses a number moves on to the next, so concurrent pushes never share one.
    """
    names = store.list_dir(f"{model}/{CLAIMS_DIR}") + store.list_dir(model)
    candidate = max((int(n) for n in names if n.isdigit()), default=0) + 1
    for _ in range(CLAIM_ATTEMPTS):
        key = claim_key(model, candidate)
        if store.create_exclusive(key, _claim_record()):
            # A store that silently ignores exclusive create would let two pushes
            # share a number; catch that instead of corrupting a version.
            if store.create_exclusive(key, b"probe"):
                raise StoreError(
                    f"the store at {store.url} ignored an exclusive create (S3 "
                    "If-None-Match): it cannot keep versions immutable"
                )
            return candidate
        candidate += 1
    raise StoreError(f"could not claim a version of {model} after {CLAIM_ATTEMPTS} attempts")


def run_parallel(func: Callable[[T], R], items: Sequence[T], threads: int) -> list[R]:
    """``func`` over ``items`` on a thread pool, results in order; the first error
    cancels what has not started and is raised once the running ones finish."""
    with ThreadPoolExecutor(max_workers=max(1, min(threads, len(items)))) as pool:
        futures: list[Future[R]] = [pool.submit(func, item) for item in items]
        try:
            return [f.result() for f in futures]
        except BaseException:
            for f in futures:
                f.cancel()
            raise


def upload_files(
    store: ArtifactStore, model: str, version: int, files: Sequence[SourceFile],
    progress: Progress = NO_PROGRESS,
) -> dict[str, FileEntry]:
    """Stream every file into the version, hashing on the way; returns the entries."""
    progress.begin(len(files), sum(f.size for f in files))

    def upload(item: SourceFile) -> tuple[str, FileEntry]:
        digest = Digest()
        store.put_file(item.path, f"{version_key(model, version)}/{item.rel}",
                       observing(digest, progress))
        progress.file_done()
        return item.rel, digest.entry()

    # Largest first, so the big files overlap instead of finishing last.
    ordered = sorted(files, key=lambda f: -f.size)
    return dict(sorted(run_parallel(upload, ordered, store.transfer_threads)))


def abandon(store: ArtifactStore, model: str, version: int) -> None:
    """Best-effort removal of a version whose push failed before its manifest.

    The claim goes only after the files are gone, so a number is reused only
    when nothing of the failed push remains under it.
    """
    # Swallow clean-up errors: the push's own error is the one to report.
    with contextlib.suppress(Exception):
        store.delete_tree(version_key(model, version))
        store.delete_tree(claim_key(model, version))
