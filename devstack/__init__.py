"""The one-machine stack of ``modelctl dev``: predictors, an nginx gateway, Prometheus.

``DevEnv`` is one named environment: its state file (the PIDs, ports and routes of
what it started), ``up`` / ``down`` / ``status`` over the processes it owns, and the
nginx gateway that splits traffic between stable and canary (which the ``local``
traffic backend drives). Every process is started by us and stopped by PID.
"""

from devstack._env import DevEnv
from devstack._errors import DevEnvError, DevEnvNotFound, DevEnvRunning
from devstack._lifecycle import UpSpec

__all__ = ["DevEnv", "DevEnvError", "DevEnvNotFound", "DevEnvRunning", "UpSpec"]
