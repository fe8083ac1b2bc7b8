"""The root of the project's error tree: every package's errors subclass it.

It lives in ``common`` because ``common`` is the one package every other may import;
each package draws its own branch in its ``_errors.py`` (registry, predictor,
rollout, shadow, captures, accuracy, devstack, deploycheck), and ``cli/_errors.py``
draws the whole tree with the exit code each error gets.

    PlatformError
    ├── InvalidDuration     (common/_durations.py) a duration that does not parse
    ├── RegistryError       (registry/_errors.py)
    ├── PredictorError      (predictor/_errors.py)
    ├── RolloutError        (rollout/_errors.py)
    ├── ShadowError         (shadow/_errors.py)
    ├── CaptureSetupError, CaptureError, LabelError  (captures/_errors.py)
    ├── AccuracyError       (accuracy/_errors.py)
    ├── DevEnvError         (devstack/_errors.py)
    └── DeployError         (deploycheck/_errors.py)
"""

from __future__ import annotations


class PlatformError(Exception):
    """Root of every error modelctl raises on purpose: a user can cause it and
    the edges (HTTP, CLI) turn it into a clear message, never a traceback."""
