"""Offline checks and rendering for the Kubernetes manifests (``modelctl deploy``).

Documents are validated as a real API server would with ``kubectl apply``: custom
resources against the upstream CRDs' OpenAPI schemas (unknown fields are errors),
built-in kinds against ``kubernetes-validate``'s strict schemas, then the semantic
rules of ``_rules`` and ``_rbac``. Kustomizations are rendered with real kustomize.
"""

from cli._deploycheck._check import DEFAULT_KUBE_VERSION, CheckConfig, Checker, Report
from cli._deploycheck._errors import DeployError
from cli._deploycheck._locate import (
    find_crds_dir,
    find_kubectl,
    find_kustomize_dir,
    find_rollout_src,
)
from cli._deploycheck._problems import Problem
from cli._deploycheck._render import RenderRequest, overlay_dir, render

__all__ = [
    "DEFAULT_KUBE_VERSION",
    "CheckConfig",
    "Checker",
    "DeployError",
    "Problem",
    "RenderRequest",
    "Report",
    "find_crds_dir",
    "find_kubectl",
    "find_kustomize_dir",
    "find_rollout_src",
    "overlay_dir",
    "render",
]
