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


def fetch_rounds(url: str, dest_root: str, rounds: int, barrier: Barrier, out: Any) -> None:
    """Fetch ``race@1`` into ``dest_root/<round>`` as every worker does the same, released
    together each round; report the fetches that failed."""
    reg = Registry.open(url)
    reg.manifest("race", 1)  # warm the client before the race starts
    failed = []
    for number in range(rounds):
        barrier.wait(timeout=60)
        try:
            reg.fetch("race", 1, Path(dest_root) / str(number))
        except Exception as exc:  # reported to the test, which fails on it
            failed.append(f"round {number}: {type(exc).__name__}: {exc}")
    out.put(("fetched", failed))
