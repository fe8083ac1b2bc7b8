"""The pure parts of queue mode: key names, the codec, the backpressure maths, the flags."""

from __future__ import annotations

import pytest

from predictor._config import ServerConfig
from predictor._errors import (
    DeadLettered,
    DeadlineExpired,
    ItemFailed,
    Overloaded,
    QueueUnavailable,
    status_for,
)
from predictor.queue import (
    Entry,
    QueueKeys,
    WorkerInfo,
    admit,
    decode_entry,
    decode_record,
    depth_of,
    encode_entry,
    error_record,
    ok_record,
    predicted_wait_s,
    results_of,
)
from predictor.queue._backpressure import parse_workers


def test_keys_share_one_hash_tag() -> None:
    keys = QueueKeys("demo-embed", "3")
    assert keys.stream == "modelctl:{demo-embed:3}:requests"
    assert keys.dead == "modelctl:{demo-embed:3}:dead"
    assert keys.workers == "modelctl:{demo-embed:3}:workers"
    assert keys.result("abc") == "modelctl:{demo-embed:3}:result:abc"
    assert keys.reply("f1") == "modelctl:{demo-embed:3}:reply:f1"
    assert QueueKeys.GROUP == "workers"
    for key in (keys.stream, keys.dead, keys.workers, keys.result("x"), keys.reply("y")):
        assert key[key.index("{") + 1:key.index("}")] == "demo-embed:3"


@pytest.mark.parametrize("name", ["", "a{b", "a}b", "a:b", "a b"])
def test_key_names_refuse_what_would_break_the_tag(name: str) -> None:
    with pytest.raises(ValueError):
        QueueKeys(name, "1")


def test_entry_round_trips() -> None:
    entry = Entry("r1", "client-1", ["a", {"b": [1, 2.5]}, 2 ** 70], {"seed": 1},
                  deadline_ms=1e12 + 0.5, timeout_ms=1000.0, enqueued_ms=1e12, reply_to="ch")
    fields = {k.encode(): v if isinstance(v, bytes) else v.encode()
              for k, v in encode_entry(entry).items()}
    assert decode_entry(fields) == entry


def test_a_foreign_entry_is_refused() -> None:
    with pytest.raises((ValueError, KeyError)):
        decode_entry({b"v": b"9", b"request_id": b"x"})


@pytest.mark.parametrize("exc", [
    DeadlineExpired(1000.0, 1200.0),
    Overloaded("deadline", 3.0, "cannot finish"),
    ItemFailed(2, ValueError("bad"), is_input_error=True),
    ItemFailed(0, RuntimeError("boom"), is_input_error=False),
    DeadLettered("request r was dead-lettered after 4 deliveries"),
])
def test_an_error_keeps_its_status_and_message_across_the_queue(exc: Exception) -> None:
    record = decode_record(error_record("r", exc))  # type: ignore[arg-type]
    with pytest.raises(Exception) as raised:
        results_of(record)
    assert status_for(raised.value) == status_for(exc)  # type: ignore[arg-type]
    assert str(raised.value) == str(exc)


def test_results_round_trip() -> None:
    assert results_of(decode_record(ok_record("r", [[0.25, -1.0], {"label": "x"}, "t"]))) == [
        [0.25, -1.0], {"label": "x"}, "t"]


def test_statuses_of_the_queue_errors() -> None:
    assert status_for(QueueUnavailable("down", 2.0)) == (503, {"retry-after": "2"})
    assert status_for(DeadLettered("dead"))[0] == 500


def test_depth_is_lag_plus_pending() -> None:
    groups = [{"name": b"other", "lag": 9, "pending": 9},
              {"name": "workers", "lag": 5, "pending": 3}]
    assert depth_of(groups, "workers") == (8, 5, 3)
    assert depth_of([{"name": "workers", "lag": None, "pending": 2}], "workers") == (2, 0, 2)
    assert depth_of([], "workers") == (0, 0, 0)


def _worker(batch_s: float = 0.1, cap: int = 10, updated_s: float = 100.0,
            startup_s: float = 20.0) -> WorkerInfo:
    return WorkerInfo("w", batch_s, cap, startup_s, updated_s)


def test_predicted_wait_from_the_workers_published_speed() -> None:
    # Two live workers taking 10 items per 0.1 s each: of the 40 items ahead (ours the
    # last 2), the first 20 go in the batches running now, ours in the next ones.
    wait = predicted_wait_s(38, 2, [_worker(), _worker()], now_s=101.0)
    assert wait == pytest.approx(0.2)
    assert predicted_wait_s(0, 1, [], now_s=0.0) is None


def test_no_live_worker_waits_for_a_start_up() -> None:
    wait = predicted_wait_s(0, 1, [_worker(updated_s=0.0)], now_s=1000.0)
    assert wait == pytest.approx(20.0 + 0.1)


def test_a_request_rides_a_batch_of_the_size_the_queue_gives_it() -> None:
    """A line learnt from small batches that overstates t(cap) must not refuse a request
    when the queue is empty: it would refuse every one, no batch would run, and the
    estimate would never be corrected (the latch bench/queue_bench found)."""
    steep = WorkerInfo("w", batch_s=0.1 + 0.005 * 100, cap=100, startup_s=5.0, updated_s=100.0,
                       intercept_s=0.1, per_item_s=0.005)
    empty = predicted_wait_s(0, 1, [steep], now_s=100.5)
    assert empty == pytest.approx(0.105)
    assert admit(0, 1, 1000, empty, remaining_s=0.23).is_admitted
    full = predicted_wait_s(150, 1, [steep], now_s=100.5)
    assert full == pytest.approx(51 / (100 / 0.6) + 0.6)
    assert admit(150, 1, 1000, full, remaining_s=0.23).reason == "deadline"


def test_worker_info_round_trips_and_reads_what_older_workers_published() -> None:
    info = WorkerInfo("w", 0.6, 100, 5.0, 100.0, intercept_s=0.1, per_item_s=0.005)
    assert parse_workers({b"w": info.to_json()}) == [info]
    old = parse_workers({b"w": b'{"batch_s": 0.2, "cap": 8, "startup_s": 3, "updated_s": 1}'})
    assert old == [WorkerInfo("w", 0.2, 8, 3.0, 1.0)]
    assert old[0].batch_time_s(1) == 0.2  # no line published: t(b) = t(cap) for every b


def test_admission() -> None:
    assert admit(5, 1, 100, 0.5, remaining_s=1.0).is_admitted
    assert admit(5, 1, 100, None, remaining_s=1.0).is_admitted  # nothing known: the queue holds it
    full = admit(100, 1, 100, 10.0, remaining_s=30.0)
    assert full.reason == "queue_full" and full.retry_after_s >= 1.0
    late = admit(5, 1, 100, 25.0, remaining_s=5.0)
    assert late.reason == "deadline" and late.retry_after_s == 20.0


def test_queue_flags() -> None:
    ServerConfig(model_name="m")  # no queue: nothing changes
    ServerConfig(model_name="m", queue_url="redis://:pw@h:6379/0", queue_role="worker")
    problems = [
        {"queue_url": "http://h:1", "queue_role": "worker"},
        {"queue_url": "redis://h:1/0"},  # no role
        {"queue_role": "frontend"},  # no URL
        {"queue_url": "redis://h:1/0", "queue_role": "worker", "queue_max_deliveries": 0},
        {"queue_url": "redis://h:1/0", "queue_role": "worker",
         "request_timeout_ms": 1000.0, "queue_claim_timeout_ms": 1000},
        {"queue_url": "redis://h:1/0", "queue_role": "worker", "queue_result_ttl_s": 0},
    ]
    for kwargs in problems:
        with pytest.raises(ValueError) as raised:
            ServerConfig(model_name="m", **kwargs)  # type: ignore[arg-type]
        assert "pw" not in str(raised.value)


def test_importing_the_package_loads_no_kserve() -> None:
    """KServe's gRPC protos and tritonclient's share the `inference` proto package: a
    process that imports both fails, so the keys and codec must not pull KServe in."""
    import subprocess
    import sys

    code = "import sys, predictor.queue; print(any(m.startswith('kserve') for m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "False"
