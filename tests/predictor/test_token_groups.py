"""max_batch_tokens: length-sorted groups whose padded size stays under the cap."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from predictor.handlers._text import Tokenized, token_groups


def _items(lengths: list[int]) -> list[Tokenized]:
    return [Tokenized(list(range(n)), {}) for n in lengths]


def test_no_cap_keeps_one_group_in_arrival_order() -> None:
    assert token_groups(_items([5, 1, 3]), 0) == [[0, 1, 2]]


def test_groups_similar_lengths_together() -> None:
    groups = token_groups(_items([100, 2, 98, 3, 2]), 210)
    assert groups == [[1, 4, 3], [2, 0]]


@given(st.lists(st.integers(min_value=1, max_value=64), min_size=1, max_size=40),
       st.integers(min_value=64, max_value=512))
def test_every_item_once_and_padded_cost_under_cap(lengths: list[int], cap: int) -> None:
    items = _items(lengths)
    groups = token_groups(items, cap)
    assert sorted(i for g in groups for i in g) == list(range(len(lengths)))
    for group in groups:
        padded = max(lengths[i] for i in group) * len(group)
        # A single item longer than the cap still runs, alone.
        assert padded <= cap or len(group) == 1
