"""The report's pure parts: intervals, the check rule, thresholds."""

from __future__ import annotations

from pathlib import Path

import pytest

from rollout.analysis import Verdict
from shadow import Thresholds, ThresholdsError, load_thresholds
from shadow._stats import (
    Check,
    at_least,
    at_most,
    mean_interval,
    newcombe,
    overall,
    wilson,
    z_for,
)

Z = z_for(0.95)


def test_z_and_wilson_against_published_values() -> None:
    assert z_for(0.95) == pytest.approx(1.959964, abs=1e-6)
    # Newcombe (1998), table I: 81/263 -> 0.2553 .. 0.3662; 0/10 -> 0 .. 0.2775.
    assert wilson(81, 263, Z) == pytest.approx((0.2553, 0.3662), abs=1e-4)
    assert wilson(0, 10, Z) == pytest.approx((0.0, 0.2775), abs=1e-4)
    assert wilson(10, 10, Z) == pytest.approx((0.7225, 1.0), abs=1e-4)
    assert wilson(0, 0, Z) == (0.0, 1.0)


def test_newcombe_difference_against_the_published_example() -> None:
    # Newcombe (1998), table II, method 10: 56/70 - 48/80 -> 0.0524 .. 0.3339.
    assert newcombe(56, 70, 48, 80, Z) == pytest.approx((0.0524, 0.3339), abs=1e-4)


def test_mean_interval() -> None:
    low, high = mean_interval(0.5, 0.1, 100, Z)
    assert (low, high) == pytest.approx((0.5 - 0.0196, 0.5 + 0.0196), abs=1e-4)
    assert mean_interval(0.5, None, 1, Z)[0] == float("-inf")


def test_a_check_fails_only_when_the_interval_is_on_the_wrong_side() -> None:
    assert at_least("m", 0.97, (0.9, 1.0), 0.95).verdict is Verdict.PASS
    assert at_least("m", 0.93, (0.85, 0.99), 0.95).verdict is Verdict.INCONCLUSIVE
    failed = at_least("m", 0.5, (0.4, 0.6), 0.95)
    assert failed.verdict is Verdict.FAIL and "0.6" in failed.reason
    assert at_least("m", 0.99, (0.9, 1.0), 0.95, enough=False).verdict is Verdict.INCONCLUSIVE
    assert at_least("m", None, None, 0.95).verdict is Verdict.INCONCLUSIVE
    assert at_most("m", 0.02, (0.015, 0.03), 0.01).verdict is Verdict.FAIL
    assert at_most("m", 0.02, (-0.01, 0.05), 0.01).verdict is Verdict.INCONCLUSIVE
    assert at_most("m", 3.0, None, 2.0).verdict is Verdict.FAIL  # no interval: the estimate


def test_overall() -> None:
    def check(verdict: Verdict) -> Check:
        return Check("c", verdict, 1.0, 1.0)

    assert overall([check(Verdict.PASS), check(Verdict.FAIL)]) is Verdict.FAIL
    assert overall([check(Verdict.PASS), check(Verdict.INCONCLUSIVE)]) is Verdict.INCONCLUSIVE
    assert overall([check(Verdict.PASS)]) is Verdict.PASS
    assert overall([]) is Verdict.INCONCLUSIVE


def test_thresholds_defaults_file_and_overrides(tmp_path: Path) -> None:
    assert load_thresholds() == Thresholds()
    file = tmp_path / "t.yaml"
    file.write_text("confidence: 0.99\nmin_coverage: 0.05\ntasks:\n"
                    "  feature-extraction: {min_cosine_p5: null}\n")
    loaded = load_thresholds(file, ["min_label_match=0.9", "fixed-latency.min_exact_match=1"])
    assert loaded.confidence == 0.99 and loaded.min_coverage == 0.05
    assert loaded.for_task("feature-extraction") == {"min_cosine_mean": 0.99,
                                                     "min_cosine_p5": None}
    assert loaded.for_task("text-classification") == {"min_label_match": 0.9}
    assert loaded.for_task("fixed-latency") == {"min_exact_match": 1.0}
    # A key several tasks share changes it for all of them.
    shared = load_thresholds(None, ["min_exact_match=0.5"])
    assert shared.for_task("fixed-latency")["min_exact_match"] == 0.5
    assert shared.for_task("text-generation")["min_exact_match"] == 0.5


@pytest.mark.parametrize(("text", "says"), [
    ("min_pairs: 0\n", "min_pairs must be >= 1"),
    ("min_pairs: 2.5\n", "whole number"),
    ("confidence: 1\n", "confidence must be in (0, 1)"),
    ("max_error_rate_increase: yes\n", "must be a number or null"),
    ("tasks: [1]\n", "'tasks' must map"),
    ("nope: 1\n", "unknown threshold 'nope'"),
    ("- 1\n", "expected a mapping"),
    ("a: [\n", "not valid YAML"),
    ("tasks:\n  feature-extraction: {min_cosine_mean: 1.5}\n", "must be in [-1, 1]"),
])
def test_bad_thresholds_files(tmp_path: Path, text: str, says: str) -> None:
    file = tmp_path / "t.yaml"
    file.write_text(text)
    with pytest.raises(ThresholdsError) as info:
        load_thresholds(file)
    assert says in str(info.value)


def test_bad_threshold_flags() -> None:
    with pytest.raises(ThresholdsError, match="expected KEY=VALUE"):
        load_thresholds(None, ["min_pairs"])
    with pytest.raises(ThresholdsError, match="cannot be null"):
        load_thresholds(None, ["confidence=null"])
    with pytest.raises(ThresholdsError, match="cannot read thresholds file"):
        load_thresholds(Path("/nonexistent/t.yaml"))
