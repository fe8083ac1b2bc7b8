"""The deploy checker's branch of the error tree.

PlatformError            (registry._errors)
└── DeployError          a tool, schema folder, overlay or name the user named is wrong
"""

from __future__ import annotations

from registry import PlatformError


class DeployError(PlatformError):
    """Rendering or checking manifests cannot proceed (missing kubectl, CRDs, overlay...)."""
