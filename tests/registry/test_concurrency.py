"""Races between separate processes, on local disk and on S3: pushes never share
a version, of competing alias changes from one old value exactly one wins, and fetches
of one version into one place all succeed and leave one intact copy."""

from __future__ import annotations

import multiprocessing
import queue
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from registry import Registry, verify_dir
from tests.registry import _workers
from tests.registry.conftest import make_source

WORKERS = 4
RACE_TIMEOUT_S = 120.0


def race(target: Callable[..., None], args_for: Callable[[int, Any, Any], tuple[Any, ...]]
         ) -> list[tuple[Any, ...]]:
    """Run ``WORKERS`` processes released together by a barrier; their reports."""
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(WORKERS)
    out = ctx.Queue()
    procs = [ctx.Process(target=target, args=args_for(i, barrier, out)) for i in range(WORKERS)]
    for p in procs:
        p.start()
    reports: list[tuple[Any, ...]] = []
    deadline = time.monotonic() + RACE_TIMEOUT_S
    try:
        while len(reports) < WORKERS:
            try:
                reports.append(out.get(timeout=0.2))
            except queue.Empty:
                died = [p.exitcode for p in procs if p.exitcode not in (None, 0)]
                assert not died, f"a worker died (exit codes {died})"
                assert time.monotonic() < deadline, f"workers silent for {RACE_TIMEOUT_S}s"
    finally:
        for p in procs:
            p.join(timeout=60)
            if p.is_alive():
                p.kill()
    assert all(p.exitcode == 0 for p in procs), [p.exitcode for p in procs]
    return reports


def test_concurrent_pushes_get_distinct_versions(registry_url: str, tmp_path: Path) -> None:
    sources = [
        make_source(tmp_path / f"src{i}", {"weights.bin": bytes([i]) * 300_000,
                                           "id.txt": str(i).encode()})
        for i in range(WORKERS)
    ]
    reports = race(_workers.push_one,
                   lambda i, barrier, out: (registry_url, str(sources[i]), barrier, out))
    versions = sorted(version for _, version, _ in reports)
    assert versions == list(range(1, WORKERS + 1))
    reg = Registry.open(registry_url)
    assert reg.versions("race") == versions
    for _, version, src in reports:
        manifest = reg.manifest("race", version)
        assert manifest.metadata["src"] == src  # each version holds its own pusher's files
        assert reg.verify("race", version) == []


def test_competing_alias_changes_have_one_winner(registry_url: str, sample_src: Path) -> None:
    reg = Registry.open(registry_url)
    for _ in range(WORKERS + 1):
        reg.push(sample_src, "race", "fixed-latency")
    reg.set_alias("race", "stable", 1)
    # Every worker moves stable away from 1, each to a different version.
    reports = race(_workers.set_alias_one,
                   lambda i, barrier, out: (registry_url, "stable", i + 2, 1, barrier, out))
    winners = [r for r in reports if r[0] == "won"]
    losers = [r for r in reports if r[0] == "conflict"]
    assert len(winners) == 1, reports
    assert len(losers) == WORKERS - 1
    assert all("expected version 1" in message for _, _, message in losers)
    assert reg.aliases("race") == {"stable": winners[0][1]}


def test_concurrent_changes_to_different_aliases_all_land(
    registry_url: str, sample_src: Path
) -> None:
    reg = Registry.open(registry_url)
    reg.push(sample_src, "race", "fixed-latency")
    # Same aliases.json, different aliases: losers of the file-level race retry.
    reports = race(_workers.set_alias_one,
                   lambda i, barrier, out: (registry_url, f"team-{i}", 1, None, barrier, out))
    assert sorted(r[0] for r in reports) == ["won"] * WORKERS, reports
    assert reg.aliases("race") == {f"team-{i}": 1 for i in range(WORKERS)}


FETCH_ROUNDS = 40


def test_concurrent_fetches_into_one_place_all_succeed(local_url: str, sample_src: Path,
                                                       tmp_path: Path) -> None:
    # `modelctl serve` processes sharing a cache fetch the same version into the same
    # directory: every one succeeds and one verified copy stays (a rename that lost the
    # race used to fail with "Directory not empty").
    reg = Registry.open(local_url)
    reg.push(sample_src, "race", "fixed-latency")
    dests = tmp_path / "cache"
    reports = race(_workers.fetch_rounds,
                   lambda i, barrier, out: (local_url, str(dests), FETCH_ROUNDS, barrier, out))
    assert [failed for _, failed in reports] == [[]] * WORKERS, reports
    manifest = reg.manifest("race", 1)
    for number in range(FETCH_ROUNDS):
        assert verify_dir(dests / str(number), manifest) == []
    assert sorted(p.name for p in dests.iterdir()) == sorted(map(str, range(FETCH_ROUNDS)))
