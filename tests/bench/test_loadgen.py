"""The open-loop generator against a real loopback server (bench.loadgen._server)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest

from bench.loadgen import LoadgenError, LoadResult, run_open_loop, run_open_loop_async
from bench.loadgen._cli import load_bodies, parse_duration
from bench.loadgen._spec import LoadSpec, schedule
from common import PlatformError
from tests.support.procs import ManagedProcess, free_port, wait_http_ok

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    port = free_port()
    proc = ManagedProcess(
        "loadgen-server",
        [sys.executable, "-m", "bench.loadgen._server", "--port", str(port)],
        log_dir=tmp_path_factory.mktemp("loadgen"),
        cwd=ROOT,
    )
    try:
        wait_http_ok(f"http://127.0.0.1:{port}/healthz", timeout_s=30, proc=proc)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.stop()


def received(base: str, path: str) -> int:
    """How many requests the server got on ``path``."""
    return int(httpx.get(f"{base}/count{path}", timeout=5).json()["count"])


def status_by_index(i: int) -> bytes:
    """Module level, so worker processes can unpickle it."""
    return b'{"status":429}' if i % 5 == 0 else b'{"status":200}'


def test_constant_rate_sends_rate_times_duration_on_schedule(base: str) -> None:
    result = run_open_loop(
        f"{base}/ok/schedule", rate=200, duration_s=0.5, body={"instances": ["hi"]}
    )

    assert abs(result.sent - 100) <= 1
    np.testing.assert_allclose(result.samples.scheduled_s, np.arange(result.sent) / 200)
    assert result.status_counts == {"200": result.sent}
    assert received(base, "/ok/schedule") == result.sent
    assert np.all(result.samples.send_lag_s >= 0)
    assert np.all(result.samples.latency_s >= result.samples.send_lag_s)
    assert result.throughput_rps >= 0.9 * 200
    assert result.latency_ok.count == result.sent


def test_poisson_arrivals_are_seeded_and_average_the_rate(base: str) -> None:
    first = schedule("poisson", 500, 2.0, seed=1)
    assert np.array_equal(first, schedule("poisson", 500, 2.0, seed=1))
    assert not np.array_equal(first[:50], schedule("poisson", 500, 2.0, seed=2)[:50])
    assert abs(len(first) - 1000) <= 4 * np.sqrt(1000)
    assert np.all(np.diff(first) > 0) and first[-1] < 2.0
    assert np.std(np.diff(first)) > 0.5 / 500  # not a constant spacing

    result = run_open_loop(
        f"{base}/ok/poisson", rate=200, duration_s=0.5, arrival="poisson", seed=7
    )
    assert np.array_equal(result.samples.scheduled_s, schedule("poisson", 200, 0.5, seed=7))
    assert received(base, "/ok/poisson") == result.sent


def test_latency_counts_from_the_scheduled_time_so_queueing_shows(base: str) -> None:
    # The server answers one request at a time, 200 ms each, while requests are due
    # every 100 ms: request i finishes near 0.2 (i + 1) s, so its latency is about
    # 0.2 + 0.1 i s. A closed-loop client would see a flat 0.2 s instead.
    result = run_open_loop(f"{base}/slow/200/co", rate=10, duration_s=1.2, timeout_s=10)

    assert result.status_counts == {"200": 12}
    latency = result.samples.latency_s
    expected = 0.2 + 0.1 * np.arange(12)
    assert np.all(np.abs(latency - expected) < 0.1), latency
    assert np.all(np.diff(latency) > 0.05)
    assert result.latency_all.max_s is not None and result.latency_all.max_s >= 1.2
    # ... and every request went out on time although earlier ones were unanswered.
    assert result.send_lag.max_s is not None and result.send_lag.max_s < 0.05
    assert result.max_in_flight >= 5


def test_send_lag_reports_a_generator_that_fell_behind(base: str) -> None:
    async def scenario() -> LoadResult:
        async def hog_the_loop() -> None:
            await asyncio.sleep(0.3)
            time.sleep(0.25)  # blocks the generator's own event loop on purpose

        hog = asyncio.create_task(hog_the_loop())
        result = await run_open_loop_async(f"{base}/ok/lag", rate=100, duration_s=1.0)
        await hog
        return result

    result = asyncio.run(scenario())
    assert result.send_lag.max_s is not None and result.send_lag.max_s >= 0.2
    assert not result.is_on_schedule()
    assert np.all(result.samples.latency_s >= result.samples.send_lag_s)
    assert result.status_counts == {"200": 100}


def test_statuses_are_counted_by_code_and_only_2xx_is_throughput(base: str) -> None:
    result = run_open_loop(f"{base}/cycle/200,429,500/statuses", rate=300, duration_s=0.5)

    assert result.status_counts == {"200": 50, "429": 50, "500": 50}
    assert result.ok == 50
    assert result.success_ratio == pytest.approx(1 / 3)
    assert result.latency_ok.count == 50
    assert result.latency_all.count == 150
    assert result.throughput_rps <= 100
    assert received(base, "/cycle/200,429,500/statuses") == 150  # nothing retried


def test_timeouts_are_their_own_status(base: str) -> None:
    result = run_open_loop(f"{base}/hang/t", rate=20, duration_s=0.5, timeout_s=0.3)

    assert result.status_counts == {"timeout": 10}
    assert result.ok == 0 and result.throughput_rps == 0
    assert np.all(result.samples.latency_s >= 0.3)
    assert np.all(result.samples.latency_s < 1.0)
    assert result.latency_ok.count == 0 and result.latency_ok.p99_s is None


def test_connection_errors_are_their_own_status() -> None:
    result = run_open_loop(f"http://127.0.0.1:{free_port()}/nobody", rate=50, duration_s=0.2)

    assert result.status_counts == {"conn_error": 10}
    assert result.success_ratio == 0


def test_a_server_that_closes_connections_gets_new_ones(base: str) -> None:
    result = run_open_loop(f"{base}/close/c", rate=100, duration_s=0.3)

    assert result.status_counts == {"200": 30}
    assert result.connections_opened == 30


def test_warmup_is_sent_but_left_out_of_the_stats(base: str) -> None:
    result = run_open_loop(f"{base}/ok/warm", rate=100, duration_s=0.5, warmup_s=0.3)

    assert result.sent == 50
    assert result.latency_all.count == 50
    assert len(result.samples.status) == 80
    assert np.all(result.samples.scheduled_s[30:] >= 0.3)
    assert received(base, "/ok/warm") == 80


def test_bodies_cycle_and_headers_are_sent(base: str) -> None:
    bodies: list[dict[str, int] | bytes] = [{"status": 200}, {"status": 201}, b'{"status":404}']
    cycled = run_open_loop(f"{base}/status/cycle", rate=300, duration_s=0.3, body=bodies)
    assert cycled.status_counts == {"200": 30, "201": 30, "404": 30}

    with_header = run_open_loop(
        f"{base}/status/header",
        rate=100,
        duration_s=0.2,
        body={"status": 200},
        headers={"x-want-status": "503", "x-request-timeout-ms": "500"},
    )
    assert with_header.status_counts == {"503": 20}


def test_workers_share_one_schedule_and_merge_in_order(base: str) -> None:
    result = run_open_loop(
        f"{base}/status/workers", rate=400, duration_s=0.5, workers=2, body=status_by_index
    )

    assert result.sent == 200
    np.testing.assert_allclose(result.samples.scheduled_s, np.arange(200) / 400)
    expected = np.where(np.arange(200) % 5 == 0, 429, 200)
    assert np.array_equal(result.samples.status, expected)  # each sample in its own slot
    assert result.status_counts == {"200": 160, "429": 40}
    assert received(base, "/status/workers") == 200
    assert np.all(np.isfinite(result.samples.send_lag_s))


def test_workers_refuse_a_body_they_cannot_receive(base: str) -> None:
    with pytest.raises(LoadgenError, match="picklable"):
        run_open_loop(f"{base}/ok/x", rate=10, duration_s=0.1, workers=2, body=lambda i: b"{}")


def test_result_serialises_and_samples_save(base: str, tmp_path: Path) -> None:
    result = run_open_loop(f"{base}/ok/dict", rate=50, duration_s=0.2)

    doc = json.loads(json.dumps(result.to_dict(), allow_nan=False))
    assert doc["status_counts"] == {"200": 10}
    assert doc["offered_rate_rps"] == 50
    assert set(doc["latency_ok"]) == {"count", "mean_s", "p50_s", "p90_s", "p99_s", "max_s"}
    result.samples.save(str(tmp_path / "s.npz"))
    with np.load(tmp_path / "s.npz") as saved:
        assert saved["status"].tolist() == [200] * 10
        assert saved["latency_s"].shape == (10,)


def test_sync_runner_refuses_to_run_inside_an_event_loop(base: str) -> None:
    async def inside() -> None:
        run_open_loop(f"{base}/ok/x", rate=10, duration_s=0.1)

    with pytest.raises(LoadgenError, match="run_open_loop_async"):
        asyncio.run(inside())


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"rate": 0}, "rate must be > 0"),
        ({"duration_s": -1}, "duration must be > 0"),
        ({"url": "https://example.com/"}, "only http://"),
        ({"url": "http://u:p@127.0.0.1/"}, "credentials"),
        ({"workers": 0}, "workers must be"),
        ({"arrival": "bursty"}, "arrival must be one of"),
        ({"method": "HEAD"}, "method must be one of"),
        ({"headers": (("x-a", "1\r\nx-b: 2"),)}, "line break"),
        ({"rate": 1e9, "duration_s": 100}, "schedules"),
    ],
)
def test_spec_rejects_what_cannot_work(changes: dict[str, object], message: str) -> None:
    args: dict[str, object] = {"url": "http://127.0.0.1:1/x", "rate": 10.0, "duration_s": 1.0}
    args.update(changes)
    with pytest.raises(LoadgenError, match=message) as info:
        LoadSpec(**args)  # type: ignore[arg-type]
    assert isinstance(info.value, PlatformError)


def test_public_names_are_sorted_and_exist() -> None:
    import bench.loadgen

    assert bench.loadgen.__all__ == sorted(bench.loadgen.__all__)
    assert all(hasattr(bench.loadgen, name) for name in bench.loadgen.__all__)


def test_body_files_hold_one_body_or_jsonl_lines(tmp_path: Path) -> None:
    one = tmp_path / "body.json"
    one.write_text('{"instances": ["a", "b"]}\n')
    assert load_bodies(None, one) == b'{"instances": ["a", "b"]}'
    many = tmp_path / "bodies.jsonl"
    many.write_text('{"status": 200}\n\n{"status": 429}\n')
    assert load_bodies(None, many) == [b'{"status": 200}', b'{"status": 429}']
    many.write_text('{"status": 200}\nnope\n')
    with pytest.raises(LoadgenError, match="line 2 is not valid JSON"):
        load_bodies(None, many)
    with pytest.raises(LoadgenError, match="not both"):
        load_bodies("{}", one)
    with pytest.raises(LoadgenError, match="cannot read"):
        load_bodies(None, tmp_path / "missing.json")


def test_parse_duration() -> None:
    assert parse_duration("10s") == 10.0
    assert parse_duration("500ms") == 0.5
    assert parse_duration("2m") == 120.0
    assert parse_duration("1.5") == 1.5
    assert parse_duration(".5s") == 0.5
    assert parse_duration("0s") == 0.0  # LoadSpec refuses it, with its own message
    with pytest.raises(LoadgenError, match=r"bad duration 'ten seconds': use e\.g\. 10s"):
        parse_duration("ten seconds")


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bench.loadgen", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_cli_prints_a_table_and_writes_json(base: str, tmp_path: Path) -> None:
    out = tmp_path / "out.json"
    done = _cli(
        "--url", f"{base}/ok/cli", "--rate", "50", "--duration", "400ms",
        "--body", '{"instances":["hi"]}', "--header", "x-request-timeout-ms:500",
        "--json", str(out),
    )  # fmt: skip

    assert done.returncode == 0, done.stderr
    assert "throughput" in done.stdout and "p99" in done.stdout
    doc = json.loads(out.read_text())
    assert doc["sent"] == 20 and doc["status_counts"] == {"200": 20}
    assert received(base, "/ok/cli") == 20


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--rate", "0"], "error: rate must be > 0, got 0.0"),
        (["--rate", "10", "--body", "not json"], "error: --body is not valid JSON"),
        (["--rate", "10", "--duration", "soon"], "error: bad duration 'soon': use e.g. 10s"),
        (["--rate", "10", "--duration", "0s"], "error: duration must be > 0 s, got 0.0"),
    ],
)
def test_cli_user_errors_are_one_line_and_exit_2(args: list[str], message: str) -> None:
    done = _cli("--url", "http://127.0.0.1:1/x", "--duration", "1s", *args)

    assert done.returncode == 2
    assert done.stderr.startswith(message)
    assert len(done.stderr.strip().splitlines()) == 1
