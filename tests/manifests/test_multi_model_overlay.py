"""The multi-model overlay (issue 16) means what it says: an InferenceService KServe treats
as multi-model (no storage of its own, so its model agent fills /mnt/models with the
TrainedModels), running the predictor with ``--multi_model`` and a budget below its memory
limit; one TrainedModel per ``--trained-model`` pointing at it, with the registry's
storageUri and a memory KServe can place; the repository token only ever a file from a
Secret; and a DestinationRule that hashes each model's requests, by the header that
carries its name, onto the replicas of the rendered InferenceService. Rendered with real
kustomize, through ``deploy render``'s code, the registry faked."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from deploycheck import Checker, DeployError, RenderRequest, find_kubectl, render
from deploycheck._trained import MIB, is_multi_model_predictor, memory_mib
from deploycheck.webhook._component import quantity
from tests.manifests.test_overlays import effective_args, parse
from tests.support.manifests import OVERLAYS, ROOT, load_all, runtime_doc

MULTI = OVERLAYS / "multi-model"
POOL = "pool"
SECRET, TOKEN_KEY = "modelctl-repository-token", "token"
AFFINITY_HEADER = "x-modelctl-model"  # the client's contract (docs/DEPLOY.md)
# What the faked registry holds: each version's files and sizes, as its manifest lists them.
FILES = {
    "demo-embed": {"model.safetensors": 420 * MIB, "tokenizer.json": 3 * MIB,
                   "config.json": 1024, "MANIFEST.json": 2048},
    "sentiment": {"model.safetensors": 260 * MIB, "vocab.txt": 1 * MIB},
}
WANTED = (("demo-embed", "stable"), ("sentiment", "3"))


def fake_uri(model: str, ref: str) -> str:
    return f"s3://models/registry/{model}/{ref}/"


def files(model: str, ref: str) -> dict[str, int]:
    return FILES[model]


@pytest.fixture(scope="module", params=[(None, None), ("embed-pool", "prod")],
                ids=["plain", "named"])
def multi(request: pytest.FixtureRequest) -> list[dict[str, Any]]:
    """``modelctl deploy render pool@latest -o multi-model --trained-model demo-embed@stable
    --trained-model sentiment@3`` (with and without --name/--namespace)."""
    name, namespace = request.param
    return render(
        RenderRequest(POOL, "latest", "multi-model", namespace=namespace, name=name,
                      trained_models=WANTED),
        MULTI, find_kubectl(), fake_uri, None, files,
    )


def one(docs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    [doc] = [d for d in docs if d["kind"] == kind]
    return doc


def trained(docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == "TrainedModel"}


def test_rendered_overlay_validates(multi: list[dict[str, Any]], checker: Checker) -> None:
    problems, count = checker.check_text("multi-model", yaml.safe_dump_all(multi))
    assert [str(p) for p in problems] == []
    assert count == len(multi) == 4
    assert sorted(d["kind"] for d in multi) == [
        "DestinationRule", "InferenceService", "TrainedModel", "TrainedModel"]
    assert len({d["metadata"]["namespace"] for d in multi}) == 1
    assert "Secret" not in {d["kind"] for d in multi}  # created by hand, never rendered


def test_kserve_treats_the_inference_service_as_multi_model(
    multi: list[dict[str, Any]],
) -> None:
    predictor = one(multi, "InferenceService")["spec"]["predictor"]
    model = predictor["model"]
    assert "storageUri" not in model and "storage" not in model
    assert "storageUris" not in predictor
    assert is_multi_model_predictor(predictor)  # IsMMSPredictor
    # The runtime is named, so KServe does not match it by its multiModel field; it is the
    # cluster's modelctl-predictor (multiModel false: the field marks ModelMesh runtimes).
    runtime = runtime_doc()
    assert model["runtime"] == runtime["metadata"]["name"]
    assert runtime["spec"]["multiModel"] is False
    formats = {(f["name"], f["version"]) for f in runtime["spec"]["supportedModelFormats"]}
    assert (model["modelFormat"]["name"], model["modelFormat"]["version"]) in formats
    assert model["protocolVersion"] in runtime["spec"]["protocolVersions"]


def test_the_predictor_serves_the_agents_model_dir_within_its_limit(
    multi: list[dict[str, Any]],
) -> None:
    from predictor._config import parse_config

    isvc = one(multi, "InferenceService")
    flags = parse(effective_args(isvc))
    config = parse_config(effective_args(isvc), env={})  # the predictor's own checks pass
    assert config.multi_model is True and flags["multi_model"] is True
    assert flags["model_dir"] == "/mnt/models"  # constants.ModelDir, the agent's emptyDir
    limit = quantity(isvc["spec"]["predictor"]["model"]["resources"]["limits"]["memory"])
    budget = flags["memory_budget_mb"] * MIB
    # The budget counts tensors only; the process (torch, tokenizers, Python) needs the rest.
    assert 0 < budget <= limit - 2 * 1024 * MIB
    assert flags["device_memory_budget_mb"] == 0 and flags["device"] == "cpu"
    assert not (flags["queue_role"] or flags["shadow_url"] or flags["capture_uri"])


def test_a_fixed_pool_in_standard_mode(multi: list[dict[str, Any]]) -> None:
    isvc = one(multi, "InferenceService")
    annotations = isvc["metadata"]["annotations"]
    assert annotations["serving.kserve.io/deploymentMode"] == "Standard"
    assert annotations["serving.kserve.io/autoscalerClass"] == "none"
    assert "serving.kserve.io/enable-tag-routing" not in annotations
    predictor = isvc["spec"]["predictor"]
    assert "scaleMetric" not in predictor and "scaleTarget" not in predictor
    assert predictor["minReplicas"] == predictor["maxReplicas"] >= 2


def test_one_trained_model_per_model_on_the_inference_service(
    multi: list[dict[str, Any]],
) -> None:
    isvc = one(multi, "InferenceService")
    models = trained(multi)
    assert set(models) == {name for name, _ in WANTED}
    limit = quantity(isvc["spec"]["predictor"]["model"]["resources"]["limits"]["memory"])
    total = 0
    for name, ref in WANTED:
        tm = models[name]
        assert tm["metadata"]["namespace"] == isvc["metadata"]["namespace"]
        assert tm["spec"]["inferenceService"] == isvc["metadata"]["name"]
        model = tm["spec"]["model"]
        assert model["storageUri"] == fake_uri(name, ref)
        assert model["framework"] == isvc["spec"]["predictor"]["model"]["modelFormat"]["name"]
        memory = quantity(model["memory"])
        assert memory == memory_mib(sum(FILES[name].values())) * MIB
        assert memory > sum(FILES[name].values())  # headroom over the files
        total += memory
    assert total <= limit  # IsMemoryResourceAvailable: KServe places every one of them


def test_the_token_is_only_a_file_from_the_secret(multi: list[dict[str, Any]]) -> None:
    isvc = one(multi, "InferenceService")
    predictor = isvc["spec"]["predictor"]
    token_file = Path(parse(effective_args(isvc))["repository_token_file"])
    [mount] = [m for m in predictor["model"]["volumeMounts"]
               if token_file.is_relative_to(m["mountPath"])]
    assert mount["readOnly"] is True
    [volume] = [v for v in predictor["volumes"] if v["name"] == mount["name"]]
    secret = volume["secret"]
    assert secret["secretName"] == SECRET
    assert secret["items"] == [{"key": TOKEN_KEY,
                                "path": str(token_file.relative_to(mount["mountPath"]))}]
    # Readable by the pod's fsGroup (the predictor's group), by no one else.
    mode = secret["defaultMode"]
    assert mode & 0o040 and not mode & 0o007
    context = predictor["securityContext"]
    assert context["fsGroup"] == context["runAsGroup"] and context["runAsNonRoot"] is True
    # Nothing else carries it: no env from the Secret, no arg but the file's path.
    text = yaml.safe_dump_all(multi)
    assert text.count(SECRET) == 1
    assert "env" not in predictor["model"]
    assert [a for a in effective_args(isvc) if "token" in a] == [
        f"--repository_token_file={token_file}"]


def test_the_secret_template_holds_no_token(checker: Checker) -> None:
    path = ROOT / "manifests" / "templates" / "multi-model-repository-token-secret.yaml"
    [secret] = load_all(path.read_text())
    assert secret["metadata"]["name"] == SECRET
    assert secret["stringData"] == {TOKEN_KEY: ""}
    assert f"create secret generic {SECRET}" in path.read_text()
    report = checker.check_paths([path])
    assert report.ok, [str(p) for p in report.problems]


def test_the_destination_rule_hashes_the_model_header_onto_the_predictor_pods(
    multi: list[dict[str, Any]],
) -> None:
    isvc = one(multi, "InferenceService")
    meta = isvc["metadata"]
    rule = one(multi, "DestinationRule")
    assert rule["metadata"]["name"] == f"{meta['name']}-affinity"
    assert rule["metadata"]["namespace"] == meta["namespace"]
    # KServe's Standard-mode Service (constants.PredictorServiceName), the pods behind it.
    assert rule["spec"]["host"] == f"{meta['name']}-predictor.{meta['namespace']}.svc.cluster.local"
    assert "name" not in isvc["spec"]["predictor"]  # which would rename that Service
    balancer = rule["spec"]["trafficPolicy"]["loadBalancer"]
    assert set(balancer) == {"consistentHash"}
    hashing = balancer["consistentHash"]
    assert hashing["httpHeaderName"] == AFFINITY_HEADER
    size = hashing["maglev"]["tableSize"]
    assert size < 5000011 and all(size % d for d in range(2, int(size**0.5) + 1))  # prime
    # No route of ours sets the header: a proxy hashes the headers as they arrived, before
    # its route's own header edits (the overlay's comments cite Istio and Envoy).
    assert "VirtualService" not in {d["kind"] for d in multi}


def test_trained_models_need_a_multi_model_overlay() -> None:
    with pytest.raises(DeployError, match=r"--trained-model needs a multi-model overlay.*'cpu'"):
        render(RenderRequest("demo-embed", "stable", "cpu", trained_models=WANTED[:1]),
               OVERLAYS / "cpu", find_kubectl(), fake_uri, None, files)
    with pytest.raises(DeployError, match="file sizes"):
        render(RenderRequest(POOL, "latest", "multi-model", trained_models=WANTED[:1]),
               MULTI, find_kubectl(), fake_uri)


def test_without_trained_models_the_pool_renders_empty() -> None:
    docs = render(RenderRequest(POOL, "latest", "multi-model"), MULTI, find_kubectl(),
                  fake_uri)
    assert sorted(d["kind"] for d in docs) == ["DestinationRule", "InferenceService"]
