"""A port of KServe's admission webhooks, for ``deploy validate`` without a cluster.

One module per part of KServe's ``pkg/apis/serving`` (v1beta1 and v1alpha1), each citing
the functions it follows: ``_isvc`` (the InferenceService validator, which calls the
rest), ``_component`` (the predictor's implementations and their fields), ``_scaling``
(replicas and autoscalers), ``_storage`` (storage URIs and specs), ``_canary``
(``spec.canary[]``) and ``_trainedmodel`` (the TrainedModel validator).
``tests/system/kserve/test_overlays_on_kserve.py`` checks that it agrees with KServe's
real webhooks on every overlay.
"""

from deploycheck.webhook._isvc import (
    RULE,
    admit_inferenceservice,
    is_inference_service,
    webhook_findings,
)
from deploycheck.webhook._trainedmodel import (
    admit_trainedmodel,
    is_trained_model,
    trainedmodel_findings,
)

__all__ = [
    "RULE",
    "admit_inferenceservice",
    "admit_trainedmodel",
    "is_inference_service",
    "is_trained_model",
    "trainedmodel_findings",
    "webhook_findings",
]
