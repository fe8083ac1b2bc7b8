"""Analysis of one rollout step: which PromQL to ask, who answers it, and the judge.

An ``AnalysisSpec`` (the strict YAML file, ``default_analysis.yaml`` when none is
given) names metric checks; an ``Analysis`` runs them through a ``MetricSource``
(``PrometheusSource`` in clusters and in ``modelctl dev``), canary against stable,
and the pure judge turns the samples into ``MetricResult``s and one ``Verdict``. A
source that cannot answer is data (an Inconclusive result), never an exception
that stops the step loop. ``analysis_spec`` and ``prepare_analysis`` are the one way
the commands choose a spec and build and check an analysis over Prometheus.
"""

from typing import TYPE_CHECKING

from common import lazy_exports as _lazy_exports
from rollout.analysis._results import (
    AnalysisContext,
    AnalysisResult,
    Analyzer,
    MetricResult,
    Verdict,
)
from rollout.analysis._source import MetricSource

if TYPE_CHECKING:
    from rollout.analysis._analysis import (
        Analysis,
        AnalysisSpec,
        load_analysis,
        metric_query,
        parse_analysis,
    )
    from rollout.analysis._prometheus import PrometheusSource, redact_url
    from rollout.analysis._setup import analysis_spec, prepare_analysis, stable_traffic_needs

# The analysis pulls in scipy and the Prometheus client (seconds to import); load them
# on first use so that `modelctl rollout status` and friends start fast.
_LAZY = {
    "Analysis": "rollout.analysis._analysis",
    "AnalysisSpec": "rollout.analysis._analysis",
    "load_analysis": "rollout.analysis._analysis",
    "metric_query": "rollout.analysis._analysis",
    "parse_analysis": "rollout.analysis._analysis",
    "PrometheusSource": "rollout.analysis._prometheus",
    "redact_url": "rollout.analysis._prometheus",
    "analysis_spec": "rollout.analysis._setup",
    "prepare_analysis": "rollout.analysis._setup",
    "stable_traffic_needs": "rollout.analysis._setup",
}


__getattr__ = _lazy_exports(__name__, _LAZY)


__all__ = [
    "Analysis",
    "AnalysisContext",
    "AnalysisResult",
    "AnalysisSpec",
    "Analyzer",
    "MetricResult",
    "MetricSource",
    "PrometheusSource",
    "Verdict",
    "analysis_spec",
    "load_analysis",
    "metric_query",
    "parse_analysis",
    "prepare_analysis",
    "redact_url",
    "stable_traffic_needs",
]
