"""A fake ``Analyzer`` that answers with scripted verdicts (the engine's view of analysis).

The real analysis (Prometheus, the judge) is tested on its own; engine tests only
need to say "this interval passes, that one fails" and to see what was asked.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from common import PlatformError
from rollout.analysis._results import AnalysisContext, AnalysisResult, MetricResult, Verdict

Script = Verdict | PlatformError


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
        canary = {Verdict.PASS: 0.001, Verdict.FAIL: 0.08, Verdict.INCONCLUSIVE: None}[item]
        metric = MetricResult(
            name="error_rate", verdict=item, canary=canary, stable=0.001, threshold=0.01,
            reason="" if item is Verdict.PASS else f"scripted {item.value}",
            statistics={"canary_requests": 500.0, "stable_requests": 4500.0},
        )
        return AnalysisResult(verdict=item, metrics=(metric,), at=self.clock())
