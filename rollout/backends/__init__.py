"""Traffic backends: one small ``TrafficBackend`` Protocol, one adapter per system.

``make_backend(name, ...)`` is the one way to build one: ``kserve`` (InferenceServices
on Kubernetes, Knative and Standard modes, through the official client) or ``local``
(the nginx gateway of ``modelctl dev``). A backend observes where traffic goes
(``Observation``) and applies the changes the engine decides (``Deploy``,
``SetWeight``, ``Promote``, ``Rollback``, ``SaveState``); it knows nothing of the
analysis or the plan.
"""

from rollout.backends._factory import backend_names, make_backend
from rollout.backends._interface import (
    Change,
    Deploy,
    Observation,
    Promote,
    Rollback,
    SaveState,
    Served,
    SetWeight,
    TrafficBackend,
)
from rollout.backends._kserve import KServeBackend, KubeClient
from rollout.backends._local import LocalNginxBackend

__all__ = [
    "Change",
    "Deploy",
    "KServeBackend",
    "KubeClient",
    "LocalNginxBackend",
    "Observation",
    "Promote",
    "Rollback",
    "SaveState",
    "Served",
    "SetWeight",
    "TrafficBackend",
    "backend_names",
    "make_backend",
]
