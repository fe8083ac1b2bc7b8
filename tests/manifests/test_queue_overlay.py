"""The queue overlay (issue 15) means what it says: KEDA scales the worker Deployment
on the consumer group of the rendered model version's stream, only frontends, workers
and KEDA reach Redis, the workers hold the GPU and a PDB, and the Redis password never
travels in args. Rendered with real kustomize, through ``deploy render``'s code."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from deploycheck import Checker, RenderRequest, find_kubectl, render
from tests.manifests.test_overlays import effective_args, parse
from tests.support.manifests import OVERLAYS, ROOT, load_all

QUEUE = OVERLAYS / "queue"
SECRET, PASSWORD_KEY, PASSWORD_ENV = "modelctl-queue", "password", "MODELCTL_QUEUE_PASSWORD"
MODEL, VERSION = "demo-embed", "3"


# The one kind the overlay holds twice: Redis's policy is "NetworkPolicy", this one's
# key is its own.
WORKERS_POLICY = "NetworkPolicy/workers"


def by_kind(docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for doc in docs:
        kind = doc["kind"]
        if kind == "NetworkPolicy" and doc["metadata"]["name"].endswith("-queue-worker"):
            kind = WORKERS_POLICY
        assert kind not in out, f"two {kind}s"
        out[kind] = doc
    return out


@pytest.fixture(scope="module", params=[(None, None), ("embed", "prod")], ids=["plain", "named"])
def queue(request: pytest.FixtureRequest) -> dict[str, dict[str, Any]]:
    """The overlay as ``modelctl deploy render demo-embed@stable -o queue`` prints it
    (with and without --name/--namespace), the registry faked."""
    name, namespace = request.param
    docs = render(
        RenderRequest(MODEL, "stable", "queue", namespace=namespace, name=name),
        QUEUE,
        find_kubectl(),
        lambda model, ref: f"s3://models/registry/{model}/{ref}",
        lambda model, ref: VERSION,
    )
    return by_kind(docs)


def worker_container(objs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    [container] = objs["Deployment"]["spec"]["template"]["spec"]["containers"]
    return container


def matches(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return selector.items() <= labels.items()


def frontend_pod_labels(objs: dict[str, dict[str, Any]]) -> dict[str, str]:
    # What KServe puts on every predictor pod (constants.InferenceServicePodLabelKey).
    return {"serving.kserve.io/inferenceservice": objs["InferenceService"]["metadata"]["name"],
            "component": "predictor"}


def test_rendered_overlay_validates(queue: dict[str, dict[str, Any]], checker: Checker) -> None:
    import yaml

    text = yaml.safe_dump_all(list(queue.values()))
    problems, count = checker.check_text("queue", text)
    assert [str(p) for p in problems] == []
    assert count == len(queue) == 8
    assert set(queue) == {"InferenceService", "Deployment", "PodDisruptionBudget",
                          "ScaledObject", "StatefulSet", "Service", "NetworkPolicy",
                          WORKERS_POLICY}
    namespaces = {o["metadata"]["namespace"] for o in queue.values()}
    assert len(namespaces) == 1
    isvc = queue["InferenceService"]["metadata"]["name"]
    for obj in queue.values():
        if obj["kind"] != "InferenceService":
            assert obj["metadata"]["name"].startswith(isvc + "-queue-"), obj["metadata"]["name"]
            assert obj["metadata"]["labels"]["app.kubernetes.io/instance"] == isvc


def test_scaled_object_targets_the_worker_deployment(queue: dict[str, dict[str, Any]]) -> None:
    spec = queue["ScaledObject"]["spec"]
    deployment = queue["Deployment"]
    assert spec["scaleTargetRef"] == {
        "apiVersion": "apps/v1", "kind": "Deployment", "name": deployment["metadata"]["name"],
        "envSourceContainerName": worker_container(queue)["name"]}
    assert spec["minReplicaCount"] == 0 and spec["maxReplicaCount"] >= 1
    assert "replicas" not in deployment["spec"]  # KEDA owns the count


def test_triggers_read_the_contracts_stream_for_the_rendered_version(
    queue: dict[str, dict[str, Any]],
) -> None:
    isvc = queue["InferenceService"]["metadata"]
    redis, namespace = queue["Service"]["metadata"]["name"], isvc["namespace"]
    flags = parse(worker_container(queue)["args"])
    assert flags["model_name"] == isvc["name"]  # the frontends' {{.Name}}
    triggers = queue["ScaledObject"]["spec"]["triggers"]
    assert {t["type"] for t in triggers} == {"redis-streams"}
    for trigger in triggers:
        meta = trigger["metadata"]
        assert meta["stream"] == f"modelctl:{{{isvc['name']}:{VERSION}}}:requests"
        assert meta["consumerGroup"] == "workers"
        assert meta["address"] == f"{redis}.{namespace}.svc.cluster.local:6379"
        assert meta["activationLagCount"] == "0"
        assert meta["passwordFromEnv"] == PASSWORD_ENV
        assert "password" not in meta
    lag = [t["metadata"] for t in triggers if "lagCount" in t["metadata"]]
    assert len(lag) == 1 and int(lag[0]["lagCount"]) == 2 * flags["max_batch_size"]


def selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    """A label selector (matchLabels, and matchExpressions with In/NotIn/Exists) on labels."""
    if not matches(selector.get("matchLabels") or {}, labels):
        return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr["key"], expr["operator"], expr.get("values") or []
        if ((op == "In" and labels.get(key) not in values)
                or (op == "NotIn" and labels.get(key) in values)
                or (op == "Exists" and key not in labels)
                or (op == "DoesNotExist" and key in labels)):
            return False
    return True


def candidate_worker_pods(queue: dict[str, dict[str, Any]], role: str) -> dict[str, str]:
    """The labels of a canary's or shadow's worker pods, as ``modelctl rollout`` and
    ``modelctl shadow`` make them."""
    from rollout.backends._kserve import _queue
    from shadow._deploy import WORKERS_COMPONENT

    component = _queue.CANARY_COMPONENT if role == "canary" else WORKERS_COMPONENT
    body = _queue.candidate_deployment(queue["Deployment"], f"x-{role}", uri="s3://m/4",
                                       role=role, component=component)
    labels: dict[str, str] = body["spec"]["template"]["metadata"]["labels"]
    return labels


def test_the_workers_admit_only_their_probes_and_scrape_port(
    queue: dict[str, dict[str, Any]],
) -> None:
    policy = queue[WORKERS_POLICY]["spec"]
    worker_pods = queue["Deployment"]["spec"]["template"]["metadata"]["labels"]
    assert selects(policy["podSelector"], worker_pods)
    assert selects(policy["podSelector"], candidate_worker_pods(queue, "canary"))
    assert selects(policy["podSelector"], candidate_worker_pods(queue, "shadow"))
    assert not selects(policy["podSelector"], queue["StatefulSet"]["spec"]["template"]
                       ["metadata"]["labels"])
    assert not selects(policy["podSelector"], frontend_pod_labels(queue))
    assert not selects(policy["podSelector"], {**worker_pods,
                                               "app.kubernetes.io/instance": "another-model"})
    port = worker_container(queue)["ports"][0]["containerPort"]
    assert policy["policyTypes"] == ["Ingress"]
    assert policy["ingress"] == [{"ports": [{"protocol": "TCP", "port": port}]}]


def test_the_network_policy_admits_exactly_frontends_workers_and_keda(
    queue: dict[str, dict[str, Any]],
) -> None:
    policy = queue["NetworkPolicy"]["spec"]
    redis_pods = queue["StatefulSet"]["spec"]["template"]["metadata"]["labels"]
    worker_pods = queue["Deployment"]["spec"]["template"]["metadata"]["labels"]
    assert matches(policy["podSelector"]["matchLabels"], redis_pods)
    assert not matches(policy["podSelector"]["matchLabels"], worker_pods)
    assert policy["policyTypes"] == ["Ingress"]
    [rule] = policy["ingress"]
    assert rule["ports"] == [{"protocol": "TCP", "port": 6379}]
    same_namespace = [p["podSelector"] for p in rule["from"] if "namespaceSelector" not in p]
    others = [p for p in rule["from"] if "namespaceSelector" in p]

    def admitted(labels: dict[str, str]) -> bool:
        return any(selects(s, labels) for s in same_namespace)

    assert admitted(frontend_pod_labels(queue)) and admitted(worker_pods)
    isvc = queue["InferenceService"]["metadata"]["name"]
    assert admitted({"serving.kserve.io/inferenceservice": f"{isvc}-shadow"})
    assert admitted(candidate_worker_pods(queue, "canary"))
    assert admitted(candidate_worker_pods(queue, "shadow"))
    assert len(same_namespace) == 3
    assert not admitted({"serving.kserve.io/inferenceservice": "another-model-shadow"})
    assert not admitted({"app.kubernetes.io/component": "queue-redis",
                         "app.kubernetes.io/instance": isvc})
    assert not admitted(redis_pods)
    assert not admitted({"serving.kserve.io/inferenceservice": "another-model"})
    assert not admitted({"app.kubernetes.io/component": "queue-worker",
                         "app.kubernetes.io/instance": "another-model"})
    # KEDA's operator reads the lag; nothing else from other namespaces.
    assert others == [{"namespaceSelector": {"matchLabels": {
        "kubernetes.io/metadata.name": "keda"}},
        "podSelector": {"matchLabels": {"app": "keda-operator"}}}]


def test_the_worker_holds_the_gpu_and_drains_within_its_grace(
    queue: dict[str, dict[str, Any]],
) -> None:
    pod = queue["Deployment"]["spec"]["template"]["spec"]
    container = worker_container(queue)
    resources = container["resources"]
    assert resources["requests"]["nvidia.com/gpu"] == resources["limits"]["nvidia.com/gpu"] == "1"
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod[
        "tolerations"]
    assert pod["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    flags = parse(container["args"])
    assert (flags["queue_role"], flags["device"]) == ("worker", "cuda")
    assert flags["queue_url"] == f"redis://{queue['Service']['metadata']['name']}:6379/0"
    assert flags["model_dir"] == "/mnt/models"
    assert pod["terminationGracePeriodSeconds"] > flags["drain_timeout_s"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    paths = {kind: container[kind]["httpGet"]["path"]
             for kind in ("startupProbe", "readinessProbe", "livenessProbe")}
    assert paths == {"startupProbe": "/v2/health/live", "readinessProbe": "/v2/health/ready",
                     "livenessProbe": "/v2/health/live"}
    assert {container[k]["httpGet"]["port"] for k in paths} == {8080}
    # KServe's storage initializer, invoked as KServe invokes it: <storageUri> <mountPath>.
    [init] = pod["initContainers"]
    assert init["name"] == "storage-initializer"
    assert init["image"].startswith("kserve/storage-initializer:v")
    assert init["args"] == [f"s3://models/registry/{MODEL}/stable", "/mnt/models"]
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    assert mounts["/mnt/models"]["readOnly"] is True
    assert init["securityContext"]["readOnlyRootFilesystem"] is True


def test_the_pdb_selects_the_workers(queue: dict[str, dict[str, Any]]) -> None:
    pdb = queue["PodDisruptionBudget"]["spec"]
    assert matches(pdb["selector"]["matchLabels"],
                   queue["Deployment"]["spec"]["template"]["metadata"]["labels"])
    assert pdb["selector"] == queue["Deployment"]["spec"]["selector"]
    assert not matches(pdb["selector"]["matchLabels"],
                       queue["StatefulSet"]["spec"]["template"]["metadata"]["labels"])
    assert pdb["maxUnavailable"] == 1


def containers_of(objs: dict[str, dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    out = []
    for obj in objs.values():
        if obj["kind"] in ("Deployment", "StatefulSet"):
            pod = obj["spec"]["template"]["spec"]
            out += [(obj["kind"], c) for c in pod.get("initContainers", []) + pod["containers"]]
    isvc = objs["InferenceService"]
    out.append(("InferenceService", {**isvc["spec"]["predictor"]["model"],
                                     "args": effective_args(isvc)}))
    return out


def test_the_password_comes_from_the_secret_and_never_from_args(
    queue: dict[str, dict[str, Any]],
) -> None:
    holders = 0
    for kind, container in containers_of(queue):
        args = " ".join([*container.get("command", []), *map(str, container.get("args", []))])
        assert "requirepass " not in args.replace('requirepass "%s"', "")
        assert "-a " not in args and "--pass" not in args
        for env in container.get("env", []):
            ref = (env.get("valueFrom") or {}).get("secretKeyRef")
            if ref and ref["name"] == SECRET:
                assert "value" not in env and ref["key"] == PASSWORD_KEY
                assert f"$({env['name']})" not in args, (kind, env["name"])
                holders += 1
        names = {e["name"] for e in container.get("env", [])}
        if kind != "StatefulSet" and container.get("name") != "storage-initializer":
            assert PASSWORD_ENV in names, kind
    assert holders == 4  # frontend, worker, Redis's requirepass and its redis-cli probe
    assert "Secret" not in queue  # created by hand, never rendered with a value


def test_the_secret_template_holds_no_password(checker: Checker) -> None:
    path = ROOT / "manifests" / "templates" / "queue-secret.yaml"
    [secret] = load_all(path.read_text())
    assert secret["metadata"]["name"] == SECRET
    assert secret["stringData"] == {PASSWORD_KEY: ""}
    report = checker.check_paths([path])
    assert report.ok, [str(p) for p in report.problems]


def test_redis_keeps_what_it_accepted(queue: dict[str, dict[str, Any]]) -> None:
    sts = queue["StatefulSet"]["spec"]
    pod = sts["template"]["spec"]
    [container] = pod["containers"]
    assert container["image"] == "redis:7"
    script = container["args"][0]
    assert "--appendonly yes" in script and "--maxmemory-policy noeviction" in script
    assert "requirepass" in script and "$REDIS_PASSWORD" in script
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    [claim] = sts["volumeClaimTemplates"]
    assert {"name": claim["metadata"]["name"], "mountPath": "/data"} in container["volumeMounts"]
    service = queue["Service"]
    assert sts["serviceName"] == service["metadata"]["name"]
    assert service["spec"]["clusterIP"] == "None"
    assert matches(service["spec"]["selector"], sts["template"]["metadata"]["labels"])


def test_frontends_are_the_inference_service(queue: dict[str, dict[str, Any]]) -> None:
    isvc = queue["InferenceService"]
    predictor = isvc["spec"]["predictor"]
    flags = parse(effective_args(isvc))
    assert flags["queue_role"] == "frontend" and flags["device"] == "cpu"
    assert flags["queue_url"] == parse(worker_container(queue)["args"])["queue_url"]
    assert predictor["scaleMetric"] == "concurrency"
    assert "nvidia.com/gpu" not in predictor["model"]["resources"].get("limits", {})
    assert isvc["metadata"]["annotations"]["serving.kserve.io/deploymentMode"] == "Knative"


def test_render_needs_the_version_for_the_stream(tmp_path: Path) -> None:
    from deploycheck import DeployError

    with pytest.raises(DeployError, match="needs the version number"):
        render(RenderRequest(MODEL, "stable", "queue"), QUEUE, find_kubectl(),
               lambda model, ref: "s3://x/y")
