"""A fake ``Analyzer`` that answers with scripted verdicts (the engine's view of analysis).

The real analysis (Prometheus, the judge) is tested on its own; engine tests only
need to say "this interval passes, that one fails" and to see what was asked.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from common import PlatformError
from rollout.analysis._results import AnalysisContext, AnalysisResult, MetricResult, Verdict
from rollout.analysis._sequential import Evidence, Tally

# A script item: an Inconclusive that is healthy, its evidence still accumulating.
ACCUMULATING = "accumulating"
Script = Verdict | PlatformError | str


class ScriptedAnalyzer:
    """Returns the next scripted verdict per call (the last one repeats); an error in
    the script is raised instead, as a metric source that cannot be reached would."""

    def __init__(self, script: Iterable[Script], clock: Callable[[], float] = lambda: 0.0):
        self.script = list(script)
        if not self.script:
            raise ValueError("a script needs at least one verdict")
        self.clock = clock
        self.calls: list[AnalysisContext] = []

    def analyze(self, ctx: AnalysisContext) -> AnalysisResult:
        item = self.script[min(len(self.calls), len(self.script) - 1)]
        self.calls.append(ctx)
        if isinstance(item, PlatformError):
            raise item
        accumulating = item == ACCUMULATING
        verdict = Verdict.INCONCLUSIVE if accumulating else Verdict(item)
        canary = {Verdict.PASS: 0.001, Verdict.FAIL: 0.08, Verdict.INCONCLUSIVE: None}[verdict]
        metric = MetricResult(
            name="error_rate", verdict=verdict, canary=0.001 if accumulating else canary,
            stable=0.001, threshold=0.01,
            reason="" if verdict is Verdict.PASS else f"scripted {item}",
            statistics={"canary_requests": 500.0, "stable_requests": 4500.0},
            accumulating=accumulating,
        )
        # Each analysis adds one interval to the evidence it was given, as the judge does.
        evidence = ctx.evidence.get("error_rate", Evidence()).plus(Tally(500, 0), Tally(4500, 0))
        return AnalysisResult(verdict=verdict, metrics=(metric,), at=self.clock(),
                              evidence={"error_rate": evidence})
