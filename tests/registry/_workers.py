"""Functions run in separate processes by the concurrency tests (spawned, so
each has its own interpreter, store client and event loop)."""

from __future__ import annotations

from multiprocessing.synchronize import Barrier
from pathlib import Path
from typing import Any

from registry import AliasConflict, Registry


def push_one(url: str, src: str, barrier: Barrier, out: Any) -> None:
    """Push ``src`` as a new version of ``race`` once every worker is ready."""
    reg = Registry.open(url)
    barrier.wait(timeout=60)
    manifest = reg.push(Path(src), "race", "fixed-latency", metadata={"src": src})
    out.put(("pushed", manifest.version, src))


def set_alias_one(
    url: str, alias: str, version: int, expected: int | None, barrier: Barrier, out: Any
) -> None:
    """Try to move ``alias`` from ``expected`` to ``version``; report the outcome."""
    reg = Registry.open(url)
    reg.versions("race")  # warm the client before the race starts
    barrier.wait(timeout=60)
    try:
        reg.set_alias("race", alias, version, expected=expected)
    except AliasConflict as exc:
        out.put(("conflict", version, str(exc)))
    else:
        out.put(("won", version, alias))
