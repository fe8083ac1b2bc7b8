"""The rollout Role's verbs are derived from the rollout code: the scanner, the
comparison, and the real check against rollout/."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from deploycheck._rbac import check_role, scan_sources
from tests.support.manifests import FIXTURES, ROLLOUT_OK, ROOT, load_all

ROLE_FILE = ROOT / "manifests" / "30-rollout-rbac.yaml"


def role() -> dict[str, Any]:
    return next(d for d in load_all(ROLE_FILE.read_text()) if d["kind"] == "Role")


def test_scanner_maps_calls_to_permissions() -> None:
    uses, unresolved = scan_sources(ROLLOUT_OK)
    assert sorted((u.group, u.resource, u.verb) for u in uses) == [
        ("", "configmaps", "create"),
        ("", "configmaps", "get"),
        ("", "configmaps", "update"),
        ("", "events", "create"),
        ("", "events", "list"),
        ("apps", "deployments", "create"),
        ("apps", "deployments", "delete"),
        ("apps", "deployments", "get"),
        ("apps", "deployments", "patch"),
        ("autoscaling", "horizontalpodautoscalers", "delete"),
        ("autoscaling", "horizontalpodautoscalers", "get"),
        ("gateway.networking.k8s.io", "httproutes", "get"),
        ("keda.sh", "scaledobjects", "create"),
        ("keda.sh", "scaledobjects", "delete"),
        ("keda.sh", "scaledobjects", "get"),
        ("keda.sh", "scaledobjects", "patch"),
        ("serving.knative.dev", "revisions", "get"),
        ("serving.kserve.io", "inferenceservices", "create"),
        ("serving.kserve.io", "inferenceservices", "delete"),
        ("serving.kserve.io", "inferenceservices", "get"),
        ("serving.kserve.io", "inferenceservices", "patch"),
    ]
    assert unresolved == []


def test_scanner_handles_status_watch_and_refuses_to_guess() -> None:
    uses, unresolved = scan_sources(FIXTURES / "rollout_src" / "tricky")
    assert sorted((u.group, u.resource, u.verb) for u in uses) == [
        ("", "pods/log", "get"),
        ("serving.kserve.io", "inferenceservices", "list"),
        ("serving.kserve.io", "inferenceservices", "watch"),
        ("serving.kserve.io", "inferenceservices/status", "patch"),
    ]
    assert len(unresolved) == 2
    assert "(delete_namespaced_custom_object): cannot tell group=/plural=" in unresolved[0]
    assert "(list_cluster_custom_object) is cluster-wide" in unresolved[1]


def test_manifest_role_matches_the_fixture_source() -> None:
    assert check_role(role(), ROLLOUT_OK) == []


def test_role_without_source_or_cluster_wide_is_refused(tmp_path: Path) -> None:
    [finding] = check_role(role(), tmp_path / "missing")
    assert "cannot derive the rollout's verbs" in finding.message
    [finding] = check_role({**role(), "kind": "ClusterRole"}, ROLLOUT_OK)
    assert "namespaced Role, not a ClusterRole" in finding.message
    wildcard = {**role(), "rules": [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}]}
    messages = [f.message for f in check_role(wildcard, ROLLOUT_OK)]
    assert messages[0].startswith("wildcards grant more")


def test_manifest_role_matches_the_real_rollout_code() -> None:
    # No skip when the client moves: a Role checked against no code would pass blind
    # (it did, silently, for a while after a move).
    assert (ROOT / "rollout" / "backends" / "_kserve" / "_kube.py").is_file()
    assert [f.message for f in check_role(role(), ROOT / "rollout")] == []
