"""The real control plane (tests/support/cluster) for these tests: one per session."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.cluster._cluster import Cluster
from tests.support.cluster._world import RealWorld, make_real_world


@pytest.fixture
def world(cluster: Cluster, tmp_path: Path) -> Iterator[RealWorld]:
    w = make_real_world(cluster, tmp_path)
    yield w
    w.close()
