"""Promises: SIGTERM at random moments under load answers every accepted request; a SIGKILL
gives clients connection errors, never wrong answers; a restarted predictor serves again,
and readiness gates traffic until it is warm.

Each request is a V1 call on its own connection whose one instance is a unique tag (the
fixed-latency task echoes it), so every request ends in exactly one outcome the client
can see: an answer (checked against its tag), a refused connection, or a connection
closed with nothing sent back. The predictor's access log is the server's side of the
ledger: every answer it started is one the client received.
"""

from __future__ import annotations

import random
import re
import signal
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support import wait_for
from tests.system.reliability._support import (
    Outcome,
    Predictor,
    ProbeRun,
    add,
    echo_request,
    launch_predictor,
    probe_load,
    push_fixed,
    record,
    scaled,
)

pytestmark = pytest.mark.soak

BATCH_MS = 100
BATCH = 8
RATE = 50  # requests per second, under the 80 a batch of 8 per 100 ms sustains
LOAD_S = 2.0
# The predictor's request log line (predictor/_requestlog.py), one per answered request
# with --request_log_sample 1 and no rate limit to speak of: the server's own ledger of
# the answers it sent.
ACCESS_LINE = re.compile(r"request \S+ POST /v1/models/\S+ -> (\d{3}) in ")


@pytest.fixture(scope="module")
def log_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("shutdown")


@pytest.fixture(scope="module")
def rng() -> random.Random:
    seed = random.randrange(2**32)
    record("shutdown.seed", seed)
    return random.Random(seed)


def start(registry_root: Path, log_dir: Path, name: str) -> Predictor:
    return launch_predictor(registry_root, name, log_dir, "--max_batch_size", str(BATCH),
                            "--max_batch_wait_ms", "5", "--drain_timeout_s", "20",
                            # every request logged, none left out by the rate limit
                            # (the readiness watch's 503s count towards it)
                            "--request_log_sample", "1",
                            "--request_log_max_per_s", "100000").wait_ready()


def tagged_requests(predictor: Predictor, trial: int) -> tuple[list[bytes], list[str]]:
    tags = [f"t{trial}-r{i}" for i in range(int(RATE * LOAD_S))]
    return [echo_request(predictor.v1_path, tag) for tag in tags], tags


def check_answer(outcome: Outcome, tag: str, allowed: set[int]) -> None:
    assert outcome.status in allowed, (tag, outcome.status, outcome.body[:200])
    if outcome.status == 200:
        assert outcome.json() == {"predictions": [tag]}, (tag, outcome.body[:200])
    else:
        assert outcome.json().get("error"), outcome.body[:200]


class ReadinessWatch:
    """Polls /v2/health/ready from a thread; keeps (time, status or None if refused)."""

    def __init__(self, predictor: Predictor) -> None:
        self._url = f"{predictor.url}/v2/health/ready"
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.seen: list[tuple[float, int | None]] = []

    def _run(self) -> None:
        with httpx.Client(timeout=2) as client:
            while not self._stop.wait(0.01):
                try:
                    status: int | None = client.get(self._url).status_code
                except httpx.TransportError:
                    status = None
                self.seen.append((time.monotonic(), status))

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


@pytest.fixture
def watches() -> Iterator[list[ReadinessWatch]]:
    started: list[ReadinessWatch] = []
    yield started
    for watch in started:
        watch.stop()


def test_sigterm_at_random_moments_answers_every_accepted_request(
    registry_root: Path, log_dir: Path, rng: random.Random, watches: list[ReadinessWatch]
) -> None:
    push_fixed(registry_root, "drain", latency_ms=BATCH_MS, max_batch_size=BATCH)
    trials = scaled(5, 20)
    totals: Counter[str] = Counter()
    for trial in range(trials):
        predictor = start(registry_root, log_dir, "drain")
        watch = ReadinessWatch(predictor)
        watches.append(watch)
        requests, tags = tagged_requests(predictor, trial)
        at_s = rng.uniform(0.2, LOAD_S - 0.6)

        def sigterm(p: Predictor = predictor, w: ReadinessWatch = watch) -> None:
            p.proc.signal(signal.SIGTERM)
            w.start()

        try:
            run = probe_load(predictor.port, requests, RATE, timeout_s=15.0,
                             actions=[(at_s, "signal", sigterm)])
            exit_code = predictor.proc.wait(timeout_s=30)
        finally:
            watch.stop()
            predictor.proc.stop()
        judge_sigterm(run, tags, predictor, exit_code, watch)
        totals.update(o.kind if o.kind != "answered" else str(o.status) for o in run.outcomes)
    record("shutdown.sigterm_trials", trials)
    record("shutdown.sigterm_outcomes", dict(totals))
    add("shutdown.sigterm_requests", sum(totals.values()))


def judge_sigterm(run: ProbeRun, tags: list[str], predictor: Predictor, exit_code: int,
                  watch: ReadinessWatch) -> None:
    signalled = run.marks["signal"]
    assert exit_code == 0, predictor.log()[-2000:]
    assert "drained; stopping servers" in predictor.log()
    finished_after_signal = 0
    for outcome, tag in zip(run.outcomes, tags, strict=True):
        # Nothing is lost: no timeout, no answer cut short.
        assert outcome.kind in ("answered", "refused", "reset"), (tag, outcome.kind)
        if outcome.due < signalled - 0.005:
            # Sent while the server was up: accepted, so answered (200, or 503 if the
            # server read it after the signal), never dropped.
            assert outcome.kind == "answered", (tag, outcome.kind)
        if outcome.kind == "answered":
            check_answer(outcome, tag, {200, 503})
            if outcome.status == 200 and outcome.ended > signalled:
                finished_after_signal += 1
    assert finished_after_signal >= 1  # work in flight at the signal was finished
    # The server's ledger: every answer it started, the client got.
    logged = Counter(ACCESS_LINE.findall(predictor.log()))
    answered = Counter(str(o.status) for o in run.outcomes if o.kind == "answered")
    assert logged == answered, (logged, answered)
    # Readiness went false when the drain began (a load balancer stops sending) and
    # never came back: no 200 after the first answer that was not one.
    statuses = [status for _, status in watch.seen]
    assert statuses, "readiness was never polled after the signal"
    first_not_ready = next(i for i, status in enumerate(statuses) if status != 200)
    assert watch.seen[first_not_ready][0] - signalled < 1.0, watch.seen
    assert 200 not in statuses[first_not_ready:], statuses


def test_sigkill_gives_connection_errors_never_wrong_answers_and_restart_is_gated(
    registry_root: Path, log_dir: Path, rng: random.Random
) -> None:
    push_fixed(registry_root, "crash", latency_ms=300, max_batch_size=BATCH)
    predictor = start(registry_root, log_dir, "crash")
    kills = scaled(2, 10)
    totals: Counter[str] = Counter()
    try:
        for kill in range(kills):
            requests, tags = tagged_requests(predictor, kill)
            at_s = rng.uniform(0.3, LOAD_S - 0.6)
            run = probe_load(predictor.port, requests, RATE, timeout_s=15.0,
                             actions=[(at_s, "kill", lambda p=predictor: p.proc.signal(
                                 signal.SIGKILL))])
            assert predictor.proc.wait(timeout_s=10) == -signal.SIGKILL
            for outcome, tag in zip(run.outcomes, tags, strict=True):
                # A connection error (refused, reset, or an answer cut off, which the
                # client sees as broken) or a right answer: never a wrong one.
                assert outcome.kind in ("answered", "refused", "reset", "partial"), outcome
                if outcome.kind == "answered":
                    check_answer(outcome, tag, {200})
                if outcome.due > run.marks["kill"] + 0.05:
                    assert outcome.kind != "answered", (tag, outcome)
            totals.update(o.kind if o.kind != "answered" else str(o.status)
                          for o in run.outcomes)
            predictor = restart_gated(predictor, log_dir, kill)
    finally:
        predictor.proc.stop()
    record("shutdown.sigkill_kills", kills)
    record("shutdown.sigkill_outcomes", dict(totals))


def restart_gated(killed: Predictor, log_dir: Path, attempt: int) -> Predictor:
    """Start the same command again and watch it from the first moment: nothing is
    served before it is ready, and once ready it answers at the speed of a warm model."""
    predictor = killed.relaunch(log_dir, f"restart{attempt}")
    try:
        return _watch_restart(predictor)
    except BaseException:
        predictor.proc.stop()
        raise


def _watch_restart(predictor: Predictor) -> Predictor:
    launched = time.monotonic()
    seen: list[tuple[float, int | None, int | None]] = []
    with httpx.Client(timeout=5) as client:

        def look() -> bool:
            ready = predict = None
            try:
                ready = client.get(f"{predictor.url}/v2/health/ready").status_code
                predict = client.post(predictor.url + predictor.v1_path,
                                      json={"instances": ["probe"]}).status_code
            except httpx.TransportError:
                pass
            seen.append((time.monotonic(), ready, predict))
            if predictor.proc.poll() is not None:
                raise AssertionError(predictor.log()[-2000:])
            return ready == 200

        wait_for(look, timeout_s=60, interval_s=0.02, what="the restarted predictor")
        started = time.monotonic()
        r = client.post(predictor.url + predictor.v1_path, json={"instances": ["warm?"]})
        first_answer_s = time.monotonic() - started
    assert r.status_code == 200 and r.json() == {"predictions": ["warm?"]}
    assert first_answer_s < 2 * 0.3 + 0.5, first_answer_s  # a batch or two, no cold start
    # Before readiness, the port was closed: no answer of any kind came out.
    before_ready = [(ready, predict) for _, ready, predict in seen[:-1]]
    assert all(r is None for pair in before_ready for r in pair), before_ready
    log = predictor.log()
    assert log.index("warm (") < log.index("Uvicorn running on"), log[-2000:]
    record("shutdown.restart_ready_s", round(seen[-1][0] - launched, 2))
    return predictor
