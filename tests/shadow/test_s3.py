"""Capture to S3 and report from S3, against a real S3 server (SeaweedFS on loopback)."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator

import pytest
from prometheus_client import CollectorRegistry

from predictor._metrics import TapMetrics
from predictor.tap._capture import CaptureConfig, CaptureSink
from predictor.tap._record import Identity
from tests.support.captures import exchange
from tests.support.fleet import run_cli
from tests.support.seaweed import SeaweedS3, seaweed_s3

BUCKET = "captures"


@pytest.fixture(scope="module")
def seaweed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SeaweedS3]:
    with seaweed_s3(tmp_path_factory.mktemp("seaweed")) as server:
        server.create_bucket(BUCKET)
        yield server


@pytest.fixture
def s3_env(seaweed: SeaweedS3, monkeypatch: pytest.MonkeyPatch) -> SeaweedS3:
    for name in ("AWS_ENDPOINT_URL_S3", "AWS_DEFAULT_REGION", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    for name, value in seaweed.env().items():
        monkeypatch.setenv(name, value)
    return seaweed


def _sink(uri: str, role: str, version: str) -> tuple[CaptureSink, TapMetrics]:
    metrics = TapMetrics.create({"model": "m", "version": version, "role": role},
                                registry=CollectorRegistry())
    identity = Identity(model="m", version=version, role=role, task="fixed-latency")
    return CaptureSink(CaptureConfig(uri=uri, flush_s=60), identity, metrics), metrics


def test_capture_to_s3_and_report_from_s3(s3_env: SeaweedS3, monkeypatch: pytest.MonkeyPatch,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    uri = f"s3://{BUCKET}/prod"
    primary, _ = _sink(uri, "stable", "1")
    shadow, _ = _sink(uri, "shadow", "2")
    for sink in (primary, shadow):
        sink.start()
    for i in range(40):
        primary.offer(exchange(f"r{i}", [f"x{i}"], [f"x{i}"]))
        shadow.offer(exchange(f"r{i}", [f"x{i}"], [f"x{i}"], shadow=True))
    primary.close()
    shadow.close()
    keys = s3_env.filesystem().find(f"{BUCKET}/prod")
    assert keys and all(k.endswith(".parquet") for k in keys)
    assert any("/m/stable/" in k for k in keys) and any("/m/shadow/" in k for k in keys)
    code, out, err = run_cli(monkeypatch, capsys, "shadow", "report", "m", "--primary", uri,
                             "--shadow", uri, "--format", "json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["pairs"]["pairs"] == 40 and doc["verdict"] == "Pass"
    assert doc["primary"]["uri"] == uri


def test_an_unwritable_bucket_drops_records_and_never_logs_secrets(
        s3_env: SeaweedS3, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wrong-" + s3_env.secret_key)
    sink, metrics = _sink(f"s3://{BUCKET}/denied", "stable", "1")
    with caplog.at_level(logging.WARNING, logger="predictor"):
        sink.offer(exchange("a", ["x"], ["x"]))
        assert sink.flush() == 0
    dropped = metrics.capture_dropped.labels(**metrics.labels, reason="write_error")
    assert dropped._value.get() == 1
    assert "could not write 1 records to s3://captures/denied" in caplog.text
    assert s3_env.secret_key not in caplog.text and s3_env.access_key not in caplog.text


def test_reading_a_missing_prefix_is_one_line(s3_env: SeaweedS3, monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(monkeypatch, capsys, "shadow", "report", "m", "--primary",
                           f"s3://{BUCKET}/nothing-here", "--shadow", f"s3://{BUCKET}/x")
    assert code == 2 and err.startswith("error: primary capture s3://captures/nothing-here "
                                        "holds no .parquet capture files")
