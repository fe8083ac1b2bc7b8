"""The one place an analysis is chosen, built over Prometheus and checked before it is used.

Chosen: the ``--analysis`` file, else the one stored with the rollout at start, else
the shipped default for the kind of model the canary is (its registry task, stored
with the rollout at start): ``llm`` gets the generative default (TTFT and TPOT), any
other task the request-latency one.

Every command that analyses (``rollout start`` with ``--prometheus-url``,
``analyze``, ``run``) goes through here, so each picks its spec the same way and
fails the same way, before anything is written: a bad file or stored spec is an
``AnalysisSpecError``, no Prometheus a ``RolloutError``, a query Prometheus rejects an
``AnalysisSpecError`` naming the metric, a Prometheus that cannot answer a
``MetricSourceError``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from rollout._errors import RolloutError
from rollout.analysis._analysis import Analysis, AnalysisSpec, load_analysis, parse_analysis
from rollout.analysis._judge import StatTest
from rollout.analysis._prometheus import PrometheusSource
from rollout.analysis._results import AnalysisContext
from rollout.analysis._traffic import TrafficNeeds, traffic_needs

NO_PROMETHEUS = ("no Prometheus to analyse with: pass --prometheus-url or set "
                 "MODELCTL_PROMETHEUS_URL")


def analysis_spec(path: str | Path | None = None, *, stored: str | None = None,
                  stored_source: str = "the stored analysis",
                  task: str | None = None) -> AnalysisSpec:
    """The spec in the file at ``path``, else the YAML ``stored`` with a rollout (named
    ``stored_source`` in errors), else the shipped default for the canary's registry
    ``task`` (``default_analysis_llm.yaml`` for ``llm``, else ``default_analysis.yaml``)."""
    if path is not None:
        return load_analysis(path)
    if stored is not None:
        return parse_analysis(stored, source=stored_source)
    return load_analysis(None, task=task)


def prepare_analysis(spec: AnalysisSpec, prometheus_url: str | None,
                     ctx: AnalysisContext) -> Analysis:
    """``spec`` over the Prometheus at ``prometheus_url``, every query asked once for
    ``ctx`` (``Analysis.validate``) so that a wrong one fails now, not at a step."""
    if not prometheus_url:
        raise RolloutError(NO_PROMETHEUS)
    analysis = Analysis(spec, PrometheusSource(prometheus_url))
    analysis.validate(ctx)
    return analysis


def stable_traffic_needs(analysis: Analysis, ctx: AnalysisContext,
                         steps_pct: Sequence[int]) -> TrafficNeeds | None:
    """What the plan needs, at the traffic stable serves now (its requests over the last
    interval, and its rate for each rate check; no series is no requests); None when
    the source could not measure stable."""
    requests, rates = 0.0, {}
    for metric in analysis.spec.metrics:
        if metric.check.test is StatTest.NONE or metric.count_query is None:
            continue
        seen = analysis.measure(metric, ctx, "stable")
        if seen.error is not None:
            return None
        if seen.requests is None:  # no series at all: no requests yet
            continue
        requests = max(requests, seen.requests)
        if metric.check.test is StatTest.TWO_PROPORTION and seen.requests > 0:
            rates[metric.name] = min(max(seen.events or 0.0, 0.0), seen.requests) / seen.requests
    return traffic_needs(analysis.spec, steps_pct, requests, rates)
