"""The tenants overlay (issue 34) means what it says: the predictor runs with the tenants
file from a Secret volume (a directory mount, which sees the Secret's updates), gRPC off
(the tenant check guards HTTP only), and a DestinationRule that hashes each request's
Authorization header onto the replicas of the rendered InferenceService. Rendered with
real kustomize through ``deploy render``'s code; the args go through the predictor's own
parser and config checks; the Secret template holds a file the predictor reads."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from common.tenants import read_tenants
from deploycheck import Checker, RenderRequest, find_kubectl, render
from predictor._config import ServerConfig, tenant_problems
from tests.manifests.test_multi_model_overlay import fake_uri, one
from tests.manifests.test_overlays import effective_args, parse
from tests.support.manifests import OVERLAYS, ROOT, load_all

TEMPLATE = ROOT / "manifests" / "templates" / "tenants-secret.yaml"


@pytest.fixture(scope="module", params=[(None, None), ("chat", "prod")],
                ids=["plain", "named"])
def docs(request: pytest.FixtureRequest) -> list[dict[str, Any]]:
    name, namespace = request.param
    return render(RenderRequest("demo-chat", "stable", "tenants", namespace=namespace,
                                name=name), OVERLAYS / "tenants", find_kubectl(), fake_uri)


def test_the_predictor_reads_the_tenants_file_from_the_secret_with_grpc_off(
        docs: list[dict[str, Any]], checker: Checker) -> None:
    problems, _ = checker.check_text("tenants", yaml.safe_dump_all(docs))
    assert [str(p) for p in problems] == []
    isvc = one(docs, "InferenceService")
    predictor = isvc["spec"]["predictor"]
    args = parse(effective_args(isvc))
    mount = one_mount(predictor)
    assert Path(args["tenants_file"]).parent == Path(mount["mountPath"])
    assert "subPath" not in mount and mount["readOnly"] is True
    assert args["enable_grpc"] is False
    volume = next(v for v in predictor["volumes"] if v["name"] == mount["name"])
    assert volume["secret"]["secretName"] == "modelctl-tenants"  # the template's
    assert [i["path"] for i in volume["secret"]["items"]] == [Path(args["tenants_file"]).name]
    config = ServerConfig(**{k: v for k, v in args.items()
                             if k in ServerConfig.__dataclass_fields__ and v is not None})
    assert tenant_problems(config) == []
    assert isvc["metadata"]["annotations"]["serving.kserve.io/deploymentMode"] == "Standard"


def one_mount(predictor: dict[str, Any]) -> dict[str, Any]:
    [mount] = [m for m in predictor["model"]["volumeMounts"] if m["name"] == "tenants"]
    return mount


def test_the_destination_rule_hashes_the_key_header_onto_the_predictor_pods(
        docs: list[dict[str, Any]]) -> None:
    isvc = one(docs, "InferenceService")
    meta = isvc["metadata"]
    rule = one(docs, "DestinationRule")
    assert rule["metadata"]["name"] == f"{meta['name']}-tenant-affinity"
    assert rule["spec"]["host"] == f"{meta['name']}-predictor.{meta['namespace']}.svc.cluster.local"
    hashing = rule["spec"]["trafficPolicy"]["loadBalancer"]["consistentHash"]
    assert hashing["httpHeaderName"] == "authorization"  # what the openai client sends


def test_the_secret_template_holds_a_file_the_predictor_reads(tmp_path: Path,
                                                              checker: Checker) -> None:
    [secret] = load_all(TEMPLATE.read_text())
    assert secret["metadata"]["name"] == "modelctl-tenants"
    path = tmp_path / "tenants.yaml"
    path.write_text(secret["stringData"]["tenants.yaml"])
    assert read_tenants(path).names == []  # valid, and lets nobody in until filled
    assert "create secret generic modelctl-tenants --from-file=tenants.yaml" in \
        TEMPLATE.read_text()
    report = checker.check_paths([TEMPLATE])
    assert report.ok, [str(p) for p in report.problems]
