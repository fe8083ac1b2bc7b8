"""TrainedModels for a multi-model InferenceService: what ``modelctl deploy render NAME@REF
--overlay multi-model --trained-model MODEL@REF ...`` adds, one per ``--trained-model``.

How KServe (aaac4e294) serves them, and so what a rendered TrainedModel must say:

- The InferenceService takes TrainedModels only when its predictor is a multi-model one,
  ``IsMMSPredictor`` (``pkg/controller/v1beta1/inferenceservice/utils/utils.go``): for a
  ``model`` (or framework) predictor, no ``storageUri``, no ``storage`` and no
  ``storageUris``, and not Hugging Face. The runtime's ``multiModel`` is not consulted when
  the predictor names its runtime (``components/predictor.go``); only KServe's runtime
  auto-selection reads it, and it asks for ``multiModel: false`` runtimes
  (``GetSupportingRuntimes(..., isMMS=false, ...)``). :func:`is_multi_model_predictor`.
- Its controller writes the ConfigMap ``modelconfig-<isvc>-0`` (``constants.ModelConfigName``,
  ``reconcilers/modelconfig``) and the pod webhook adds the model agent with that ConfigMap
  at ``/mnt/configs`` and an emptyDir at ``/mnt/models`` for both containers
  (``pkg/webhook/admission/pod/agent_injector.go`` ``InjectAgent``, ``mountModelDir``); the
  agent downloads each TrainedModel's ``storageUri`` to ``/mnt/models/<TrainedModel
  name>`` (``pkg/agent/downloader.go``, ``storage/s3.go``). Nothing of that is rendered.
- The TrainedModel controller (``pkg/controller/v1alpha1/trainedmodel/controller.go``
  ``updateConditions``) places a TrainedModel in that ConfigMap only while the sum of the
  ``spec.model.memory`` of the InferenceService's TrainedModels is at most the predictor
  container's memory limit (``IsMemoryResourceAvailable``); otherwise it stays
  ``MemoryResourceAvailable: False`` and is never downloaded. :func:`trained_models`
  refuses such a set (among the models it renders: those applied earlier count too).

``spec.model.memory`` is the version's files' bytes (its registry manifest) times
``MEMORY_HEADROOM``, in whole MiB: tokenizers, Python objects and allocator slack are not
in the predictor's own count of a model (docs/MULTI_MODEL.md, "Memory").
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from fractions import Fraction
from typing import Any

from deploycheck._errors import DeployError
from deploycheck.webhook._component import as_list, as_map, implementations, quantity

TRAINED_MODEL_API = "serving.kserve.io/v1alpha1"
MULTI_MODEL_ENV = "MULTI_MODEL_SERVER"  # constants.CustomSpecMultiModelServerEnvVarKey
MIB = 1024 * 1024
MEMORY_HEADROOM = Fraction(5, 4)
MIN_MEMORY_MIB = 16
WEIGHT_SUFFIX = ".safetensors"  # what the predictor counts before a model's first load

Files = Callable[[str, str], Mapping[str, int]]
"""``files(model, ref)``: the version's files and their sizes in bytes (its manifest)."""


def is_multi_model_predictor(predictor: Mapping[str, Any]) -> bool:
    """``IsMMSPredictor``: custom containers say so with ``MULTI_MODEL_SERVER=true`` on the
    first container; any other predictor is multi-model when its implementation has no
    storageUri and no storage spec, the predictor no storageUris, and it is not Hugging
    Face (a model id needs no storage)."""
    containers = as_list(predictor.get("containers"))
    if containers:
        return any(
            as_map(env).get("name") == MULTI_MODEL_ENV and as_map(env).get("value") == "true"
            for env in as_list(as_map(containers[0]).get("env"))
        )
    found = implementations("predictor", predictor)
    if not found:
        return False  # nothing to serve at all (the webhook refuses it)
    implementation = as_map(predictor.get(found[0]))
    model_format = as_map(as_map(predictor.get("model")).get("modelFormat")).get("name")
    if predictor.get("huggingface") is not None or model_format == "huggingface":
        return False
    return (
        implementation.get("storageUri") is None
        and implementation.get("storage") is None
        and not as_list(predictor.get("storageUris"))
    )


def require_multi_model(isvc: Mapping[str, Any], overlay: str) -> None:
    """A ``DeployError`` unless KServe would place TrainedModels on ``isvc``."""
    predictor = as_map(as_map(isvc.get("spec")).get("predictor"))
    if not is_multi_model_predictor(predictor):
        name = as_map(isvc.get("metadata")).get("name")
        raise DeployError(
            f"--trained-model needs a multi-model overlay (such as multi-model), and "
            f"{overlay!r} is not one: KServe places TrainedModels only on an InferenceService "
            f"whose predictor has no storageUri, storage or storageUris (IsMMSPredictor), "
            f"and {name}'s has"
        )


def memory_mib(file_bytes: int) -> int:
    """``spec.model.memory`` in MiB for a version of ``file_bytes``: with headroom, rounded up."""
    return max(MIN_MEMORY_MIB, math.ceil(file_bytes * MEMORY_HEADROOM / MIB))


def trained_models(
    isvc: Mapping[str, Any],
    wanted: Sequence[tuple[str, str]],
    resolve: Callable[[str, str], str],
    files: Files,
) -> list[dict[str, Any]]:
    """One TrainedModel per ``(model, ref)`` of ``wanted`` for the rendered ``isvc``:
    storageUri through ``resolve`` (as the overlay's placeholders), the framework the
    InferenceService's model format names, memory from ``files``."""
    meta = as_map(isvc.get("metadata"))
    framework, model = _implementation(as_map(as_map(isvc.get("spec")).get("predictor")))
    budget_mib, budget_flag = _budget(model.get("args"))
    docs, total_mib = [], 0
    for name, ref in wanted:
        sizes = files(name, ref)
        weights = sum(size for path, size in sizes.items() if path.endswith(WEIGHT_SUFFIX))
        if budget_mib is not None and weights > budget_mib * MIB:
            raise DeployError(
                f"--trained-model {name}@{ref}: its weights ({-(-weights // MIB)} MiB) are "
                f"larger than the predictor's {budget_flag}={budget_mib:g}: it could never be "
                "resident (the predictor answers 503, too big for the budget)"
            )
        mib = memory_mib(sum(sizes.values()))
        total_mib += mib
        doc_meta: dict[str, Any] = {"name": name}
        if meta.get("namespace") is not None:  # the controller looks its isvc up there
            doc_meta["namespace"] = meta["namespace"]
        doc_meta["labels"] = {
            "app.kubernetes.io/part-of": "modelctl",
            "app.kubernetes.io/component": "trained-model",
            "app.kubernetes.io/instance": str(meta.get("name")),
        }
        docs.append({
            "apiVersion": TRAINED_MODEL_API,
            "kind": "TrainedModel",
            "metadata": doc_meta,
            "spec": {
                "inferenceService": str(meta.get("name")),
                "model": {"storageUri": resolve(name, ref), "framework": framework,
                          "memory": f"{mib}Mi"},
            },
        })
    _check_memory_limit(meta.get("name"), model, total_mib)
    return docs


def _implementation(predictor: Mapping[str, Any]) -> tuple[str, Mapping[str, Any]]:
    """The framework a TrainedModel names (the ``model``'s format, which the runtime's
    supportedModelFormats lists, or a framework shorthand's own name) and the container
    spec whose memory limit counts (``GetImplementation().GetContainer``)."""
    found = implementations("predictor", predictor)
    if not found or found[0] == "custom":
        containers = as_list(predictor.get("containers"))
        return "", as_map(containers[0]) if containers else {}
    spec = as_map(predictor.get(found[0]))
    if found[0] == "model":
        return str(as_map(spec.get("modelFormat")).get("name") or ""), spec
    return found[0], spec


def _check_memory_limit(isvc: Any, model: Mapping[str, Any], total_mib: int) -> None:
    """IsMemoryResourceAvailable: the TrainedModels' memory within the container's limit
    (no limit reads as zero, as Go's ``Limits.Memory()``)."""
    limit = as_map(as_map(model.get("resources")).get("limits")).get("memory")
    if quantity(limit) >= total_mib * MIB:
        return
    raise DeployError(
        f"the trained models need {total_mib}Mi of memory together, more than "
        f"{isvc}'s memory limit ({limit or 'none'}): KServe's TrainedModel controller would "
        "leave the ones past the limit unplaced (MemoryResourceAvailable False, "
        "IsMemoryResourceAvailable); raise the limit or serve fewer models per "
        "InferenceService"
    )


_BUDGET_FLAGS = ("--device_memory_budget_mb", "--memory_budget_mb")


def _budget(args: Any) -> tuple[float | None, str]:
    """The budget a model's weights are held in, from the predictor's args (the last value
    of a flag wins, as argparse keeps it): the device budget when one is set, else the host
    budget; None when neither is given."""
    values: dict[str, float] = {}
    items = [str(a) for a in as_list(args)]
    for index, arg in enumerate(items):
        flag, equals, value = arg.partition("=")
        if flag in _BUDGET_FLAGS:
            value = value if equals else (items[index + 1] if index + 1 < len(items) else "")
            if re.fullmatch(r"\d+(\.\d*)?", value):
                values[flag] = float(value)
    for flag in _BUDGET_FLAGS:
        if values.get(flag):
            return values[flag], flag
    return None, ""
