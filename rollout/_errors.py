"""The rollout's branch of the error tree, in one picture.

    PlatformError                      the one root (registry): modelctl exits 2
    └── RolloutError                   a rollout, its analysis or its traffic is wrong
        ├── AnalysisSpecError          the analysis file is wrong: unknown key, bad
        │                              template, a query the metric source rejects
        ├── MetricSourceError          the metric source could not answer; the
        │   │                          analysis turns it into Inconclusive *data*
        │   ├── SourceUnreachableError no connection, or no answer in time
        │   └── BadQueryError          the source rejected the query itself (Prometheus
        │                              400 bad_data); the analysis raises it as an
        │                              AnalysisSpecError naming the metric
        ├── InvalidPlan                steps, interval or failure limit are wrong
        │   └── InvalidSteps           steps not strictly increasing, or outside 1-100
        ├── InvalidTransition          the command does not fit the rollout's phase
        ├── NotReady                   the canary is not Ready, so it cannot take more traffic
        ├── LeaseHeld                  another `run` holds the rollout's lease
        ├── UnknownBackend             no traffic backend by that name
        ├── UnsupportedTarget          the InferenceService has a shape we cannot roll out
        └── KubeError                  the Kubernetes API refused us or could not be reached
            ├── KubeConfigError        no usable kubeconfig / context
            ├── NotFound               no such object (HTTP 404)
            └── Conflict               it changed between our read and our write (HTTP 409)

Every one is an expected failure: ``modelctl`` prints its message as one line on
stderr and exits 2 (``cli/_errors.py`` maps every ``PlatformError`` to 2; the local
backend's ``devstack.DevEnvError`` and the shadow gate's ``shadow.ShadowGateError``
are ``PlatformError``s too). Exit codes 1 and 3 are outcomes, not errors: ``rollout
run`` exits 1 when it rolled back and 3 when its deadline passed first; ``promote``
and ``rollback`` exit 3 when the change is not in effect within ``--timeout``.
"""

from __future__ import annotations

from common import PlatformError


class RolloutError(PlatformError):
    """Something about a rollout, its analysis or its traffic is wrong."""


class AnalysisSpecError(RolloutError):
    """An analysis file (or one of its metric checks) is invalid; the message names the metric."""


class MetricSourceError(RolloutError):
    """The metric source failed to answer a query (network, HTTP error, malformed reply)."""


class SourceUnreachableError(MetricSourceError):
    """The metric source could not be reached, or did not answer within the timeout."""


class BadQueryError(MetricSourceError):
    """The metric source refused the query as invalid; retrying will not help."""


# -- traffic, Kubernetes and the step engine ---------------------------------------


class InvalidPlan(RolloutError):
    """The step plan (steps, interval, failure limit) is invalid."""


class InvalidSteps(InvalidPlan):
    """Steps are not strictly increasing whole percentages within 1-100."""


class InvalidTransition(RolloutError):
    """The command makes no sense for the rollout's current phase."""


class NotReady(RolloutError):
    """The canary revision is not Ready, so it cannot take more traffic."""


class LeaseHeld(RolloutError):
    """Another `run` holds the rollout's lease and it has not expired."""


class UnknownBackend(RolloutError):
    """No traffic backend is registered under that name."""


class UnsupportedTarget(RolloutError):
    """The InferenceService is shaped in a way modelctl cannot roll out."""


class KubeError(RolloutError):
    """The Kubernetes API refused a request or could not be reached."""


class KubeConfigError(KubeError):
    """No usable kubeconfig, context or in-cluster configuration."""


class NotFound(KubeError):
    """The object asked for does not exist (HTTP 404)."""


class Conflict(KubeError):
    """The object changed between our read and our write (HTTP 409): re-read, re-decide."""
