"""Feedback bodies, a prediction judged against its label, and the bounded recent answers."""

from __future__ import annotations

from typing import Any

import pytest

from predictor._errors import BadInput
from predictor.feedback import MAX_LABELS, RecentOutputs, judge, parse_labels
from predictor.tap import Exchange


def test_one_label_or_many() -> None:
    assert parse_labels(b'{"request_id": "a", "label": "spam"}') == [("a", "spam")]
    many = b'{"labels": [{"request_id": "a", "label": 1}, {"request_id": "b", "label": [1, 2]}]}'
    assert parse_labels(many) == [("a", 1), ("b", [1, 2])]


@pytest.mark.parametrize(("body", "words"), [
    (b"{not json", "must be JSON"),
    (b"[1]", "must be an object"),
    (b'{"labels": []}', "non-empty list"),
    (b'{"request_id": "a"}', "exactly 'request_id' and 'label'"),
    (b'{"request_id": "a", "label": 1, "extra": 2}', "exactly"),
    (b'{"request_id": 7, "label": 1}', "'request_id' must be a string"),
    (b'{"request_id": "a", "label": null}', "must not be null"),
    (b'{"request_id": "a", "label": [NaN]}', "without NaN or Infinity"),  # not JSON to store
    (b'{"labels": [{"request_id": "a", "label": 1}, 3]}', "labels[1]"),
])
def test_a_bad_body_is_named(body: bytes, words: str) -> None:
    with pytest.raises(BadInput, match=words.replace("[", r"\[").replace("]", r"\]")):
        parse_labels(body)


def test_too_many_labels_at_once() -> None:
    body = ('{"labels": [' + ",".join(['{"request_id": "a", "label": 1}'] * (MAX_LABELS + 1))
            + "]}").encode()
    with pytest.raises(BadInput, match=f"at most {MAX_LABELS}"):
        parse_labels(body)


@pytest.mark.parametrize(("items", "label", "want"), [
    ([{"label": "spam", "score": 0.9}], "spam", (1, 1)),  # a classification's label field
    ([{"label": "spam", "score": 0.9}], "ham", (1, 0)),
    ([{"label": "a"}, {"label": "b"}], ["a", "c"], (2, 1)),  # one label per item
    (["Paris"], ["Paris"], (1, 1)),  # a one-item list label
    ([3.5], 3.5, (1, 1)),
    ([1, 2], [1], None),  # lengths differ: not comparable
])
def test_judge(items: list[Any], label: Any, want: tuple[int, int] | None) -> None:
    assert judge(items, label) == want


def _exchange(rid: str, size: int = 10, shadow: bool = False) -> Exchange:
    return Exchange(request_id=rid, started_at=0.0, path="/v1/models/m:predict", query="",
                    headers=(), body=b"x" * size, status=200, response=b"{}", latency_s=0.01,
                    is_shadow=shadow)


def test_recent_answers_are_bounded_by_count_and_bytes() -> None:
    recent = RecentOutputs(max_entries=3, max_bytes=10_000)
    for i in range(5):
        recent.add(_exchange(f"r{i}"))
    assert len(recent) == 3 and recent.get("r0") is None and recent.get("r4") is not None
    recent.add(_exchange("mirrored", shadow=True))  # a shadow's copy is not the primary's answer
    assert recent.get("mirrored") is None
    small = RecentOutputs(max_entries=100, max_bytes=3 * (1000 + 2 + 256))
    for i in range(5):
        small.add(_exchange(f"big{i}", size=1000))
    assert len(small) == 3
