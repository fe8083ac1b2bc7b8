"""The dev stack's branch of the error tree.

    PlatformError            (registry)
    └── DevEnvError          a process would not start, nginx refused a config, ...
        ├── DevEnvNotFound   no environment of that name is up
        └── DevEnvRunning    `modelctl dev up` while that environment runs

The CLI maps every one of them to exit code 2 (``cli/_errors.py``).
"""

from __future__ import annotations

from common import PlatformError


class DevEnvError(PlatformError):
    """The dev environment is missing, broken, or cannot do what was asked."""


class DevEnvNotFound(DevEnvError):
    """No dev environment of that name has been brought up (or it was taken down)."""


class DevEnvRunning(DevEnvError):
    """The dev environment is already up."""
