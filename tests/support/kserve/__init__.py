"""A port of KServe's controller (kserve/kserve aaac4e294) and of the cluster under it, for
tests against the emulated Kubernetes API of ``tests/support/kube_api.py``.

Each module names the upstream files and functions it follows. Deliberately not
emulated (nothing in modelctl depends on them, or they need what the stand-in lacks):
ServingRuntime lookup and container merging (``_resources`` renders a stand-in pod spec
instead, so ``servingRuntimeName`` is never written), storage URI validation, the
mutating (defaulting) webhook, the ``inferenceservice.finalizers`` finalizer (a deleted
InferenceService goes at once; owned objects are garbage-collected), force stop
(``serving.kserve.io/stop``), transformers, explainers, multi-node (``workerSpec``),
ModelMesh, KEDA, logger/batcher/agent/storage-spec annotations, Istio VirtualServices,
Pods and ReplicaSets as API objects (kept in memory), HPA status and metrics.

Source: github.com/kserve/kserve at aaac4e294 (``pkg/controller/v1beta1/inferenceservice``,
``pkg/apis/serving/v1beta1``, ``pkg/constants/constants.go``), with knative/serving and
kubernetes/kubernetes for the controllers under it.
"""

from tests.support.kserve._api import (
    CONFIGURATION,
    DEPLOYMENT,
    HPA,
    HTTPROUTE,
    INGRESS,
    ISVC,
    KSVC,
    REVISION,
    ROUTE,
    SERVICE,
    Kind,
)
from tests.support.kserve.config import KSERVE_DEFAULTS, KServeConfig
from tests.support.kserve.sim import KServeSim

__all__ = [
    "CONFIGURATION",
    "DEPLOYMENT",
    "HPA",
    "HTTPROUTE",
    "INGRESS",
    "ISVC",
    "KSERVE_DEFAULTS",
    "KSVC",
    "REVISION",
    "ROUTE",
    "SERVICE",
    "KServeConfig",
    "KServeSim",
    "Kind",
]
