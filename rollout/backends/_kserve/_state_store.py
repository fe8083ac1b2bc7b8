"""Where a KServe rollout keeps its state: a ConfigMap beside the InferenceService.

Not on the InferenceService: KServe copies every InferenceService annotation that
is not in ``serviceAnnotationDisallowedList`` onto the Knative revision template
or the Deployment's pod template (kserve ``pkg/controller/v1beta1/inferenceservice/
components/predictor.go`` ``buildPredictorResources``, whose default list is
``pkg/constants/constants.go`` ``ServiceAnnotationDisallowedList``), so with
KServe's shipped configuration every state write or lease renewal there would roll
a new revision or restart every pod. A ConfigMap is read by nobody else.

The ConfigMap ``<isvc>-rollout`` holds the state JSON under ``data.state``. It is
owned by the InferenceService (garbage-collected with it) and every write is a
replace conditional on the ``resourceVersion`` that was read (or a create, which
fails if another run created it first), so two writers never both win. The run's
lease (holder and expiry) is part of that state: taking, renewing and giving it
back is the same conditional write, atomic with the decision it guards.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from rollout._errors import NotFound
from rollout._state import RolloutState
from rollout.backends._kserve._kube import GROUP, KIND, VERSION, KubeClient

STATE_KEY = "state"
SUFFIX = "-rollout"
LABELS = {"app.kubernetes.io/managed-by": "modelctl",
          "app.kubernetes.io/component": "rollout-state"}
ISVC_LABEL = "modelctl.io/inferenceservice"


def state_configmap_name(isvc: str) -> str:
    return isvc + SUFFIX


@dataclass(frozen=True)
class StoredState:
    """One read of the state ConfigMap: the state (None: no rollout yet) and its version."""

    state: RolloutState | None
    version: str  # "" when the ConfigMap does not exist


class StateStore:
    """Reads and conditionally writes the rollout state of one InferenceService."""

    def __init__(self, kube: KubeClient, namespace: str, isvc: str) -> None:
        self.kube = kube
        self.namespace = namespace
        self.isvc = isvc
        self.name = state_configmap_name(isvc)

    @property
    def where(self) -> str:
        return f"ConfigMap {self.namespace}/{self.name}"

    def read(self) -> StoredState:
        try:
            obj = self.kube.get_configmap(self.namespace, self.name)
        except NotFound:
            return StoredState(None, "")
        return self.decode(obj)

    def decode(self, obj: Mapping[str, Any]) -> StoredState:
        version = str((obj.get("metadata") or {}).get("resourceVersion") or "")
        text = (obj.get("data") or {}).get(STATE_KEY)
        state = RolloutState.from_json(text, where=self.where) if text else None
        return StoredState(state, version)

    def body(self, state: RolloutState, version: str, owner_uid: str | None) -> dict[str, Any]:
        """The ConfigMap that stores ``state``, conditional on ``version`` when it exists."""
        meta: dict[str, Any] = {
            "name": self.name,
            "namespace": self.namespace,
            "labels": {**LABELS, ISVC_LABEL: self.isvc},
        }
        if version:
            meta["resourceVersion"] = version
        if owner_uid:
            # Garbage-collected with the InferenceService. No blockOwnerDeletion: setting
            # it needs update on the owner's finalizers, which the Role does not grant.
            meta["ownerReferences"] = [{"apiVersion": f"{GROUP}/{VERSION}", "kind": KIND,
                                        "name": self.isvc, "uid": owner_uid}]
        return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta,
                "data": {STATE_KEY: state.to_json()}}

    def write(self, state: RolloutState, version: str, owner_uid: str | None) -> StoredState:
        """Store ``state`` if the ConfigMap is still at ``version``; ``Conflict`` if not."""
        body = self.body(state, version, owner_uid)
        if version:
            obj = self.kube.replace_configmap(self.namespace, body)
        else:
            obj = self.kube.create_configmap(self.namespace, body)
        return self.decode(obj)
