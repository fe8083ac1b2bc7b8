"""What traffic a rollout's plan needs before its analysis can promote: checked at
``rollout start``, so that a rollout that would hold forever says so at once.

Pure: the caller measures the traffic (requests per interval, and stable's rates for
the rate checks) and passes it in. Two needs, for every metric with a test:

* ``min_requests`` at every step: the canary's share of an interval's requests (and
  stable's) must reach it, or the analysis is Inconclusive at that step forever;
* the sequential judge's evidence (rate checks with a ``max_increase``): how many
  canary requests an A/A canary needs before the rollout's evidence bounds the
  regression within the tolerance (``canary_requests_needed``), and how many
  intervals that takes at this traffic, one interval a step and then more at the
  last step's weight.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from rollout.analysis._analysis import AnalysisSpec, JudgeKind
from rollout.analysis._judge import StatTest
from rollout.analysis._sequential import canary_requests_needed


@dataclass(frozen=True)
class TrafficNeeds:
    """The answer: whether the plan can ever promote at this traffic, and why not."""

    requests_per_interval: float
    min_requests_per_interval: float  # the least at which no step holds forever
    intervals_to_promote: int | None  # expected for an A/A canary; None: never
    notes: tuple[str, ...]

    @property
    def holds_forever(self) -> bool:
        return self.intervals_to_promote is None


def traffic_needs(spec: AnalysisSpec, steps_pct: Sequence[int], requests_per_interval: float,
                  stable_rates: Mapping[str, float]) -> TrafficNeeds:
    """What ``spec`` over a plan of ``steps_pct`` needs at ``requests_per_interval``;
    ``stable_rates`` holds stable's current rate for each rate check, by name."""
    r = max(requests_per_interval, 0.0)
    tested = [m for m in spec.metrics if m.check.test is not StatTest.NONE]
    least, notes = 0.0, []
    for metric in tested:
        need = metric.check.min_requests
        if need <= 0:
            continue
        for weight in steps_pct:
            share = min(weight, 100 - weight) / 100 if weight < 100 else weight / 100
            least = max(least, need / share)
            if r * share < need:
                who = "canary" if weight <= 50 else "stable"
                notes.append(f"{metric.name}: at {weight}% the {who} gets {r * share:.0f} "
                             f"requests an interval, under min_requests {need:g}; the "
                             f"rollout would hold there. It needs at least {need / share:.0f} "
                             "requests an interval")
                break
    if not notes and r <= 0 and tested:
        notes.append("no requests: the analysis has nothing to judge; the rollout would hold")
    if notes:
        return TrafficNeeds(r, least, None, tuple(notes))
    intervals = len(steps_pct)
    last = steps_pct[-1] / 100
    if spec.judge is JudgeKind.SEQUENTIAL and 0 < last < 1:
        for metric in tested:
            check = metric.check
            if check.test is not StatTest.TWO_PROPORTION or check.max_increase is None:
                continue
            rate = stable_rates.get(metric.name, 0.0)
            needed = canary_requests_needed(rate, last, check.max_increase, check.beta)
            if needed is None:
                notes.append(f"{metric.name}: a tolerance of {check.max_increase:g} can "
                             "never be shown; the rollout will not promote")
                return TrafficNeeds(r, least, None, tuple(notes))
            seen = sum(r * w / 100 for w in steps_pct)
            more = max(0, math.ceil((needed - seen) / (r * last)))
            intervals = max(intervals, len(steps_pct) + more)
            notes.append(f"{metric.name}: promotion needs about {needed:.0f} canary requests "
                         f"(stable at {rate:.3%}, tolerance {check.max_increase:g}): "
                         f"{len(steps_pct)} steps and {more} more interval(s) at "
                         f"{steps_pct[-1]}% at {r:.0f} requests an interval")
    return TrafficNeeds(r, least, intervals, tuple(notes))
