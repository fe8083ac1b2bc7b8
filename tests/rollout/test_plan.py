"""The step plan: parsing and validating steps, intervals and failure limits (pure)."""

from __future__ import annotations

import pytest

from rollout import InvalidPlan, InvalidSteps, Plan, parse_steps


@pytest.mark.parametrize(("text", "steps"), [
    ("5,25,50", (5, 25, 50)),
    (" 1 , 100 ", (1, 100)),
    ("100", (100,)),
    ("10,20,30,40,50,60,70,80,90", (10, 20, 30, 40, 50, 60, 70, 80, 90)),
])
def test_steps_parse(text: str, steps: tuple[int, ...]) -> None:
    assert parse_steps(text) == steps


@pytest.mark.parametrize(("text", "says"), [
    ("25,5", "not strictly increasing"),
    ("5,5,50", "not strictly increasing"),
    ("0,50", "outside 1-100"),
    ("5,101", "outside 1-100"),
    ("-5,50", "outside 1-100"),
    ("5,,50", "comma-separated"),
    ("", "comma-separated"),
    ("5,half", "not a whole percentage"),
    ("5.5,50", "not a whole percentage"),
])
def test_bad_steps_say_what_is_wrong(text: str, says: str) -> None:
    with pytest.raises(InvalidSteps, match=says):
        parse_steps(text)


def test_bad_steps_are_plan_and_platform_errors() -> None:
    from common import PlatformError

    with pytest.raises(InvalidPlan):
        parse_steps("50,5")
    assert issubclass(InvalidSteps, PlatformError)


def test_plan_validates_itself() -> None:
    plan = Plan(steps_pct=(5, 25, 50), interval_s=30.0, failure_limit=1)
    assert plan.weight_at(1) == 25
    assert plan.is_last(2) and not plan.is_last(1)
    with pytest.raises(InvalidSteps):
        Plan(steps_pct=(50, 25))
    with pytest.raises(InvalidPlan, match="interval"):
        Plan(interval_s=0)
    with pytest.raises(InvalidPlan, match="failure limit"):
        Plan(failure_limit=0)
