"""Capture records and the capture sink, in-process against a real directory."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from predictor._config import ServerConfig, parse_config
from predictor._metrics import TapMetrics
from predictor.tap._capture import CaptureConfig, CaptureSink
from predictor.tap._mirror import is_sampled
from predictor.tap._record import Identity, build_record
from tests.support.captures import exchange
from tests.support.fleet import records

IDENTITY = Identity(model="m", version="3", role="stable", task="text-classification")


def _metrics() -> TapMetrics:
    return TapMetrics.create({"model": "m", "version": "3", "role": "stable"},
                             registry=CollectorRegistry())


def _count(metrics: TapMetrics, counter: str, **labels: str) -> float:
    metric = getattr(metrics, counter)
    return float(metric.labels(**metrics.labels, **labels)._value.get())


def test_the_same_input_hashes_alike_whatever_its_key_order_or_id() -> None:
    a = exchange("id-1", [{"text": "x", "seed": 1}], ["y"])
    b = exchange("id-2", [{"seed": 1, "text": "x"}], ["y"])
    c = exchange("id-3", [{"seed": 2, "text": "x"}], ["y"])
    ra, rb, rc = (build_record(e, IDENTITY, with_input=True) for e in (a, b, c))
    assert ra["input_hash"] == rb["input_hash"] != rc["input_hash"]
    assert ra["input"] == rb["input"] == '{"instances":[{"seed":1,"text":"x"}],"parameters":{}}'
    assert build_record(a, IDENTITY, with_input=False)["input"] is None


def test_v1_and_v2_outputs_are_recorded_alike() -> None:
    v1 = build_record(exchange("a", ["x", "y"], [{"label": "p", "score": 0.5},
                                                 {"label": "n", "score": 0.25}]),
                      IDENTITY, with_input=False)
    outputs = [{"name": "label", "datatype": "BYTES", "shape": [2], "data": ["p", "n"]},
               {"name": "score", "datatype": "FP32", "shape": [2], "data": [0.5, 0.25]}]
    v2 = build_record(exchange("a", ["x", "y"], None, v2={"outputs": outputs}), IDENTITY,
                      with_input=False)
    assert v1["output"] == v2["output"] == \
        '[{"label":"p","score":0.5},{"label":"n","score":0.25}]'
    assert (v1["protocol"], v2["protocol"], v1["items"], v2["items"]) == ("v1", "v2", 2, 2)
    embeddings = [{"name": "embedding", "datatype": "FP32", "shape": [2, 3],
                   "data": [1, 2, 3, 4, 5, 6]}]
    record = build_record(exchange("b", ["x", "y"], None, v2={"outputs": embeddings}),
                          IDENTITY, with_input=False)
    assert json.loads(record["output"]) == [[1, 2, 3], [4, 5, 6]]


def test_failures_are_recorded_with_their_status_and_message() -> None:
    failed = build_record(exchange("a", ["x"], None, status=503), IDENTITY, with_input=False)
    assert (failed["status"], failed["output"], failed["error"]) == (503, None, "failed with 503")
    shadow = build_record(exchange("a", ["x"], ["x"], shadow=True), IDENTITY, with_input=False)
    assert shadow["role"] == "shadow"  # a mirrored request, whatever the process's role


def test_sampling_is_decided_by_request_id() -> None:
    ids = [f"request-{i}" for i in range(20000)]
    share = sum(is_sampled(i, 0.1) for i in ids) / len(ids)
    assert 0.09 < share < 0.11
    assert [is_sampled(i, 0.1) for i in ids[:50]] == [is_sampled(i, 0.1) for i in ids[:50]]
    assert all(is_sampled(i, 1.0) for i in ids[:100])
    assert not any(is_sampled(i, 0.0) for i in ids[:100])


def test_the_sink_flushes_rotates_by_size_and_flushes_on_close(tmp_path: Path) -> None:
    metrics = _metrics()
    config = CaptureConfig(uri=str(tmp_path), flush_s=3600, max_file_bytes=2000,
                           max_buffer_bytes=10**6)
    sink = CaptureSink(config, IDENTITY, metrics)
    for i in range(10):
        sink.offer(exchange(f"r{i}", ["x" * 200], ["y" * 200]))
    assert sink.flush() == 10
    files = sorted(tmp_path.rglob("*.parquet"))
    assert len(files) >= 4  # ~700 bytes each, at most 2000 per file
    assert all(p.relative_to(tmp_path).parts[:2] == ("m", "stable") for p in files)
    sink.offer(exchange("last", ["x"], ["y"]))
    sink.close()
    assert {r["request_id"] for r in records(tmp_path)} == {*(f"r{i}" for i in range(10)), "last"}
    sink.offer(exchange("late", ["x"], ["y"]))
    assert _count(metrics, "capture_dropped", reason="closed") == 1
    assert _count(metrics, "capture_records") == 11


def test_a_full_buffer_drops_and_counts(tmp_path: Path) -> None:
    metrics = _metrics()
    config = CaptureConfig(uri=str(tmp_path), flush_s=3600, max_file_bytes=10**6,
                           max_buffer_bytes=3000)
    sink = CaptureSink(config, IDENTITY, metrics)  # not started: nothing drains the buffer
    for i in range(20):
        sink.offer(exchange(f"r{i}", ["x" * 300], ["y" * 300]))
    kept = sink.buffered
    assert 0 < kept < 20
    assert _count(metrics, "capture_dropped", reason="buffer_full") == 20 - kept


def test_a_store_that_refuses_writes_costs_records_not_the_thread(tmp_path: Path) -> None:
    metrics = _metrics()
    root = tmp_path / "capture"
    sink = CaptureSink(CaptureConfig(uri=str(root), flush_s=0.05), IDENTITY, metrics)
    root.rmdir()
    root.write_text("the capture directory became a file: every write fails")
    sink.start()
    sink.offer(exchange("a", ["x"], ["y"]))
    sink.close()
    assert _count(metrics, "capture_dropped", reason="write_error") == 1


def test_flags_are_validated_without_echoing_urls() -> None:
    with pytest.raises(ValueError, match="cannot be used with --role shadow"):
        ServerConfig(model_name="m", role="shadow", shadow_url="http://s:8080")
    with pytest.raises(ValueError, match="must not hold credentials") as info:
        ServerConfig(model_name="m", shadow_url="http://user:secret@s:8080")
    assert "secret" not in str(info.value)
    with pytest.raises(ValueError, match="must not hold credentials") as info:
        ServerConfig(model_name="m", capture_uri="s3://key:secret@bucket/x")
    assert "secret" not in str(info.value)
    with pytest.raises(ValueError, match="not a 'gs' URL"):
        ServerConfig(model_name="m", capture_uri="gs://bucket/x")
    with pytest.raises(ValueError, match=r"shadow_sample_rate must be in \[0, 1\]"):
        ServerConfig(model_name="m", shadow_url="http://s", shadow_sample_rate=1.5)
    config = parse_config(["--model_name", "m"], env={
        "MODELCTL_SHADOW_URL": "http://shadow:80", "MODELCTL_SHADOW_SAMPLE_RATE": "0.25",
        "MODELCTL_CAPTURE_URI": "s3://captures/p", "MODELCTL_CAPTURE_INPUTS": "true",
        "MODELCTL_CAPTURE_FLUSH_S": "5", "MODELCTL_CAPTURE_MAX_FILE_MB": "8"})
    assert (config.shadow_url, config.shadow_sample_rate, config.capture_uri) == (
        "http://shadow:80", 0.25, "s3://captures/p")
    assert (config.capture_inputs, config.capture_flush_s, config.capture_max_file_mb) == (
        True, 5.0, 8.0)
