"""How far a transfer has got: the registry reports files and bytes as they stream,
and a caller (the CLI's progress bar) shows them. Calls come from the transfer
threads, so an implementation must be thread-safe."""

from __future__ import annotations

from typing import Protocol

from registry._checksum import Digest, Observer


class Progress(Protocol):
    """Told a transfer's size once, then each chunk and each finished file."""

    def begin(self, files: int, total_bytes: int) -> None: ...

    def advance(self, nbytes: int) -> None: ...

    def file_done(self) -> None: ...


class NoProgress:
    """Reports to nobody: the default."""

    def begin(self, files: int, total_bytes: int) -> None:
        pass

    def advance(self, nbytes: int) -> None:
        pass

    def file_done(self) -> None:
        pass


NO_PROGRESS = NoProgress()


def observing(digest: Digest, progress: Progress) -> Observer:
    """An observer that hashes each chunk and reports its size."""
    if isinstance(progress, NoProgress):
        return digest.update

    def observe(chunk: memoryview) -> None:
        digest.update(chunk)
        progress.advance(len(chunk))

    return observe
