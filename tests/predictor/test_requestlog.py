"""``RequestLog``: which answered requests get a line, at which level, how many a second."""

from __future__ import annotations

import logging

import pytest

from predictor._requestlog import RequestLog, RequestLogConfig

OK_FAST = 0.005


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _lines(caplog: pytest.LogCaptureFixture) -> list[tuple[int, str]]:
    return [(r.levelno, r.getMessage()) for r in caplog.records
            if r.name == "predictor.request"]


def test_a_fast_success_gets_no_line_by_default(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="predictor.request")
    log = RequestLog(RequestLogConfig())
    for i in range(100):
        log.record(f"id-{i}", "POST", "/v1/models/m:predict", 200, OK_FAST)
    assert _lines(caplog) == []


def test_errors_and_slow_requests_are_logged_at_their_level(
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="predictor.request")
    log = RequestLog(RequestLogConfig(slow_ms=250.0))
    log.record("a", "POST", "/v1/models/m:predict", 503, OK_FAST)
    log.record("b", "POST", "/v1/models/nope:predict", 404, OK_FAST)
    log.record("c", "POST", "/v1/models/m:predict", 200, 0.3)
    log.record("d", "POST", "/v1/models/m:predict", 200, 0.2)  # under the threshold
    assert _lines(caplog) == [
        (logging.WARNING, "request a POST /v1/models/m:predict -> 503 in 5.0 ms"),
        (logging.INFO, "request b POST /v1/models/nope:predict -> 404 in 5.0 ms"),
        (logging.WARNING, "request c POST /v1/models/m:predict -> 200 in 300.0 ms "
                          "(slower than --slow_request_ms 250)"),
    ]


def test_slow_lines_can_be_turned_off(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="predictor.request")
    RequestLog(RequestLogConfig(slow_ms=0.0)).record("a", "GET", "/", 200, 60.0)
    assert _lines(caplog) == []


def test_the_sample_is_chosen_by_request_id(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="predictor.request")
    ids = [f"{i:032x}" for i in range(4000)]
    passes = []
    for _ in range(2):  # the same IDs twice: the same ones are logged both times
        caplog.clear()
        log = RequestLog(RequestLogConfig(sample_rate=0.1))
        for request_id in ids:
            log.record(request_id, "POST", "/v1/models/m:predict", 200, OK_FAST)
        passes.append(_lines(caplog))
    first = passes[0]
    assert first == passes[1]
    assert 0.07 < len(first) / len(ids) < 0.13
    assert all(level == logging.INFO for level, _ in first)
    caplog.clear()
    every = RequestLog(RequestLogConfig(sample_rate=1.0))
    for request_id in ids[:50]:
        every.record(request_id, "POST", "/v1/models/m:predict", 200, OK_FAST)
    assert len(_lines(caplog)) == 50


def test_error_lines_are_rate_limited_and_what_was_left_out_is_said(
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="predictor.request")
    clock = Clock()
    log = RequestLog(RequestLogConfig(max_per_s=20.0), clock=clock)
    for i in range(1000):  # an overload's 429s within one second
        clock.now += 0.0009
        log.record(f"r{i}", "POST", "/v1/models/m:predict", 429, OK_FAST)
    assert len(_lines(caplog)) == 20
    clock.now += 1.0
    log.record("after", "POST", "/v1/models/m:predict", 500, OK_FAST)
    lines = _lines(caplog)[20:]
    assert lines[0][0] == logging.WARNING
    assert lines[0][1].startswith("980 request log lines left out in the last")
    assert lines[1] == (logging.WARNING, "request after POST /v1/models/m:predict -> 500 "
                                         "in 5.0 ms")
