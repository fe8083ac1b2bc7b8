"""``modelctl rollout start --require-shadow-pass``: a rollout only after a passing shadow report.

The report is the one ``modelctl shadow report ... --save-to-registry`` stores next to
the shadow's version in the registry (``<root>/<model>/reports/<version>/shadow.json``).
"""

from __future__ import annotations

from typing import Any, Protocol

from shadow._errors import ShadowGateError
from shadow._report import REPORT_KIND, REPORT_NAME


class ReportStore(Protocol):
    """The part of ``registry.Registry`` the gate reads."""

    def get_report(self, model: str, ref: str | int, name: str) -> dict[str, Any] | None: ...


def require_shadow_pass(registry: ReportStore, model: str, version: int) -> dict[str, Any]:
    """The stored passing report for ``model@version``; ShadowGateError if there is none."""
    report = registry.get_report(model, version, REPORT_NAME)
    if report is None:
        raise ShadowGateError(
            f"no shadow report for {model}@{version} in the registry: mirror traffic to it "
            f"(modelctl shadow start) and store a passing report (modelctl shadow report "
            f"{model} ... --save-to-registry) first")
    if (report.get("kind") != REPORT_KIND or report.get("model") != model
            or str(report.get("shadow_version")) != str(version)):
        raise ShadowGateError(f"the shadow report stored for {model}@{version} is not about "
                              "that version; store it again with --save-to-registry")
    verdict = report.get("verdict")
    if verdict != "Pass":
        failing = [c.get("name") for c in report.get("checks") or []
                   if isinstance(c, dict) and c.get("verdict") != "Pass"]
        detail = f" ({', '.join(str(n) for n in failing)})" if failing else ""
        raise ShadowGateError(f"the shadow report for {model}@{version} says {verdict}"
                              f"{detail}, not Pass; refusing to start the rollout")
    return report
