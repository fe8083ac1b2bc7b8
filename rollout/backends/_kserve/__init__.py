"""The ``kserve`` backend: InferenceServices on Kubernetes, in Knative and Standard mode.

``_backend`` is the adapter (``KServeBackend``); ``_knative`` and ``_standard`` read
and change each deployment mode; ``_state_store`` keeps the rollout state in a
ConfigMap beside the InferenceService; ``_kube`` is the thin client over the
official ``kubernetes`` package that all of them use.
"""

from rollout.backends._kserve._backend import KServeBackend
from rollout.backends._kserve._kube import KubeClient

__all__ = ["KServeBackend", "KubeClient"]
