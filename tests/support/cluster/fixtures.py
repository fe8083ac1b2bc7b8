"""pytest fixtures for the real control plane: one cluster per test session, started
on first use (in well under a minute once ``make setup`` has built the binaries), and a
namespace of its own for each test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.cluster._cluster import Cluster, start_cluster


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    running = start_cluster(tmp_path_factory.mktemp("cluster"))
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture
def namespace(cluster: Cluster) -> str:
    return cluster.new_namespace()
