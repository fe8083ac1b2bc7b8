"""The transports bench on the servers that are this project's own (uvicorn, grpcio):
each starts, answers every request of a short open-loop run, and has its CPU counted.
granian and grpclib live in their own virtualenvs and are not installed here."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.transports.__main__ import measure

pytestmark = pytest.mark.timeout(120)


@pytest.mark.parametrize(("protocol", "server"), [("http", "uvicorn"), ("grpc", "grpcio")])
def test_our_transport_answers_every_request(protocol: str, server: str,
                                             tmp_path: Path) -> None:
    [row] = measure(protocol, server, rates=[100.0], runs=1, duration_s=1.0, log_dir=tmp_path)
    assert row["server"] == server and row["rate"] == 100.0
    assert row["ok_fraction"] == 1.0
    assert row["cpu_us_per_request"]["median"] > 0
    assert 0 < row["p99_ms"]["median"] < 1000
