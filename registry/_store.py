"""``ArtifactStore``: the one interface the registry needs from a storage system.

Keys are relative POSIX paths under the registry root (``demo/3/MANIFEST.json``).
Two primitives carry all of the registry's safety rules and every adapter must
make them atomic: ``create_exclusive`` (claims a version number; commits a
manifest) and ``write_if`` (compare-and-swap of ``aliases.json``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from registry._checksum import Observer

Token = str | None
"""What ``read_with_token`` saw: opaque to callers; None means 'absent'."""


class ArtifactStore(Protocol):
    """Storage for registry keys; adapters: LocalStore (disk), S3Store (s3fs)."""

    @property
    def url(self) -> str:
        """The root as a URL, safe to print (no credentials)."""
        ...

    @property
    def transfer_threads(self) -> int:
        """How many files are worth moving at once."""
        ...

    def read_bytes(self, key: str) -> bytes | None:
        """A small object's content, or None if absent."""
        ...

    def read_with_token(self, key: str) -> tuple[bytes | None, Token]:
        """Content (None if absent) and a token for ``write_if``."""
        ...

    def write_if(self, key: str, data: bytes, token: Token) -> bool:
        """Replace ``key`` with ``data`` only if it still is what ``token`` saw
        (absent when the token is None); False if it changed. Atomic."""
        ...

    def create_exclusive(self, key: str, data: bytes) -> bool:
        """Create ``key`` with ``data`` only if it does not exist; False if it does.
        Readers never see a partial object. Atomic."""
        ...

    def exists(self, key: str) -> bool:
        ...

    def list_dir(self, key: str) -> list[str]:
        """Names of the direct children of a directory key ([] if none)."""
        ...

    def list_files(self, key: str) -> list[str]:
        """Every file under a directory key, as paths relative to it."""
        ...

    def put_file(self, local: Path, key: str, observe: Observer) -> None:
        """Upload a local file, streamed; ``observe`` sees every chunk sent."""
        ...

    def get_file(self, key: str, local: Path, observe: Observer) -> None:
        """Download to a local file, streamed; ``observe`` sees every chunk.
        Raises FileNotFoundError if the key is absent."""
        ...

    def scan(self, key: str, observe: Observer) -> None:
        """Stream a file's bytes through ``observe`` without keeping them.
        Raises FileNotFoundError if the key is absent."""
        ...

    def delete_tree(self, key: str) -> None:
        """Remove a key and everything under it; absent is fine."""
        ...

    def uri(self, key: str) -> str:
        """The URI an InferenceService ``storageUri`` would take for ``key``."""
        ...

    @property
    def local_root(self) -> Path | None:
        """The root directory if the store is a local filesystem, else None."""
        ...
