"""The one duration grammar: what parses (the union of what each CLI took before), what
is refused and with which message, and the two ways durations are written back."""

from __future__ import annotations

import math
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from common import InvalidDuration, format_duration_s, format_promql_duration, parse_duration_s

# The grammars the rollout (and dev) CLI and the load generator accepted before they
# shared this one: every string either took must still parse.
_ROLLOUT_BEFORE = r"\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*"
_LOADGEN_BEFORE = r"\s*(\d+(?:\.\d*)?|\.\d+)\s*(ms|s|m|h)?\s*"
_UNIT_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}


@pytest.mark.parametrize(("text", "seconds"), [
    ("60s", 60.0), ("2m", 120.0), ("1.5h", 5400.0), ("500ms", 0.5), ("90", 90.0),
    (" 3m ", 180.0), ("10 s", 10.0), ("1.5", 1.5), (".5s", 0.5), ("5.s", 5.0), ("5.", 5.0),
    ("0.25m", 15.0), ("1h", 3600.0),
])
def test_durations_parse(text: str, seconds: float) -> None:
    assert parse_duration_s(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", " ", "fast", "5d", "-1m", "m", "1e3s", "1,5s", ".s",
                                  ".", "5 m s", "5S", "+5s", "5sec"])
def test_malformed_durations_say_what_is_expected(text: str) -> None:
    with pytest.raises(InvalidDuration) as refused:
        parse_duration_s(text)
    assert str(refused.value) == (f"duration {text!r}: expected a number with ms, s, m or h, "
                                  "e.g. 60s")


@pytest.mark.parametrize("text", ["0s", "0", "0.0m", ".0s", "0ms"])
def test_zero_is_refused_unless_allowed(text: str) -> None:
    with pytest.raises(InvalidDuration) as refused:
        parse_duration_s(text)
    assert str(refused.value) == f"duration {text!r} must be greater than zero"
    assert parse_duration_s(text, allow_zero=True) == 0.0


def test_a_bad_duration_is_a_value_error() -> None:
    assert issubclass(InvalidDuration, ValueError)


@given(st.from_regex(_ROLLOUT_BEFORE, fullmatch=True) | st.from_regex(_LOADGEN_BEFORE,
                                                                       fullmatch=True))
def test_everything_that_parsed_before_still_parses(text: str) -> None:
    match = re.fullmatch(_LOADGEN_BEFORE, text) or re.fullmatch(_ROLLOUT_BEFORE, text)
    assert match is not None
    seconds = float(match.group(1)) * _UNIT_S[match.group(2)]
    assert parse_duration_s(text, allow_zero=True) == seconds
    if seconds > 0:
        assert parse_duration_s(text) == seconds


@pytest.mark.parametrize(("seconds", "text"), [
    (60.0, "1m"), (90.0, "1.5m"), (45.0, "45s"), (3600.0, "1h"), (5400.0, "1.5h"),
    (0.5, "0.5s"), (61.0, "61s"), (7200.0, "2h"), (12.3, "12.3s"),
])
def test_durations_render_the_way_people_write_them(seconds: float, text: str) -> None:
    assert format_duration_s(seconds) == text
    assert parse_duration_s(text) == pytest.approx(seconds)


@pytest.mark.parametrize(("seconds", "text"), [
    (60, "60s"), (5.0, "5s"), (1.5, "1500ms"), (0.1, "100ms"), (0.0001, "1ms"), (300, "300s"),
])
def test_prometheus_durations_are_whole_units(seconds: float, text: str) -> None:
    assert format_promql_duration(seconds) == text


@pytest.mark.parametrize("seconds", [0.0, -1.0, math.inf, math.nan])
def test_prometheus_durations_are_positive_and_finite(seconds: float) -> None:
    with pytest.raises(InvalidDuration, match="positive number of seconds"):
        format_promql_duration(seconds)
