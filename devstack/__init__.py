"""The one-machine stack of ``modelctl dev``: predictors, an nginx gateway, Prometheus
(and, in queue mode, a redis-server with frontends and workers per role).

``DevEnv`` is one named environment: its state file (the PIDs, ports and routes of
what it started) and its folders. The lifecycle is four functions over it: ``up``
(start what ``UpSpec`` names; ``QueueSpec`` shapes its queue mode), ``wait_ready``,
``status_doc`` and ``down`` (stop the processes it owns). The nginx gateway splits
traffic between stable and canary (the ``local`` traffic backend drives it). Every
process is started by us and stopped by PID.
"""

from devstack._env import DevEnv
from devstack._errors import DevEnvError, DevEnvNotFound, DevEnvRunning
from devstack._lifecycle import UpSpec, down, status_doc, up, wait_ready
from devstack._predictor import QueueSpec

__all__ = [
    "DevEnv",
    "DevEnvError",
    "DevEnvNotFound",
    "DevEnvRunning",
    "QueueSpec",
    "UpSpec",
    "down",
    "status_doc",
    "up",
    "wait_ready",
]
