"""``deploy render --plan FILE``: read a capacity plan and check it is for what is rendered.

Only reading and checking live here; ``deploycheck.apply_plan`` writes the numbers.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from deploycheck import PlanValues


def load_plan(path: Path, model: str, version: int) -> PlanValues:
    """The plan in ``path`` as deploycheck's plain values; it must be for ``model`` at
    ``version``. Anything else raises a PlatformError (exit 2, one line)."""
    from capacity import PlanFile, ProfileError
    from deploycheck import DeployError, PlanValues

    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise DeployError(f"--plan {path}: {exc.strerror or exc}") from None
    try:
        data = json.loads(raw)
    except ValueError:  # not JSON (or not UTF-8)
        raise ProfileError(f"--plan {path}: not JSON, so not a modelctl plan (write one "
                           "with `modelctl plan NAME@REF ... --json > plan.json`)") from None
    try:
        plan = PlanFile.from_json(data)
    except ProfileError as exc:
        raise ProfileError(f"--plan {path}: {exc}") from None
    if (plan.model, plan.version) != (model, version):
        raise DeployError(f"--plan {path} is for {plan.model}@{plan.version}, but "
                          f"{model}@{version} is being rendered: plan that version")
    knobs, replicas, targets = plan.knobs, plan.replicas, plan.autoscaler
    return PlanValues(
        mode=plan.mode,
        max_batch_size=knobs.max_batch_size,
        max_batch_wait_ms=knobs.max_batch_wait_ms,
        max_queue_size=knobs.max_queue_size,
        request_timeout_ms=knobs.request_timeout_ms,
        min_replicas=replicas.min,
        max_replicas=replicas.max,
        scale_target=targets.scale_target,
        target_utilization_percentage=targets.target_utilization_percentage,
        activation_scale=targets.activation_scale,
        lag_per_worker=targets.lag_per_worker,
        activation_lag=targets.activation_lag,
        queue_claim_timeout_ms=knobs.queue_claim_timeout_ms,
        torch_threads=knobs.torch_threads,
    )
