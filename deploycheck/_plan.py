"""``deploy render --plan``: a capacity plan's numbers written into the rendered objects.

The plan arrives as plain values (``PlanValues``: the CLI reads ``capacity.PlanFile``);
``apply_plan`` edits the objects in place, before the render's offline validation, and
leaves every other object and field as the overlay rendered it. Where each number goes
(docs/CAPACITY.md, "Rendering a plan"):

- the batching flags go into the predictor container's args, replacing the
  ``--flag=value`` (or ``--flag value``) already there and appending those absent:
  KServe appends an InferenceService's ``model.args`` after the runtime's, and the
  predictor's argparse keeps the last value (manifests/10-serving-runtime.yaml);
- in-process: ``minReplicas`` / ``maxReplicas`` on ``spec.predictor``; Knative overlays
  get ``scaleMetric: concurrency``, ``scaleTarget`` and the Knative annotations;
  Standard overlays scaled by KEDA get the per-replica target of their in-flight
  metric; anything else has no field a concurrency target can go into, and a note says so;
- queue: frontends (the InferenceService) and workers (the Deployment running
  ``--queue_role=worker``) get the flags each uses, the KEDA ScaledObject scaling the
  workers gets the replica bounds and the redis-streams lag trigger's counts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from deploycheck._errors import DeployError
from deploycheck.webhook._component import (
    AUTOSCALER_CLASS,
    DEPLOYMENT_MODE,
    KNATIVE_CLASS,
    KNATIVE_HPA,
)

IN_PROCESS, QUEUE = "in-process", "queue"
QUEUE_OVERLAYS = ("queue", "queue-external-redis")
# knative/serving pkg/apis/autoscaling/register.go: TargetUtilizationPercentageKey,
# ActivationScaleKey.
TARGET_UTILIZATION = "autoscaling.knative.dev/target-utilization-percentage"
ACTIVATION_SCALE = "autoscaling.knative.dev/activation-scale"
INFLIGHT_METRIC = "modelctl_inflight_requests"
# The predictor's default (predictor/_config.py ServerConfig.queue_claim_timeout_ms).
DEFAULT_CLAIM_TIMEOUT_MS = 5000.0
# Which process reads which flag (predictor/queue): the frontend admits, with
# request_timeout_ms (each request's deadline) and max_queue_size (the stream's depth
# limit, _frontend.py _admit); it never batches, but ServerConfig refuses a
# max_queue_size below max_batch_size, so it gets that too. The worker batches
# (max_batch_size, max_batch_wait_ms: its BatchingModel's batcher); its own queue is
# bounded by its prefetch (2 x max_batch_size, _worker.py), so the stream's
# max_queue_size stays off it. torch_threads goes where the model runs (a CPU plan's:
# the threads its profile was measured with), never to a frontend, which loads none.
IN_PROCESS_FLAGS = ("max_batch_size", "max_batch_wait_ms", "max_queue_size",
                    "request_timeout_ms", "torch_threads")
FRONTEND_FLAGS = ("max_batch_size", "max_queue_size", "request_timeout_ms")
WORKER_FLAGS = ("max_batch_size", "max_batch_wait_ms", "request_timeout_ms", "torch_threads")


@dataclass(frozen=True)
class PlanValues:
    """The numbers of one plan (``capacity.PlanFile``) that go into manifests.

    ``mode``: ``in-process`` or ``queue``. Autoscaler targets the plan's mode does not
    use are None.
    """

    mode: str
    max_batch_size: int
    max_batch_wait_ms: float
    max_queue_size: int
    request_timeout_ms: float
    min_replicas: int
    max_replicas: int
    scale_target: int | None = None
    target_utilization_percentage: int | None = None
    activation_scale: int | None = None
    lag_per_worker: int | None = None
    activation_lag: int | None = None
    queue_claim_timeout_ms: int | None = None  # queue mode: both roles get it
    torch_threads: int | None = None  # a CPU plan: where the model runs

    def __post_init__(self) -> None:
        if self.mode not in (IN_PROCESS, QUEUE):
            raise DeployError(f"unknown plan mode {self.mode!r}: use {IN_PROCESS} or {QUEUE}")

    def flags(self, names: Sequence[str]) -> dict[str, str]:
        """``{flag: value}`` for the predictor flags ``names`` the plan sets (None: not
        set), as argparse reads them."""
        chosen = [*names, *(["queue_claim_timeout_ms"] if self.mode == QUEUE else [])]
        return {name: _number(getattr(self, name)) for name in chosen
                if getattr(self, name) is not None}


def overlay_mode(docs: Sequence[Mapping[str, Any]]) -> str:
    """``queue`` when an InferenceService runs the queue's frontends (``--queue_role
    frontend``: the queue and queue-external-redis overlays), else ``in-process``."""
    for doc in _isvcs(docs):
        args = _as_map(_as_map(_as_map(doc.get("spec")).get("predictor")).get("model"))
        if _flag(args.get("args"), "queue_role") == "frontend":
            return QUEUE
    return IN_PROCESS


def apply_plan(docs: Sequence[dict[str, Any]], plan: PlanValues, overlay: str) -> list[str]:
    """Write ``plan`` into the rendered ``docs`` of ``overlay``; the notes it returns say
    what the plan could not be written into. A mode mismatch raises ``DeployError``."""
    mode = overlay_mode(docs)
    if mode != plan.mode:
        raise DeployError(
            f"the plan is for {plan.mode} mode, but overlay {overlay!r} is {mode} (the "
            f"{' and '.join(QUEUE_OVERLAYS)} overlays are queue mode, every other is "
            "in-process): make the plan for the mode the overlay serves in"
        )
    if mode == QUEUE:
        return _apply_queue(docs, plan)
    notes: list[str] = []
    for doc in _isvcs(docs):
        notes += _apply_in_process(doc, plan)
    return notes


def _apply_in_process(doc: dict[str, Any], plan: PlanValues) -> list[str]:
    name = doc["metadata"].get("name")
    spec = doc.setdefault("spec", {})
    predictor = spec.setdefault("predictor", {})
    _set_args(predictor.setdefault("model", {}), plan.flags(IN_PROCESS_FLAGS))
    # spec.canary[]: an entry's args replace the stable's whole
    # (buildCanaryPredictor, mergo WithOverride), so an entry with its own carries the
    # flags too; its replicas stay the rollout's (the webhook refuses scaling there).
    for entry in spec.get("canary") or []:
        model = _as_map(_as_map(entry).get("predictor")).get("model")
        if isinstance(model, dict) and isinstance(model.get("args"), list):
            _set_args(model, plan.flags(IN_PROCESS_FLAGS))
    was_zero = predictor.get("minReplicas") == 0
    predictor["minReplicas"] = plan.min_replicas
    predictor["maxReplicas"] = plan.max_replicas
    annotations = doc["metadata"].setdefault("annotations", {})
    if annotations.get(DEPLOYMENT_MODE) in ("Knative", "Serverless"):
        notes = _knative(name, predictor, annotations, plan)
        if was_zero and plan.min_replicas > 0:
            notes.append(f"InferenceService {name}: the plan's replicas.min "
                         f"{plan.min_replicas} turns the overlay's scale-to-zero off")
        return notes
    return _standard(name, predictor, annotations, plan)


def _knative(name: Any, predictor: dict[str, Any], annotations: dict[str, Any],
             plan: PlanValues) -> list[str]:
    """KServe turns scaleMetric/scaleTarget into the Revision's metric and target
    annotations (pkg/controller/v1alpha1/utils/utils.go SetAutoScalingAnnotations, called
    by reconcilers/knative/ksvc_reconciler.go createKnativeService), and copies the
    InferenceService's own annotations, less ServiceAnnotationDisallowedList (min-scale,
    max-scale, ...: pkg/constants/constants.go), onto the Revision template
    (components/predictor.go buildPredictorResources and buildObjectMeta, then
    createKnativeService's template ObjectMeta): so the Knative knobs KServe has no
    field for go into metadata.annotations."""
    if annotations.get(KNATIVE_CLASS) == KNATIVE_HPA:
        return [f"InferenceService {name}: Knative's HPA class scales on CPU or memory "
                "only, so the plan's concurrency target is not written"]
    notes = []
    if plan.scale_target is None:
        notes.append(f"InferenceService {name}: the plan has no scale_target; the "
                     "overlay's is kept")
    else:
        predictor["scaleMetric"] = "concurrency"
        predictor["scaleTarget"] = plan.scale_target
    if plan.target_utilization_percentage is not None:
        annotations[TARGET_UTILIZATION] = str(plan.target_utilization_percentage)
    if plan.min_replicas == 0 and plan.activation_scale is not None:
        annotations[ACTIVATION_SCALE] = str(plan.activation_scale)
    return notes


def _standard(name: Any, predictor: dict[str, Any], annotations: Mapping[str, Any],
              plan: PlanValues) -> list[str]:
    """Standard mode: KServe's KEDA reconciler makes each External metric a trigger whose
    ``threshold`` is ``target.value`` (reconcilers/keda/keda_reconciler.go getKedaMetrics)
    and the ScaledObject's bounds minReplicas/maxReplicas (createKedaScaledObject). KEDA
    averages the metric per replica (replicas = ceil(metric / threshold)), where Knative
    aims at scaleTarget x target utilisation (knative/serving
    pkg/reconciler/autoscaling/resources/target.go ResolveMetricTarget): the threshold
    is that product."""
    autoscaler = annotations.get(AUTOSCALER_CLASS) or "hpa (KServe's default)"
    if autoscaler == "none":
        return [f"InferenceService {name}: autoscalerClass none runs minReplicas replicas "
                "and no autoscaler, so the plan's target is not written"]
    if autoscaler.startswith("hpa"):
        return [f"InferenceService {name}: autoscalerClass {autoscaler} scales on CPU or "
                "memory only (KServe validateScalingHPACompExtension), so the plan's "
                "concurrency target is not written"]
    if autoscaler != "keda":
        return [f"InferenceService {name}: autoscalerClass {autoscaler} has no field of "
                "ours for a concurrency target, so the plan's target is not written"]
    if plan.scale_target is None:
        return [f"InferenceService {name}: the plan has no scale_target; the overlay's "
                "KEDA target is kept"]
    threshold = plan.scale_target * (plan.target_utilization_percentage or 100) / 100
    written = 0
    metrics = _as_map(predictor.get("autoScaling")).get("metrics")
    for item in metrics if isinstance(metrics, list) else []:
        external = _as_map(_as_map(item).get("external"))
        query = _as_map(external.get("metric")).get("query")
        if _as_map(item).get("type") == "External" and INFLIGHT_METRIC in str(query or ""):
            external.setdefault("target", {})["value"] = _number(round(threshold, 3))
            written += 1
    if not written:
        return [f"InferenceService {name}: no KEDA metric on {INFLIGHT_METRIC} in "
                "spec.predictor.autoScaling, so the plan's target is not written"]
    return []


def _apply_queue(docs: Sequence[dict[str, Any]], plan: PlanValues) -> list[str]:
    workers = [(doc, container) for doc in docs if doc.get("kind") == "Deployment"
               for container in _containers(doc)
               if _flag(container.get("args"), "queue_role") == "worker"]
    if not workers:
        raise DeployError("the queue overlay has no Deployment running --queue_role=worker "
                          "to write the plan into")
    for doc in _isvcs(docs):
        model = doc.setdefault("spec", {}).setdefault("predictor", {}).setdefault("model", {})
        _check_claim_timeout(model, f"InferenceService {doc['metadata'].get('name')}", plan)
        _set_args(model, plan.flags(FRONTEND_FLAGS))
    notes = [f"queue mode: InferenceService {doc['metadata'].get('name')} (the frontends) "
             "keeps the overlay's replicas and scaleTarget; the plan sizes the workers"
             for doc in _isvcs(docs)]
    for doc, container in workers:
        where = f"Deployment {doc['metadata'].get('name')}"
        _check_claim_timeout(container, where, plan)
        _set_args(container, plan.flags(WORKER_FLAGS))
        notes += _scale_workers(docs, doc["metadata"].get("name"), plan)
    return notes


def _scale_workers(docs: Sequence[dict[str, Any]], deployment: Any,
                   plan: PlanValues) -> list[str]:
    """The ScaledObject whose scaleTargetRef is the workers' Deployment: its bounds, and
    the redis-streams trigger on the group's lag (metadata ``lagCount``; KEDA's metadata
    is map[string]string, kedacore/keda pkg/scalers/redis_streams_scaler.go
    redisStreamsMetadata)."""
    scalers = [doc for doc in docs if doc.get("kind") == "ScaledObject"
               and _as_map(_as_map(doc.get("spec")).get("scaleTargetRef")).get("name")
               == deployment]
    if not scalers:
        raise DeployError(f"no KEDA ScaledObject scales Deployment {deployment}, so the "
                          "plan's replicas have nowhere to go")
    notes = []
    for doc in scalers:
        spec = doc["spec"]
        spec["minReplicaCount"] = plan.min_replicas
        spec["maxReplicaCount"] = plan.max_replicas
        lag = [_as_map(_as_map(t).get("metadata")) for t in spec.get("triggers") or []
               if _as_map(t).get("type") == "redis-streams"
               and "lagCount" in _as_map(_as_map(t).get("metadata"))]
        for metadata in lag:
            if plan.lag_per_worker is not None:
                metadata["lagCount"] = str(plan.lag_per_worker)
            if plan.activation_lag is not None:
                metadata["activationLagCount"] = str(plan.activation_lag)
        if not lag:
            notes.append(f"ScaledObject {doc['metadata'].get('name')}: no redis-streams "
                         "trigger with lagCount, so the plan's lag targets are not written")
    return notes


def _check_claim_timeout(container: Mapping[str, Any], where: str, plan: PlanValues) -> None:
    """The predictor refuses --queue_claim_timeout_ms at or above --request_timeout_ms
    with a queue (predictor/_config.py queue_problems): refuse a plan that would do so."""
    if plan.queue_claim_timeout_ms is not None:  # the plan sets it, below its timeout
        return
    raw = _flag(container.get("args"), "queue_claim_timeout_ms")
    try:
        claim = float(raw) if raw is not None else DEFAULT_CLAIM_TIMEOUT_MS
    except ValueError:
        return
    if plan.request_timeout_ms <= claim:
        raise DeployError(
            f"the plan's request_timeout_ms {_number(plan.request_timeout_ms)} is not above "
            f"{where}'s --queue_claim_timeout_ms {_number(claim)}: its predictor would "
            "refuse to start (the claim timeout must be below the request timeout)"
        )


def _set_args(container: dict[str, Any], values: Mapping[str, str]) -> None:
    """Replace each ``--flag=value`` / ``--flag value`` of ``values`` in the container's
    args, in the form found; append the absent ones as ``--flag=value``."""
    args = container.get("args")
    args = list(args) if isinstance(args, list) else []
    seen: set[str] = set()
    index = 0
    while index < len(args):
        item = args[index]
        for flag, value in values.items():
            option = f"--{flag}"
            if isinstance(item, str) and item.startswith(option + "="):
                args[index] = f"{option}={value}"
                seen.add(flag)
            elif item == option and index + 1 < len(args):
                args[index + 1] = value
                seen.add(flag)
                index += 1
        index += 1
    args += [f"--{flag}={value}" for flag, value in values.items() if flag not in seen]
    container["args"] = args


def _flag(args: Any, flag: str) -> str | None:
    """The last value of ``--flag`` in ``args`` (argparse keeps the last), or None."""
    found = None
    items = args if isinstance(args, list) else []
    for index, item in enumerate(items):
        if not isinstance(item, str):
            continue
        if item.startswith(f"--{flag}="):
            found = item.split("=", 1)[1]
        elif item == f"--{flag}" and index + 1 < len(items):
            found = str(items[index + 1])
    return found


def _number(value: float) -> str:
    """A flag or quantity value: integers without a fraction, others as written."""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _containers(doc: Mapping[str, Any]) -> list[dict[str, Any]]:
    pod = _as_map(_as_map(_as_map(doc.get("spec")).get("template")).get("spec"))
    containers = pod.get("containers")
    return [c for c in containers if isinstance(c, dict)] if isinstance(containers, list) else []


def _isvcs(docs: Sequence[Any]) -> list[dict[str, Any]]:
    return [d for d in docs if isinstance(d, dict) and d.get("kind") == "InferenceService"]


def _as_map(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}
