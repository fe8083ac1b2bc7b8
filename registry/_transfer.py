"""Checking a stored version, and fetching one into a local directory safely."""

from __future__ import annotations

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


def _move_into_place(tmp: Path, dest: Path) -> None:
    check_destination(dest)  # again: something may have appeared while we downloaded
    if dest.exists() and any(dest.iterdir()):
        old = dest.parent / f".{dest.name}.old-{uuid.uuid4().hex[:8]}"
        dest.rename(old)
        tmp.rename(dest)
        shutil.rmtree(old, ignore_errors=True)
    else:
        tmp.rename(dest)  # rename(2) replaces an empty directory atomically


def fetch_version(
    store: ArtifactStore, manifest: Manifest, manifest_raw: bytes, dest: Path,
    progress: Progress = NO_PROGRESS,
) -> None:
    """Download a version into a temp sibling of ``dest``, verify every file, then
    rename it into place; on any failure the temp directory is removed."""
    check_destination(dest)
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
        _move_into_place(tmp, dest)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
