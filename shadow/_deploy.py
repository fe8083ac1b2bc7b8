"""``modelctl shadow start/stop``: a shadow InferenceService and the primary mirroring to it.

Start creates ``<isvc>-shadow``: a copy of the primary's predictor serving the
candidate version, with ``--role=shadow`` and ``--model_name=<isvc>`` (so it answers
the primary's own paths, ``/v1/models/<isvc>:predict``), always in KServe's Standard
mode: a plain Deployment behind the Service ``<isvc>-shadow-predictor``, never scaled
to zero, reachable at ``http://<isvc>-shadow-predictor.<ns>.svc.cluster.local``.
Then it patches the primary's ``model.args`` with ``--shadow_url`` (that address) and
``--shadow_sample_rate``: the predictor-side mirror, which works in every mode.
Stop removes the flags from the primary first (no more mirrors), then deletes the
shadow. Both are idempotent, and every write is conditional on what was read.

In queue mode (the primary has workers, ``<isvc>-queue-worker``) the shadow's frontends
enqueue on the shadow version's own stream, so start also creates its workers,
``<isvc>-queue-worker-shadow`` (a Deployment and ScaledObject copied from the stable's,
``--role=shadow``), before the shadow; stop deletes them after it.

Changing the primary's args rolls its pods (Knative: a new revision). So a shadow
cannot start or stop while a rollout is in progress on the primary: the new revision
would be taken for the canary.
"""

from __future__ import annotations

import contextlib
import copy
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rollout._aliases import AliasRegistry
from rollout._errors import InvalidTransition, NotFound
from rollout._state import MODEL_ANNOTATION, VERSION_ANNOTATION, RolloutState
from rollout.backends._kserve import _queue as queue
from rollout.backends._kserve._backend import MODE_ANNOTATION, carry_out, read_workers
from rollout.backends._kserve._kube import GROUP, KIND, VERSION, KubeClient
from rollout.backends._kserve._state_store import StateStore
from shadow._errors import ShadowError

SHADOW_SUFFIX = "-shadow"
WORKERS_SUFFIX = "-queue-worker-shadow"
WORKERS_COMPONENT = "queue-worker-shadow"
SHADOW_OF_LABEL = "modelctl.io/shadow-of"
SHADOW_ANNOTATION = "modelctl.io/shadow"
VISIBILITY_LABEL = "networking.kserve.io/visibility"
# Flags the shadow sets itself, or that only make sense on the primary.
_SHADOW_FLAGS = ("--role", "--model_name", "--shadow_url", "--shadow_sample_rate",
                 "--shadow_timeout_ms", "--shadow_max_pending")
_MIRROR_FLAGS = ("--shadow_url", "--shadow_sample_rate")
# Knative-only predictor fields, and what is about the primary alone.
_DROPPED_FIELDS = ("canaryTrafficPercent", "scaleMetric", "scaleTarget", "autoScaling")


@dataclass(frozen=True)
class ShadowChange:
    """What start/stop will do: the shadow to create, patch or delete, the primary's patch."""

    namespace: str
    primary: str
    shadow: str
    shadow_action: str  # "create", "patch", "delete" or "none"
    shadow_body: Mapping[str, Any] | None
    primary_patch: Mapping[str, Any] | None
    workers: tuple[queue.Action, ...] = ()  # queue mode: the shadow version's workers

    def to_dict(self) -> dict[str, Any]:
        return {"namespace": self.namespace, "primary": self.primary, "shadow": self.shadow,
                "shadow_action": self.shadow_action, "shadow_body": self.shadow_body,
                "primary_patch": self.primary_patch,
                "queue_workers": [a.to_dict() for a in self.workers]}


def shadow_name(isvc: str) -> str:
    name = isvc + SHADOW_SUFFIX
    if len(name) > 63:
        raise ShadowError(f"shadow name {name!r} is longer than 63 characters")
    return name


def shadow_url(isvc: str, namespace: str) -> str:
    """The shadow's in-cluster address (KServe Standard mode's predictor Service, port 80)."""
    return f"http://{shadow_name(isvc)}-predictor.{namespace}.svc.cluster.local"


def start_shadow(kube: KubeClient, registry: AliasRegistry, namespace: str, isvc: str, *,
                 model: str, ref: str, rate: float, capture_uri: str | None = None,
                 dry_run: bool = False) -> ShadowChange:
    """Create (or update) the shadow of ``isvc`` serving ``model@ref`` and mirror to it."""
    version = registry.resolve(model, ref)
    uri = registry.storage_uri(model, version)
    primary = kube.get_isvc(namespace, isvc)
    served = ((primary.get("metadata") or {}).get("annotations") or {}).get(MODEL_ANNOTATION)
    if served and served != model:
        raise ShadowError(f"{namespace}/{isvc} serves model {served!r}, not {model!r}")
    existing = _get_or_none(kube, namespace, shadow_name(isvc))
    rollout = StateStore(kube, namespace, isvc).read().state
    change = plan_start(primary, existing, namespace=namespace, model=model, version=version,
                        storage_uri=uri, rate=rate, capture_uri=capture_uri, rollout=rollout,
                        workers=read_workers(kube, namespace, isvc, workers_name(isvc)))
    if not dry_run:
        apply_change(kube, change, existing, starting=True)
    return change


def stop_shadow(kube: KubeClient, namespace: str, isvc: str, *,
                dry_run: bool = False) -> ShadowChange:
    """Stop mirroring from ``isvc`` and delete its shadow (nothing to do is fine)."""
    primary = kube.get_isvc(namespace, isvc)
    existing = _get_or_none(kube, namespace, shadow_name(isvc))
    rollout = StateStore(kube, namespace, isvc).read().state
    change = plan_stop(primary, existing, namespace=namespace, rollout=rollout,
                       workers=read_workers(kube, namespace, isvc, workers_name(isvc)))
    if not dry_run:
        apply_change(kube, change, existing, starting=False)
    return change


def workers_name(isvc: str) -> str:
    """The shadow version's worker Deployment and ScaledObject in queue mode."""
    return isvc + WORKERS_SUFFIX


def _get_or_none(kube: KubeClient, namespace: str, name: str) -> dict[str, Any] | None:
    try:
        return kube.get_isvc(namespace, name)
    except NotFound:
        return None


def plan_start(primary: Mapping[str, Any], existing: Mapping[str, Any] | None, *,
               namespace: str, model: str, version: int, storage_uri: str, rate: float,
               capture_uri: str | None = None, rollout: RolloutState | None = None,
               workers: queue.Workers | None = None) -> ShadowChange:
    """The writes that put ``model@version`` in a shadow of ``primary`` (pure);
    ``rollout`` is the primary's rollout state, if it has one; ``workers`` the queue's
    (the shadow's in the ``canary`` fields)."""
    if not 0.0 < rate <= 1.0:
        raise ShadowError(f"--rate must be in (0, 1], got {rate}")
    isvc = str(primary["metadata"]["name"])
    _refuse_during_rollout(rollout, namespace, isvc)
    name = shadow_name(isvc)
    body = shadow_body(primary, namespace=namespace, model=model, version=version,
                       storage_uri=storage_uri, capture_uri=capture_uri)
    action = "create"
    if existing is not None:
        _check_ours(existing, isvc, namespace)
        action = "patch"
    primary_args = _args(primary)
    mirror_args = [*_without(primary_args, _MIRROR_FLAGS),
                   f"--shadow_url={shadow_url(isvc, namespace)}",
                   f"--shadow_sample_rate={rate:g}"]
    if capture_uri and not _flag(primary_args, "--capture_uri"):
        mirror_args.append(f"--capture_uri={capture_uri}")
    patch = _primary_patch(primary, mirror_args,
                           json.dumps({"shadow": name, "model": model, "version": version,
                                       "rate": rate}, sort_keys=True))
    actions: list[queue.Action] = []
    if workers is not None and workers.stable is not None:
        actions = queue.candidate_actions(
            workers.stable, workers.stable_scaler, workers.canary, workers.canary_scaler,
            workers_name(isvc), uri=storage_uri, version=version, role="shadow",
            component=WORKERS_COMPONENT)
    return ShadowChange(namespace, isvc, name, action, body, patch, tuple(actions))


def plan_stop(primary: Mapping[str, Any], existing: Mapping[str, Any] | None, *,
              namespace: str, rollout: RolloutState | None = None,
              workers: queue.Workers | None = None) -> ShadowChange:
    """The writes that stop mirroring and remove the shadow (pure)."""
    isvc = str(primary["metadata"]["name"])
    _refuse_during_rollout(rollout, namespace, isvc)
    args = _args(primary)
    unmirrored = _without(args, _MIRROR_FLAGS)
    annotated = SHADOW_ANNOTATION in ((primary.get("metadata") or {}).get("annotations") or {})
    patch = _primary_patch(primary, unmirrored, None) if unmirrored != args or annotated \
        else None
    action = "none"
    if existing is not None:
        _check_ours(existing, isvc, namespace)
        action = "delete"
    removals = queue.removals(workers_name(isvc), workers.canary, workers.canary_scaler) \
        if workers is not None else []
    return ShadowChange(namespace, isvc, shadow_name(isvc), action, None, patch,
                        tuple(removals))


def apply_change(kube: KubeClient, change: ShadowChange, existing: Mapping[str, Any] | None,
                 *, starting: bool) -> None:
    """Carry out a planned change: on start the shadow's workers, the shadow, then the
    primary; on stop the other way round."""
    if starting:
        for action in change.workers:
            carry_out(kube, change.namespace, action)
    if not starting and change.primary_patch is not None:
        kube.patch_isvc(change.namespace, change.primary, change.primary_patch)
    if change.shadow_action == "create" and change.shadow_body is not None:
        kube.create_isvc(change.namespace, change.shadow_body)
    elif change.shadow_action == "patch" and change.shadow_body is not None:
        assert existing is not None
        kube.patch_isvc(change.namespace, change.shadow, _replace_patch(existing,
                                                                       change.shadow_body))
    elif change.shadow_action == "delete":
        with contextlib.suppress(NotFound):  # deleted meanwhile: what we wanted
            kube.delete_isvc(change.namespace, change.shadow)
    if starting and change.primary_patch is not None:
        kube.patch_isvc(change.namespace, change.primary, change.primary_patch)
    if not starting:
        for action in change.workers:
            carry_out(kube, change.namespace, action)


def shadow_body(primary: Mapping[str, Any], *, namespace: str, model: str, version: int,
                storage_uri: str, capture_uri: str | None) -> dict[str, Any]:
    """The shadow InferenceService: the primary's predictor, the candidate's storage."""
    isvc = str(primary["metadata"]["name"])
    predictor = copy.deepcopy(dict((primary.get("spec") or {}).get("predictor") or {}))
    for key in _DROPPED_FIELDS:
        predictor.pop(key, None)
    predictor.pop("name", None)
    predictor["minReplicas"] = max(1, int(predictor.get("minReplicas") or 1))
    model_spec = predictor.setdefault("model", {})
    model_spec["storageUri"] = storage_uri
    args = _without(list(model_spec.get("args") or []), _SHADOW_FLAGS)
    args += ["--role=shadow", f"--model_name={isvc}"]
    if capture_uri:
        args = [*_without(args, ("--capture_uri",)), f"--capture_uri={capture_uri}"]
    model_spec["args"] = args
    labels = dict((primary.get("metadata") or {}).get("labels") or {})
    labels[SHADOW_OF_LABEL] = isvc
    labels[VISIBILITY_LABEL] = "cluster-local"  # KServe creates no external route for it
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": KIND,
        "metadata": {
            "name": shadow_name(isvc),
            "namespace": namespace,
            "labels": labels,
            "annotations": {MODE_ANNOTATION: "Standard", MODEL_ANNOTATION: model,
                            VERSION_ANNOTATION: str(version)},
        },
        "spec": {"predictor": predictor},
    }


def _refuse_during_rollout(state: RolloutState | None, namespace: str, isvc: str) -> None:
    if state is not None and not state.phase.is_final:
        raise InvalidTransition(
            f"{namespace}/{isvc}: a rollout to {state.canary_label} is "
            f"{state.phase.value}; changing the primary now would start a new revision "
            "under it: promote or roll it back first")


def _check_ours(existing: Mapping[str, Any], isvc: str, namespace: str) -> None:
    labels = (existing.get("metadata") or {}).get("labels") or {}
    if labels.get(SHADOW_OF_LABEL) != isvc:
        raise ShadowError(f"{namespace}/{shadow_name(isvc)} exists but is not the shadow of "
                          f"{isvc} (no label {SHADOW_OF_LABEL}={isvc}); remove or rename it")


def _args(obj: Mapping[str, Any]) -> list[str]:
    return [str(a) for a in (((obj.get("spec") or {}).get("predictor") or {}).get("model")
                             or {}).get("args") or []]


def _flag(args: Sequence[str], flag: str) -> bool:
    return any(a == flag or a.startswith(flag + "=") for a in args)


def _without(args: Sequence[str], flags: Sequence[str]) -> list[str]:
    """``args`` minus these flags, as ``--flag=value`` or ``--flag value``."""
    out: list[str] = []
    skip = False
    for arg in args:
        if skip:
            skip = False
            continue
        if arg in flags:
            skip = True
            continue
        if any(arg.startswith(flag + "=") for flag in flags):
            continue
        out.append(arg)
    return out


def _primary_patch(primary: Mapping[str, Any], args: list[str],
                   annotation: str | None) -> dict[str, Any]:
    meta = primary.get("metadata") or {}
    return {
        "metadata": {"resourceVersion": meta.get("resourceVersion"),
                     "annotations": {SHADOW_ANNOTATION: annotation}},
        "spec": {"predictor": {"model": {"args": args}}},
    }


def _replace_patch(existing: Mapping[str, Any], body: Mapping[str, Any]) -> dict[str, Any]:
    """A merge patch that makes the existing shadow's spec and labels equal to ``body``'s."""
    current = ((existing.get("spec") or {}).get("predictor") or {})
    wanted = dict(body["spec"]["predictor"])
    predictor: dict[str, Any] = {k: None for k in current if k not in wanted}
    predictor.update(wanted)
    meta = existing.get("metadata") or {}
    return {
        "metadata": {"resourceVersion": meta.get("resourceVersion"),
                     "labels": body["metadata"]["labels"],
                     "annotations": body["metadata"]["annotations"]},
        "spec": {"predictor": predictor},
    }
