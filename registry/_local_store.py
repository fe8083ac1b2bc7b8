"""``LocalStore``: the registry on a local (or mounted, e.g. PVC) filesystem.

Atomicity comes from the kernel: a new object is written to a private temp file
and published with ``link(2)``, which fails if the name exists (exclusive create,
never a partial file); compare-and-swap runs under an ``flock`` on a lock file
beside the object and publishes with ``rename(2)``.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import os
import shutil
import stat
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import unquote, urlsplit

from registry._checksum import Observer, copy_stream, list_local_files, scan_stream
from registry._errors import StoreError
from registry._store import Token

STAGING_DIR = ".staging"  # under the root: same filesystem, so link/rename are atomic


class LocalStore:
    """An ``ArtifactStore`` over a directory tree."""

    def __init__(self, root: Path) -> None:
        self._root = root

    @classmethod
    def from_url(cls, url: str) -> LocalStore:
        if url.startswith("file://"):
            parts = urlsplit(url)
            if parts.netloc not in ("", "localhost"):
                raise StoreError(f"file URL {url!r} names a remote host; use file:///path")
            path = Path(unquote(parts.path))
        else:
            path = Path(url).expanduser()
        root = path.resolve()
        if root.exists() and not root.is_dir():
            raise StoreError(f"registry root {root} exists and is not a directory")
        return cls(root)

    @property
    def url(self) -> str:
        return str(self._root)

    @property
    def transfer_threads(self) -> int:
        # Copying is hashing-bound (sha256, ~1.3 GB/s a core): one file per core.
        return max(2, min(4, os.cpu_count() or 2))

    @property
    def local_root(self) -> Path:
        return self._root

    def _path(self, key: str) -> Path:
        return self._root / key if key else self._root

    @contextlib.contextmanager
    def _errors(self, what: str) -> Iterator[None]:
        """Map OS errors (other than not-found, which callers handle) to StoreError."""
        try:
            yield
        except (FileNotFoundError, FileExistsError):
            raise
        except OSError as exc:
            raise StoreError(
                f"cannot {what} in the registry at {self._root}: {exc.strerror or exc}"
            ) from exc

    def _staging_file(self, data: bytes) -> Path:
        staging = self._root / STAGING_DIR
        staging.mkdir(parents=True, exist_ok=True)
        tmp = staging / f"{uuid.uuid4().hex}.tmp"
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        return tmp

    def read_bytes(self, key: str) -> bytes | None:
        with self._errors(f"read {key}"):
            try:
                return self._path(key).read_bytes()
            except FileNotFoundError:
                return None

    def read_with_token(self, key: str) -> tuple[bytes | None, Token]:
        data = self.read_bytes(key)
        return data, None if data is None else hashlib.sha256(data).hexdigest()

    def write_if(self, key: str, data: bytes, token: Token) -> bool:
        target = self._path(key)
        with self._errors(f"write {key}"):
            target.parent.mkdir(parents=True, exist_ok=True)
            lock_path = target.with_name(target.name + ".lock")
            with open(lock_path, "a+b") as lock:
                fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
                try:
                    _data, now = self.read_with_token(key)
                    if now != token:
                        return False
                    tmp = self._staging_file(data)
                    os.replace(tmp, target)
                    return True
                finally:
                    fcntl.flock(lock.fileno(), fcntl.LOCK_UN)

    def create_exclusive(self, key: str, data: bytes) -> bool:
        target = self._path(key)
        with self._errors(f"create {key}"):
            target.parent.mkdir(parents=True, exist_ok=True)
            tmp = self._staging_file(data)
            try:
                os.link(tmp, target)
            except FileExistsError:
                return False
            finally:
                tmp.unlink()
            _fsync_dir(target.parent)
            return True

    def exists(self, key: str) -> bool:
        return self._path(key).exists()

    def list_dir(self, key: str) -> list[str]:
        with self._errors(f"list {key or 'the root'}"):
            try:
                return sorted(os.listdir(self._path(key)))
            except (FileNotFoundError, NotADirectoryError):
                return []

    def list_files(self, key: str) -> list[str]:
        path = self._path(key)
        if not path.is_dir():
            return []
        with self._errors(f"list {key}"):
            return list_local_files(path)

    def put_file(self, local: Path, key: str, observe: Observer) -> None:
        target = self._path(key)
        with self._errors(f"write {key}"):
            target.parent.mkdir(parents=True, exist_ok=True)
            copy_stream(local, target, observe)
            # Versions are immutable: make that visible to anyone with a shell too.
            os.chmod(target, stat.S_IRUSR | stat.S_IRGRP | stat.S_IROTH)

    def get_file(self, key: str, local: Path, observe: Observer) -> None:
        with self._errors(f"read {key}"):
            copy_stream(self._path(key), local, observe)

    def scan(self, key: str, observe: Observer) -> None:
        with self._errors(f"read {key}"):
            scan_stream(self._path(key), observe)

    def delete_tree(self, key: str) -> None:
        path = self._path(key)
        with self._errors(f"delete {key}"):
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            else:
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()

    def uri(self, key: str) -> str:
        return self._path(key).as_uri()


def _fsync_dir(path: Path) -> None:
    """Make a new directory entry durable (a no-op where directories cannot be opened)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    except OSError as exc:
        if exc.errno in (errno.EACCES, errno.ENOTDIR, errno.EINVAL):
            return
        raise
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
