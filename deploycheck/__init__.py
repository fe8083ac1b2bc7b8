"""Offline checks and rendering for the Kubernetes manifests (``modelctl deploy``).

Documents are validated as a real API server would with ``kubectl apply``: custom
resources against the upstream CRDs' OpenAPI schemas (unknown fields are errors),
built-in kinds against ``kubernetes-validate``'s strict schemas, then the semantic
rules of ``_rules`` and ``_rbac``, and KServe's validating webhooks for InferenceServices
(``webhook``: ``admit_inferenceservice``) and TrainedModels (``webhook``:
``admit_trainedmodel``). The CRDs come from a folder, or from the
cluster a kubeconfig points at (``find_crds``). Kustomizations are rendered with real
kustomize; ``apply_plan`` writes a capacity plan's numbers into rendered objects.
"""

from deploycheck._check import (
    DEFAULT_KUBE_VERSION,
    CheckConfig,
    Checker,
    Report,
    find_crds,
)
from deploycheck._errors import DeployError
from deploycheck._locate import (
    find_crds_dir,
    find_kubectl,
    find_kustomize_dir,
    find_rollout_src,
)
from deploycheck._plan import PlanValues, apply_plan
from deploycheck._problems import Problem
from deploycheck._render import RenderRequest, overlay_dir, render
from deploycheck.webhook import admit_inferenceservice, admit_trainedmodel

__all__ = [
    "DEFAULT_KUBE_VERSION",
    "CheckConfig",
    "Checker",
    "DeployError",
    "PlanValues",
    "Problem",
    "RenderRequest",
    "Report",
    "admit_inferenceservice",
    "admit_trainedmodel",
    "apply_plan",
    "find_crds",
    "find_crds_dir",
    "find_kubectl",
    "find_kustomize_dir",
    "find_rollout_src",
    "overlay_dir",
    "render",
]
