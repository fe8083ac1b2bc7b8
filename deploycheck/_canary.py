"""The predictor a Standard-mode canary entry runs: the stable predictor with the entry
merged over it, as KServe builds it.

KServe aaac4e294, ``pkg/controller/v1beta1/inferenceservice/components/predictor.go``:
``buildCanaryPredictor`` deep-copies the stable predictor and merges the entry's
predictor over it with ``mergo.Merge(..., mergo.WithOverride)``, then zeroes the
autoscaling fields (maxReplicas, scaleTarget, scaleMetric, autoScaling) and sets
minReplicas to ``canaryReplicaCount``: the entry's own minReplicas, else
``ceil(stable minReplicas (default 1) x trafficPercent / 100)``.

mergo with override, on JSON: objects merge key by key; any other value the entry sets
replaces the stable's, lists whole (an entry's ``args`` is the canary's complete list,
not an addition); empty values (null, "", 0, false, [], {}) replace nothing.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping
from typing import Any

_ZEROED = ("maxReplicas", "scaleTarget", "scaleMetric", "autoScaling")


def _is_empty(value: Any) -> bool:
    return value is None or value is False or value in ("", 0) or value == [] or value == {}


def merge_override(base: Any, over: Any) -> Any:
    """``over`` merged onto ``base`` the way mergo.WithOverride merges Go structs."""
    if isinstance(base, Mapping) and isinstance(over, Mapping):
        merged = {key: copy.deepcopy(value) for key, value in base.items()}
        for key, value in over.items():
            merged[key] = merge_override(merged.get(key), value)
        return merged
    if _is_empty(over):
        return copy.deepcopy(base)
    return copy.deepcopy(over)


def canary_replicas(stable: Mapping[str, Any], canary: Mapping[str, Any]) -> int:
    """``canaryReplicaCount``."""
    own = (canary.get("predictor") or {}).get("minReplicas")
    if isinstance(own, int):
        return own
    stable_min = stable.get("minReplicas")
    stable_min = stable_min if isinstance(stable_min, int) else 1
    percent = canary.get("trafficPercent")
    percent = percent if isinstance(percent, int) else 0
    return math.ceil(stable_min * percent / 100)


def canary_predictor(stable: Mapping[str, Any], canary: Mapping[str, Any]) -> dict[str, Any]:
    """``buildCanaryPredictor``: what the canary Deployment is built from."""
    entry = canary.get("predictor")
    merged: dict[str, Any] = merge_override(
        dict(stable), entry if isinstance(entry, Mapping) else {}
    )
    for key in _ZEROED:
        merged.pop(key, None)
    merged["minReplicas"] = canary_replicas(stable, canary)
    return merged
