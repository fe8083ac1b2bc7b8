"""The scores of the accuracy report against hand-computed values, against their
definitions on random data, and against scikit-learn where it is installed; the text
similarity (one SQL for this report and the shadow report's) through DuckDB."""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

import pytest

from accuracy import (
    Tally,
    calibration,
    class_scores,
    kind_of,
    macro_f1,
    scores,
    set_jaccard_sql,
    token_set_sql,
)


def _confusion(answers: list[str], labels: list[str]) -> dict[tuple[str, str], int]:
    return dict(Counter(zip(answers, labels, strict=True)))


def test_f1_per_class_by_hand() -> None:
    # (answer, label): a answered 4 times (3 right), b 6 times (4 right); a is the label 5
    # times, b 5 times.
    confusion = {("a", "a"): 3, ("a", "b"): 1, ("b", "a"): 2, ("b", "b"): 4}
    classes = class_scores(confusion)
    assert classes["a"] == pytest.approx({"precision": 3 / 4, "recall": 3 / 5,
                                          "f1": 6 / 9, "support": 5})
    assert classes["b"] == pytest.approx({"precision": 4 / 6, "recall": 4 / 5,
                                          "f1": 8 / 11, "support": 5})
    assert macro_f1(classes) == pytest.approx((6 / 9 + 8 / 11) / 2)


def test_a_class_never_answered_or_never_true() -> None:
    classes = class_scores({("a", "a"): 2, ("a", "c"): 1, ("b", "a"): 1})
    assert classes["c"] == {"precision": None, "recall": 0.0, "f1": 0.0, "support": 1}
    assert classes["b"] == {"precision": 0.0, "recall": None, "f1": 0.0, "support": 0}
    assert classes["a"]["f1"] == pytest.approx(2 * 2 / (2 * 2 + 1 + 1))
    assert macro_f1({}) is None


def _reference_f1(answers: list[str], labels: list[str], name: str) -> float:
    """F1 from its definition: the harmonic mean of precision and recall (0 when both are 0)."""
    tp = sum(a == name and t == name for a, t in zip(answers, labels, strict=True))
    answered, actual = answers.count(name), labels.count(name)
    precision = tp / answered if answered else 0.0
    recall = tp / actual if actual else 0.0
    return 2 * precision * recall / (precision + recall) if precision + recall else 0.0


@pytest.mark.parametrize("seed", range(5))
def test_f1_matches_its_definition_on_random_answers(seed: int) -> None:
    rng = random.Random(seed)
    names = ["cat", "dog", "bird", "fish"][: rng.randint(2, 4)]
    labels = [rng.choice(names) for _ in range(200)]
    answers = [t if rng.random() < 0.6 else rng.choice(names) for t in labels]
    classes = class_scores(_confusion(answers, labels))
    for name, got in classes.items():
        assert got["f1"] == pytest.approx(_reference_f1(answers, labels, name))
        assert got["support"] == labels.count(name)


def test_f1_matches_scikit_learn() -> None:
    metrics = pytest.importorskip("sklearn.metrics")
    rng = random.Random(7)
    labels = [rng.choice("xyz") for _ in range(300)]
    answers = [t if rng.random() < 0.5 else rng.choice("xyzw") for t in labels]
    classes = class_scores(_confusion(answers, labels))
    names = sorted(classes)
    want = metrics.f1_score(labels, answers, labels=names, average=None, zero_division=0)
    assert [classes[n]["f1"] for n in names] == pytest.approx(list(want))
    assert macro_f1(classes) == pytest.approx(metrics.f1_score(
        labels, answers, labels=names, average="macro", zero_division=0))
    assert scores("text-classification", _tally(answers, labels))["accuracy"] == \
        pytest.approx(metrics.accuracy_score(labels, answers))


def _tally(answers: list[str], labels: list[str]) -> Tally:
    tally = Tally(items=len(labels), correct=sum(a == t for a, t in zip(answers, labels,
                                                                        strict=True)))
    tally.confusion = _confusion(answers, labels)
    return tally


def _bins(scored: list[tuple[float, bool]]) -> list[list[float]]:
    bins: list[list[float]] = [[0, 0.0, 0] for _ in range(10)]
    for score, right in scored:
        b = bins[min(int(score * 10), 9)]
        b[0] += 1
        b[1] += score
        b[2] += int(right)
    return bins


def test_expected_calibration_error_by_hand() -> None:
    # Bin 0.9-1.0: two items, mean score 0.95, one right: |0.5 - 0.95| = 0.45, weight 2/4.
    # Bin 0.6-0.7: one right at 0.65: 0.35, weight 1/4. Bin 0.1-0.2: one wrong at 0.15:
    # 0.15, weight 1/4. ECE = (0.9 + 0.35 + 0.15) / 4 = 0.35.
    ece, rows = calibration(_bins([(0.95, True), (0.95, False), (0.65, True), (0.15, False)]))
    assert ece == pytest.approx(0.35)
    assert rows[9] == pytest.approx({"low": 0.9, "high": 1.0, "items": 2, "confidence": 0.95,
                                     "accuracy": 0.5})
    assert rows[3] == {"low": 0.3, "high": 0.4, "items": 0, "confidence": None,
                       "accuracy": None}
    assert calibration(_bins([]))[0] is None


def test_a_perfectly_calibrated_bin_has_no_error() -> None:
    ece, _ = calibration(_bins([(0.75, True)] * 3 + [(0.75, False)]))
    assert ece == pytest.approx(0.0)


def test_scores_by_kind() -> None:
    assert (kind_of("text-classification"), kind_of("llm"), kind_of("text-generation"),
            kind_of("fixed-latency")) == ("classification", "generation", "generation",
                                          "values")
    values = scores("fixed-latency", Tally(requests=4, items=4, correct=1, numeric=3,
                                           abs_error=1.5))
    assert values["mae"] == pytest.approx(0.5) and values["numeric_items"] == 3
    assert values["accuracy"] == 0.25
    assert scores("fixed-latency", Tally(items=2))["mae"] is None
    text = scores("llm", Tally(items=4, correct=1, texts=4, jaccard=2.0))
    assert text["exact_match"] == 0.25 and text["token_jaccard"] == 0.5
    unscored = scores("text-classification", _tally(["a"], ["a"]))
    assert unscored["ece"] is None and "no score" in unscored["ece_note"]
    empty = scores("text-classification", Tally())
    assert empty["accuracy"] is None and "ece_note" not in empty


def test_tallies_add_up() -> None:
    one = Tally(requests=2, items=3, correct=1, numeric=1, abs_error=0.5,
                confusion={("a", "b"): 1})
    one.bins[9] = [1, 0.9, 1]
    two = Tally(requests=1, failed=1, items=1, correct=1, confusion={("a", "b"): 2,
                                                                     ("b", "b"): 1})
    two.bins[9] = [2, 1.9, 0]
    one.add(two)
    assert (one.requests, one.failed, one.items, one.correct) == (3, 1, 4, 2)
    assert one.confusion == {("a", "b"): 3, ("b", "b"): 1}
    assert one.bins[9] == pytest.approx([3, 2.8, 1])


@pytest.mark.parametrize(("a", "b", "want"), [
    ("The cat sat", "the cat ran", 2 / 4),  # {the, cat} of {the, cat, sat, ran}
    ("a a  b", "A", 1 / 2),  # sets, lower-cased, any whitespace
    ("same words", "words same", 1.0),
    ("", "  ", 1.0),  # two empty texts agree
    ("x", "", 0.0),
    ("Paris\nis big", "paris is BIG", 1.0),
])
def test_token_set_jaccard_in_sql(a: str, b: str, want: float) -> None:
    import duckdb

    sql = (f"SELECT {set_jaccard_sql('ta', 'tb')} FROM (SELECT {token_set_sql('x')} AS ta, "
           f"{token_set_sql('y')} AS tb FROM (SELECT ?::VARCHAR AS x, ?::VARCHAR AS y))")
    got: Any = duckdb.connect().execute(sql, [a, b]).fetchone()
    assert got[0] == pytest.approx(want)
