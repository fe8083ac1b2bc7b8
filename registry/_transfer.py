"""Checking a stored version, and fetching one into a local directory safely."""

from __future__ import annotations

import errno
import shutil
import uuid
from pathlib import Path

from registry._checksum import Digest, compare, extra_problems
from registry._errors import RegistryError, VerificationFailed
from registry._manifest import MANIFEST_NAME, FileEntry, Manifest
from registry._progress import NO_PROGRESS, Progress, observing
from registry._push import run_parallel, version_key
from registry._store import ArtifactStore


def verify_stored(store: ArtifactStore, manifest: Manifest,
                  progress: Progress = NO_PROGRESS) -> list[str]:
    """Recompute every checksum of a version in the store; problems by file name."""
    prefix = version_key(manifest.name, manifest.version)
    present = set(store.list_files(prefix))
    problems = extra_problems(present, manifest)
    progress.begin(len(manifest.files), manifest.total_size)

    def check(item: tuple[str, FileEntry]) -> str | None:
        rel, expected = item
        if rel not in present:
            progress.file_done()
            return f"{rel}: missing"
        digest = Digest()
        try:
            store.scan(f"{prefix}/{rel}", observing(digest, progress))
        except FileNotFoundError:
            return f"{rel}: missing"
        finally:
            progress.file_done()
        return compare(rel, expected, digest.entry())

    items = sorted(manifest.files.items())
    problems.extend(p for p in run_parallel(check, items, store.transfer_threads) if p)
    return sorted(problems)


def check_destination(dest: Path) -> None:
    """A fetch may create ``dest``, fill an empty directory, or replace an earlier
    fetch (a directory with a MANIFEST.json) — never clobber anything else."""
    if not dest.exists() and not dest.is_symlink():
        return
    if not dest.is_dir() or dest.is_symlink():
        raise RegistryError(f"destination {dest} exists and is not a directory")
    if any(dest.iterdir()) and not (dest / MANIFEST_NAME).is_file():
        raise RegistryError(
            f"destination {dest} is not empty and holds no {MANIFEST_NAME}: "
            "refusing to replace it; choose an empty or new directory"
        )


# Each try either lands our copy or meets another fetch's; a few are plenty.
_MOVE_TRIES = 8


def _identity(path: Path) -> tuple[int, int] | None:
    try:
        st = path.stat()
    except FileNotFoundError:
        return None
    return st.st_dev, st.st_ino


def _holds(dest: Path, manifest_raw: bytes) -> bool:
    try:
        return (dest / MANIFEST_NAME).read_bytes() == manifest_raw
    except (FileNotFoundError, NotADirectoryError):
        return False


def _move_into_place(tmp: Path, dest: Path, found: tuple[int, int] | None,
                     manifest_raw: bytes) -> None:
    """Rename the verified ``tmp`` to ``dest``, replacing ``found`` (what ``dest`` was
    when the fetch began: an earlier fetch, or nothing).

    Fetches of one version into one place race (``modelctl serve`` processes sharing a
    cache): a copy of this very version that another fetch put there while we downloaded
    is kept and ours dropped, since it is verified and may be loading already. Only what
    was there before is moved aside, and removed once ours is in."""
    aside: list[Path] = []
    try:
        for _ in range(_MOVE_TRIES):
            check_destination(dest)  # again: something may have appeared while we downloaded
            try:
                tmp.rename(dest)  # rename(2) takes the place of a missing or empty directory
                return
            except OSError as exc:
                if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                    raise
            if _identity(dest) != found and _holds(dest, manifest_raw):
                shutil.rmtree(tmp, ignore_errors=True)
                return
            old = dest.parent / f".{dest.name}.old-{uuid.uuid4().hex[:8]}"
            try:
                dest.rename(old)
            except FileNotFoundError:
                continue  # another fetch moved it aside first
            aside.append(old)
        raise RegistryError(f"could not put the fetched version in {dest}: other processes "
                            f"kept replacing it ({_MOVE_TRIES} tries)")
    finally:
        for old in aside:
            shutil.rmtree(old, ignore_errors=True)


def fetch_version(
    store: ArtifactStore, manifest: Manifest, manifest_raw: bytes, dest: Path,
    progress: Progress = NO_PROGRESS,
) -> None:
    """Download a version into a temp sibling of ``dest``, verify every file, then
    rename it into place; on any failure the temp directory is removed."""
    check_destination(dest)
    found = _identity(dest)
    prefix = version_key(manifest.name, manifest.version)
    what = f"{manifest.name}@{manifest.version}"
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.parent / f".{dest.name}.fetch-{uuid.uuid4().hex[:8]}"
    tmp.mkdir()
    try:
        problems = extra_problems(store.list_files(prefix), manifest)
        progress.begin(len(manifest.files), manifest.total_size)

        def download(item: tuple[str, FileEntry]) -> str | None:
            rel, expected = item
            local = tmp / rel
            local.parent.mkdir(parents=True, exist_ok=True)
            digest = Digest()
            try:
                store.get_file(f"{prefix}/{rel}", local, observing(digest, progress))
            except FileNotFoundError:
                return f"{rel}: missing"
            finally:
                progress.file_done()
            return compare(rel, expected, digest.entry())

        items = sorted(manifest.files.items(), key=lambda kv: -kv[1].size)
        problems.extend(p for p in run_parallel(download, items, store.transfer_threads) if p)
        if problems:
            raise VerificationFailed(what, sorted(problems))
        (tmp / MANIFEST_NAME).write_bytes(manifest_raw)
        _move_into_place(tmp, dest, found, manifest_raw)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
