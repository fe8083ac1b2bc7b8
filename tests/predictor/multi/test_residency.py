"""make_room: least recently used first, never a busy model, never one within its minimum
residency, only as many as needed, and a refusal that says when to retry."""

from __future__ import annotations

import math

from predictor.multi import Budget, Resident, Size, make_room

MIB = 2**20


def resident(name: str, mib: int, *, loaded: float = 0.0, used: float = 0.0,
             busy: bool = False, device_mib: int = 0) -> Resident:
    return Resident(name, Size(mib * MIB, device_mib * MIB), loaded, used, busy)


def test_what_fits_evicts_nothing() -> None:
    room = make_room([resident("a", 10)], Size(10 * MIB), Budget(30 * MIB), now_s=100,
                     min_residency_s=30)
    assert room.fits and room.evict == ()


def test_the_least_recently_used_idle_ones_leave_and_only_as_many_as_needed() -> None:
    residents = [resident("a", 10, used=50), resident("b", 10, used=10),
                 resident("c", 10, used=30), resident("d", 10, used=5, busy=True)]
    room = make_room(residents, Size(20 * MIB), Budget(45 * MIB), now_s=100,
                     min_residency_s=30)
    assert room.fits and room.evict == ("b", "c")  # d is older but busy; a stays


def test_within_the_minimum_residency_nobody_leaves_and_the_refusal_says_until_when() -> None:
    residents = [resident("a", 10, loaded=90), resident("b", 10, loaded=80)]
    room = make_room(residents, Size(10 * MIB), Budget(25 * MIB), now_s=100,
                     min_residency_s=30)
    assert not room.fits and room.evict == ()
    assert room.retry_after_s == 10  # b's residency ends at 110
    assert "minimum residency" in room.reason


def test_when_evicting_every_candidate_would_not_do_nothing_is_evicted() -> None:
    residents = [resident("idle", 5), resident("busy", 20, busy=True)]
    room = make_room(residents, Size(15 * MIB), Budget(30 * MIB), now_s=100,
                     min_residency_s=0)
    assert not room.fits and room.evict == () and room.retry_after_s == 1.0


def test_a_model_larger_than_the_budget_never_fits() -> None:
    room = make_room([], Size(40 * MIB), Budget(30 * MIB), now_s=0, min_residency_s=0)
    assert not room.fits and math.isinf(room.retry_after_s)
    assert "more than the whole budget" in room.reason


def test_the_device_budget_counts_too() -> None:
    residents = [resident("a", 1, device_mib=8, used=1), resident("b", 1, device_mib=8, used=2)]
    need = Size(1 * MIB, 8 * MIB)
    room = make_room(residents, need, Budget(100 * MIB, 20 * MIB), now_s=100, min_residency_s=0)
    assert room.fits and room.evict == ("a",)  # host has room; the device does not
    assert make_room(residents, need, Budget(100 * MIB), now_s=100,
                     min_residency_s=0).evict == ()  # no device budget: nothing to free
