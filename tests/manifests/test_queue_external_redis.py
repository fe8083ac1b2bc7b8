"""The queue-external-redis overlay (issue 15, "an existing Redis given by a Secret") is
the queue overlay less its Redis, and nothing else: the frontends and workers take the
queue URL from the Secret as MODELCTL_QUEUE_URL (never in args), KEDA's triggers the
address from the worker container's env, and every other field is the queue overlay's.
Rendered with real kustomize, through ``deploy render``'s code."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml

from deploycheck import Checker, RenderRequest, find_kubectl, render
from predictor._config import parse_config
from tests.manifests.test_overlays import effective_args
from tests.manifests.test_queue_overlay import (
    MODEL,
    PASSWORD_ENV,
    SECRET,
    VERSION,
    WORKERS_POLICY,
    by_kind,
)
from tests.support.manifests import OVERLAYS, ROOT, load_all

EXTERNAL = "queue-external-redis"
URL_ENV, ADDRESS_ENV = "MODELCTL_QUEUE_URL", "MODELCTL_QUEUE_ADDRESS"
QUEUE_URL_ARG = "--queue_url="


def _render(overlay: str, name: str | None, namespace: str | None) -> dict[str, dict[str, Any]]:
    docs = render(RenderRequest(MODEL, "stable", overlay, namespace=namespace, name=name),
                  OVERLAYS / overlay, find_kubectl(),
                  lambda model, ref: f"s3://models/registry/{model}/{ref}",
                  lambda model, ref: VERSION)
    return by_kind(docs)


@pytest.fixture(scope="module", params=[(None, None), ("embed", "prod")], ids=["plain", "named"])
def pair(request: pytest.FixtureRequest) -> tuple[dict[str, dict[str, Any]],
                                                  dict[str, dict[str, Any]]]:
    """(queue, queue-external-redis), rendered alike."""
    name, namespace = request.param
    return _render("queue", name, namespace), _render(EXTERNAL, name, namespace)


def _from_secret(key: str) -> dict[str, Any]:
    return {"secretKeyRef": {"name": SECRET, "key": key}}


def _worker(objs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    [container] = objs["Deployment"]["spec"]["template"]["spec"]["containers"]
    return container


def test_it_validates_and_runs_no_redis_of_its_own(
    pair: tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]]], checker: Checker,
) -> None:
    _queue, external = pair
    problems, count = checker.check_text(EXTERNAL, yaml.safe_dump_all(list(external.values())))
    assert [str(p) for p in problems] == []
    assert count == 5
    assert set(external) == {"InferenceService", "Deployment", "PodDisruptionBudget",
                             "ScaledObject", WORKERS_POLICY}  # ours: 8080 only
    assert "queue-redis" not in yaml.safe_dump_all(list(external.values()))


def test_only_where_redis_is_changes(
    pair: tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]]],
) -> None:
    """The queue overlay's objects with exactly the documented edits are the overlay."""
    queue, external = pair
    expected = {kind: copy.deepcopy(queue[kind]) for kind in external}
    model = expected["InferenceService"]["spec"]["predictor"]["model"]
    model["args"] = [a for a in model["args"] if not a.startswith(QUEUE_URL_ARG)]
    model["env"].append({"name": URL_ENV, "valueFrom": _from_secret("url")})
    worker = _worker(expected)
    worker["args"] = [a for a in worker["args"] if not a.startswith(QUEUE_URL_ARG)]
    worker["env"] += [{"name": URL_ENV, "valueFrom": _from_secret("url")},
                      {"name": ADDRESS_ENV, "valueFrom": _from_secret("address")}]
    for trigger in expected["ScaledObject"]["spec"]["triggers"]:
        del trigger["metadata"]["address"]
        trigger["metadata"]["addressFromEnv"] = ADDRESS_ENV
    assert external == expected


def test_both_roles_read_the_url_from_the_secret_never_from_args(
    pair: tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]]],
) -> None:
    _queue, external = pair
    isvc = external["InferenceService"]
    roles = {"frontend": (isvc["spec"]["predictor"]["model"], effective_args(isvc)),
             "worker": (_worker(external), _worker(external)["args"])}
    url = "redis://redis.example.internal:6379/0"  # what the Secret's `url` holds
    for role, (container, args) in roles.items():
        assert not [a for a in args if a.startswith("--queue_url")], role
        env = {e["name"]: e for e in container["env"]}
        assert env[URL_ENV] == {"name": URL_ENV, "valueFrom": _from_secret("url")}, role
        assert env[PASSWORD_ENV]["valueFrom"] == _from_secret("password"), role
        config = parse_config(["--model_name", "m", *args], env={URL_ENV: url})
        assert (config.queue_url, config.queue_role) == (url, role)


def test_keda_reads_the_address_from_the_worker_container(
    pair: tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]]],
) -> None:
    """``addressFromEnv`` and ``passwordFromEnv`` name env vars of the container KEDA
    resolves (``envSourceContainerName``), each from the Secret."""
    _queue, external = pair
    spec = external["ScaledObject"]["spec"]
    container = _worker(external)
    assert spec["scaleTargetRef"]["envSourceContainerName"] == container["name"]
    env = {e["name"]: e.get("valueFrom") for e in container["env"]}
    for trigger in spec["triggers"]:
        meta = trigger["metadata"]
        assert "address" not in meta and "password" not in meta
        assert env[meta["addressFromEnv"]] == _from_secret("address")
        assert env[meta["passwordFromEnv"]] == _from_secret("password")


def test_the_secret_template_names_every_key_and_holds_no_value(checker: Checker) -> None:
    path = ROOT / "manifests" / "templates" / "queue-external-redis-secret.yaml"
    [secret] = load_all(path.read_text())
    assert secret["metadata"]["name"] == SECRET
    assert secret["stringData"] == {"url": "", "address": "", "password": ""}
    report = checker.check_paths([path])
    assert report.ok, [str(p) for p in report.problems]


def test_a_canarys_workers_find_the_same_redis(
    pair: tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]]],
) -> None:
    """``modelctl rollout`` copies the stable's workers for a canary: the Secret's env
    and the triggers' ``addressFromEnv`` travel with them."""
    from rollout.backends._kserve import _queue

    _queue_objs, external = pair
    body = _queue.candidate_deployment(external["Deployment"], "x-canary", uri="s3://m/4",
                                       role="canary", component=_queue.CANARY_COMPONENT)
    [container] = body["spec"]["template"]["spec"]["containers"]
    assert [e for e in container["env"] if e["name"] in (URL_ENV, ADDRESS_ENV)] == [
        e for e in _worker(external)["env"] if e["name"] in (URL_ENV, ADDRESS_ENV)]
    assert not [a for a in container["args"] if a.startswith("--queue_url")]
    scaler = _queue.candidate_scaler(external["ScaledObject"], "x-canary", version=4,
                                     component=_queue.CANARY_COMPONENT)
    for trigger in scaler["spec"]["triggers"]:
        assert trigger["metadata"]["addressFromEnv"] == ADDRESS_ENV
        assert trigger["metadata"]["stream"].endswith(":4}:requests")
