"""Loading CRDs: versions indexed by apiVersion and kind, the JSON cache, loud failures."""

from __future__ import annotations

from pathlib import Path

import pytest

from deploycheck import Checker, DeployError, find_crds_dir
from deploycheck._crds import CrdIndex

CRD = """
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.example.com}
spec:
  group: example.com
  scope: Cluster
  names: {kind: Widget, plural: widgets}
  versions:
    - name: v1
      served: true
      storage: true
      schema:
        openAPIV3Schema:
          type: object
          properties:
            spec: {type: object, properties: {size: {type: integer}}}
    - name: v0
      served: false
      storage: false
      schema: {openAPIV3Schema: {type: object}}
"""


def test_index_and_cache(tmp_path: Path) -> None:
    crds, cache = tmp_path / "crds", tmp_path / "cache"
    crds.mkdir()
    (crds / "widgets.yaml").write_text(CRD)
    first = CrdIndex.load(crds, cache)
    widget = first.lookup("example.com/v1", "Widget")
    assert widget is not None and not widget.namespaced and widget.plural == "widgets"
    old = first.lookup("example.com/v0", "Widget")
    assert old is not None and not old.served
    assert first.versions_of_kind("example.com", "Widget") == ["v0", "v1"]
    [cached] = cache.glob("*.json")
    # A torn cache file is parsed again, never trusted.
    cached.write_text('[{"kind": "CustomResource')
    again = CrdIndex.load(crds, cache)
    assert again.lookup("example.com/v1", "Widget") == widget


def test_missing_crds_fail_loudly(tmp_path: Path) -> None:
    with pytest.raises(
        DeployError, match=r"no upstream CRDs at .*: set MODELCTL_CRDS_DIR or pass --crds"
    ):
        find_crds_dir(tmp_path)
    (tmp_path / "not-a-crd.yaml").write_text("kind: ConfigMap\n")
    with pytest.raises(DeployError, match="no CustomResourceDefinition documents"):
        CrdIndex.load(tmp_path)


def test_the_shared_crds_define_what_the_manifests_use(checker: Checker) -> None:
    index = checker.crds
    for api_version, kind in [
        ("serving.kserve.io/v1beta1", "InferenceService"),
        ("serving.kserve.io/v1alpha1", "ClusterServingRuntime"),
        ("monitoring.coreos.com/v1", "PodMonitor"),
        ("monitoring.coreos.com/v1", "PrometheusRule"),
        ("keda.sh/v1alpha1", "ScaledObject"),
    ]:
        assert index.lookup(api_version, kind) is not None, (api_version, kind)
