"""The CLI's one edge table: which errors become which exit codes.

Expected failures print one line on stderr and exit 2 (usage, input, cluster or
store errors); nothing else is printed, no traceback. The whole tree, each branch
drawn in full in its own module:

    BaseException
    ├── PlatformError                (common/_errors.py)             exit 2
    │   ├── InvalidDuration          (common/_durations.py)          exit 2
    │   │                            a duration flag that does not parse
    │   ├── RegistryError            (registry/_errors.py)           exit 2
    │   │                            names, refs, manifests, the store
    │   ├── PredictorError           (predictor/_errors.py)          exit 2
    │   │                            serving (its HTTP edge maps it to status codes)
    │   ├── RolloutError             (rollout/_errors.py)            exit 2
    │   │                            plan, analysis, traffic backends, Kubernetes
    │   ├── ShadowError              (shadow/_errors.py)             exit 2
    │   │                            mirroring, thresholds, the shadow gate
    │   ├── CaptureError             (captures/_errors.py)           exit 2
    │   │                            captures or labels that cannot be read or
    │   │                            evaluated (CaptureSetupError: the location;
    │   │                            LabelError: a label that is not well-formed)
    │   ├── AccuracyError            (accuracy/_errors.py)           exit 2
    │   │                            a feedback push or report asked for wrongly
    │   ├── DevEnvError              (devstack/_errors.py)           exit 2
    │   │                            the one-machine stack of `modelctl dev`
    │   ├── DeployError              (deploycheck/_errors.py)        exit 2
    │   │                            rendering and checking the manifests
    │   ├── ProfileError             (capacity/_profile.py)          exit 2
    │   │                            profiles, plans and their inputs
    │   └── LoadgenError             (bench/loadgen/_spec.py)        exit 2
    │                                the load `modelctl dev load` offers
    ├── KeyboardInterrupt                                            exit 130
    └── anything else                a bug: the traceback is shown

Exit codes 1 and 3 are outcomes, not errors, and the commands raise them themselves:
``rollout run`` (1 rolled back, 3 not done by the deadline), ``rollout promote`` and
``rollback`` (3 not done in time), ``shadow report`` (1 Fail, 3 Inconclusive).
``deploy render`` / ``deploy validate`` and ``registry verify`` list their problems
and exit 2.
"""

from __future__ import annotations

import sys

from common import PlatformError

EXIT_USAGE = 2
EXIT_INTERRUPTED = 130


def exit_code_for(exc: BaseException) -> int | None:
    """The exit code for an expected error, or None if it is a bug."""
    if isinstance(exc, PlatformError):
        return EXIT_USAGE
    if isinstance(exc, KeyboardInterrupt):
        return EXIT_INTERRUPTED
    return None


def report(exc: BaseException) -> None:
    message = str(exc) or exc.__class__.__name__
    sys.stderr.write(f"error: {message}\n")
