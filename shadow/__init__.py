"""Shadow traffic: mirror a candidate version, then judge it offline from captures.

``start_shadow`` / ``stop_shadow`` add and remove the shadow InferenceService and
its mirroring; the predictors capture each exchange (``predictor.tap``, in the schema
of ``captures``, the one package both import); and
``build_report`` joins primary and shadow captures by request ID, scores agreement
per task, latency and errors against ``Thresholds``, and says Pass, Fail or
Inconclusive. ``require_shadow_pass`` is the gate a rollout start can demand.
"""

from captures import CaptureError
from shadow._deploy import ShadowChange, start_shadow, stop_shadow
from shadow._errors import ShadowError, ShadowGateError, ThresholdsError
from shadow._gate import require_shadow_pass
from shadow._report import ReportRequest, ShadowReport, build_report, parse_time
from shadow._thresholds import Thresholds, load_thresholds

__all__ = [
    "CaptureError",
    "ReportRequest",
    "ShadowChange",
    "ShadowError",
    "ShadowGateError",
    "ShadowReport",
    "Thresholds",
    "ThresholdsError",
    "build_report",
    "load_thresholds",
    "parse_time",
    "require_shadow_pass",
    "start_shadow",
    "stop_shadow",
]
