"""Scores of predictions against their ground-truth labels, from additive counts. Pure.

Every score is a function of counts that DuckDB aggregates (a ``Tally``), so the
report aggregates once per time window, version and role and sums the windows for
the totals; nothing grows with the number of labelled predictions but the confusion
table (classes squared).

- **accuracy**: the items whose label equals the answer (canonical JSON; a
  classification's ``label`` field), over the items judged. For a generation it is the
  exact match rate.
- **per class** (classifiers): precision tp/(tp+fp), recall tp/(tp+fn), F1
  2tp/(2tp+fp+fn), support tp+fn; the macro F1 is their mean over every class seen as
  an answer or a label (scikit-learn's ``f1_score(average="macro")`` over those labels,
  with ``zero_division=0``).
- **expected calibration error** (classifiers whose answers carry a ``score``, the
  probability of the answered class): ``ECE_BINS`` equal-width bins of the score,
  [0, 0.1), ..., [0.9, 1.0]; ECE = sum over the bins of (items in the bin / items) *
  |accuracy in the bin - mean score in the bin| (Guo et al., 2017).
- **mean absolute error**: over the items whose answer and label are both numbers.
- **token-set Jaccard** (generations): the shadow report's text similarity, one SQL
  definition for both (``token_set_sql``, ``set_jaccard_sql``): lower-cased
  whitespace tokens, |A & B| / |A | B|, 1.0 for two empty texts.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

CLASSIFICATION_TASKS = frozenset({"text-classification"})
GENERATION_TASKS = frozenset({"text-generation", "llm"})
ECE_BINS = 10
# Each kind's scores beside the accuracy, as the views show them: (heading, key).
_SCORE_COLUMNS: dict[str, tuple[tuple[str, str], ...]] = {
    "classification": (("macro F1", "macro_f1"), ("ECE", "ece")),
    "generation": (("token Jaccard", "token_jaccard"),),
    "values": (("MAE", "mae"),),
}


def kind_of(task: str) -> str:
    """How a task's answers are scored: ``classification``, ``generation`` or ``values``
    (exact match, and the mean absolute error of numbers)."""
    if task in CLASSIFICATION_TASKS:
        return "classification"
    if task in GENERATION_TASKS:
        return "generation"
    return "values"


def score_columns(groups: Iterable[Mapping[str, Any]]) -> list[tuple[str, str]]:
    """(heading, key) of the scores beside the accuracy that a table of ``groups`` shows."""
    kinds = {g["kind"] for g in groups}
    return [column for kind, columns in _SCORE_COLUMNS.items() if kind in kinds
            for column in columns]


def _empty_bins() -> list[list[float]]:
    return [[0, 0.0, 0] for _ in range(ECE_BINS)]


@dataclass
class Tally:
    """The counts behind every score of one group of labelled predictions; ``add``
    sums another group's into this one."""

    requests: int = 0  # labelled predictions (request IDs with a label)
    failed: int = 0  # of them, answered with an error: nothing to judge
    not_comparable: int = 0  # answered, but the label's items are not the answer's
    items: int = 0  # items judged
    correct: int = 0  # items whose label equals the answer
    numeric: int = 0  # items whose answer and label are both numbers
    abs_error: float = 0.0  # the sum of |answer - label| over them
    texts: int = 0  # items whose answer and label are both text (generations)
    jaccard: float = 0.0  # the sum of their token-set Jaccard similarities
    confusion: dict[tuple[str, str], int] = field(default_factory=dict)  # (answer, label)
    bins: list[list[float]] = field(default_factory=_empty_bins)  # [items, score sum, correct]

    def add(self, other: Tally) -> None:
        for name in ("requests", "failed", "not_comparable", "items", "correct", "numeric",
                     "abs_error", "texts", "jaccard"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        for cell, n in other.confusion.items():
            self.confusion[cell] = self.confusion.get(cell, 0) + n
        for mine, theirs in zip(self.bins, other.bins, strict=True):
            for i in range(3):
                mine[i] += theirs[i]


def ratio(part: float, whole: float) -> float | None:
    return part / whole if whole else None


def class_scores(confusion: Mapping[tuple[str, str], int]) -> dict[str, dict[str, Any]]:
    """Precision, recall, F1 and support of every class in the (answer, label) counts;
    a precision (recall) is None for a class never answered (never the label)."""
    classes = sorted({c for cell in confusion for c in cell})
    out = {}
    for name in classes:
        tp = confusion.get((name, name), 0)
        answered = sum(n for (answer, _), n in confusion.items() if answer == name)
        actual = sum(n for (_, label), n in confusion.items() if label == name)
        fp, fn = answered - tp, actual - tp
        out[name] = {"precision": ratio(tp, answered), "recall": ratio(tp, actual),
                     "f1": ratio(2 * tp, 2 * tp + fp + fn) or 0.0, "support": actual}
    return out


def macro_f1(classes: Mapping[str, Mapping[str, Any]]) -> float | None:
    """The mean F1 over the classes (None when there is none)."""
    return ratio(sum(c["f1"] for c in classes.values()), len(classes))


def calibration(bins: list[list[float]]) -> tuple[float | None, list[dict[str, Any]]]:
    """(ECE or None when no item has a score, each bin's items, mean score and accuracy)."""
    total = sum(b[0] for b in bins)
    rows = [{"low": i / ECE_BINS, "high": (i + 1) / ECE_BINS, "items": int(n),
             "confidence": ratio(score, n), "accuracy": ratio(correct, n)}
            for i, (n, score, correct) in enumerate(bins)]
    if not total:
        return None, rows
    return sum(abs(correct - score) for _, score, correct in bins) / total, rows


def scores(task: str, tally: Tally) -> dict[str, Any]:
    """The JSON-ready scores of one group: the counts, accuracy, and the task's own."""
    kind = kind_of(task)
    out: dict[str, Any] = {
        "task": task, "kind": kind, "requests": tally.requests, "failed": tally.failed,
        "not_comparable": tally.not_comparable, "items": tally.items,
        "correct": tally.correct, "accuracy": ratio(tally.correct, tally.items),
    }
    if kind == "classification":
        classes = class_scores(tally.confusion)
        ece, rows = calibration(tally.bins)
        out.update(classes=classes, macro_f1=macro_f1(classes), ece=ece,
                   scored_items=sum(int(b[0]) for b in tally.bins), calibration=rows)
        if ece is None and tally.items:
            out["ece_note"] = "not available: the captured answers hold no score"
    elif kind == "generation":
        out.update(exact_match=out["accuracy"], token_jaccard=ratio(tally.jaccard, tally.texts))
    else:
        out.update(mae=ratio(tally.abs_error, tally.numeric), numeric_items=tally.numeric)
    return out


def token_set_sql(text: str) -> str:
    """SQL: the distinct lower-cased whitespace tokens of the VARCHAR expression ``text``."""
    return (f"list_distinct(list_filter(string_split_regex(lower({text}), '\\s+'), "
            "lambda x: x <> ''))")


def set_jaccard_sql(a: str, b: str) -> str:
    """SQL: the Jaccard similarity of two token sets (``token_set_sql``); 1.0 when both
    are empty."""
    return (f"CASE WHEN len({a}) + len({b}) = 0 THEN 1.0 "
            f"ELSE len(list_intersect({a}, {b})) / len(list_distinct(list_concat({a}, {b}))) "
            "END")
