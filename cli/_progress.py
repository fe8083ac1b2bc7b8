"""A progress bar for registry transfers (files, bytes, rate, time left) on stderr,
shown only when stderr is a terminal and the output is not ``--json``."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from rich.progress import (
    BarColumn,
    DownloadColumn,
    TaskID,
    TextColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)
from rich.progress import Progress as Bar

from cli._output import stderr
from registry import NO_PROGRESS, Progress


class _BarProgress:
    """registry's ``Progress`` drawn as one rich task; safe from the transfer threads."""

    def __init__(self, bar: Bar, task: TaskID) -> None:
        self._bar, self._task = bar, task
        self._lock = threading.Lock()
        self._files = self._done = 0

    def begin(self, files: int, total_bytes: int) -> None:
        with self._lock:
            self._files = files
        self._bar.update(self._task, total=total_bytes, files=f"0/{files}")

    def advance(self, nbytes: int) -> None:
        self._bar.advance(self._task, nbytes)

    def file_done(self) -> None:
        with self._lock:
            self._done += 1
            text = f"{self._done}/{self._files}"
        self._bar.update(self._task, files=text)


@contextmanager
def transfer_progress(verb: str, as_json: bool) -> Iterator[Progress]:
    """``verb`` (e.g. "pushing demo") with a bar while the block runs, or the registry's
    silent ``NO_PROGRESS`` when stderr is not a terminal or the output is JSON. The bar
    is cleared at the end, leaving the command's own summary as the only output."""
    console = stderr()
    if as_json or not console.is_terminal:
        yield NO_PROGRESS
        return
    bar = Bar(TextColumn("{task.description}"), BarColumn(),
              TextColumn("{task.fields[files]} files"), DownloadColumn(),
              TransferSpeedColumn(), TimeRemainingColumn(), console=console, transient=True)
    with bar:
        yield _BarProgress(bar, bar.add_task(verb, total=None, files="0/?"))
