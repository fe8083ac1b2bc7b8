"""One InferenceService component (predictor, transformer, explainer, canary predictor) as
KServe's validating webhook judges it: which implementation it names, that
implementation's own ``Validate``, the ``ComponentExtensionSpec`` and the autoscaler.

Ported from KServe aaac4e294, ``pkg/apis/serving/v1beta1/``: ``component.go``,
``predictor.go``, ``predictor_*.go``, ``explainer*.go``, ``transformer*.go`` and the
autoscaling half of ``inference_service_validation.go``. Messages are KServe's own.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from decimal import Decimal, InvalidOperation
from typing import Any

from deploycheck._problems import Finding, JsonPath

# KServe's implementations of a predictor, in predictorFrameworkContainer's order:
# ``model``, then the framework shorthands (each a container spec like ``model``).
MODEL_KEYS = (
    "model",
    "sklearn",
    "xgboost",
    "tensorflow",
    "pytorch",
    "triton",
    "onnx",
    "huggingface",
    "pmml",
    "lightgbm",
    "paddle",
)
# validatePredictor's and GetConfidentialSpecFromPredictor's order: frameworks, then model.
SWITCH_ORDER = (*MODEL_KEYS[1:], "model")

DEPLOYMENT_MODE = "serving.kserve.io/deploymentMode"
AUTOSCALER_CLASS = "serving.kserve.io/autoscalerClass"
KNATIVE_CLASS = "autoscaling.knative.dev/class"
KNATIVE_HPA = "hpa.autoscaling.knative.dev"
KSERVE_CONTAINER = "kserve-container"  # constants.InferenceServiceContainerName
STORAGE_URI_ENV = "STORAGE_URI"  # constants.CustomSpecStorageUriEnvVarKey
PROTOCOL_ENV = "PROTOCOL"  # constants.CustomSpecProtocolEnvVarKey

# PredictorSpec.GetImplementations' order (the first is GetImplementation()).
PREDICTOR_IMPLEMENTATIONS = (
    "xgboost",
    "pytorch",
    "triton",
    "sklearn",
    "tensorflow",
    "onnx",
    "pmml",
    "lightgbm",
    "paddle",
    "huggingface",
    "model",
)
# ExactlyOneErrorFor lists every Go field of the spec struct but the last
# (ComponentExtensionSpec for predictors, StorageUris for the other two).
_GO_FIELDS = {
    "predictor": (
        "PredictorSpec",
        "Name, SKLearn, XGBoost, Tensorflow, PyTorch, Triton, ONNX, HuggingFace, PMML, "
        "LightGBM, Paddle, Model, StorageUris, StorageContainerName, WorkerSpec, PodSpec",
    ),
    "transformer": ("TransformerSpec", "PodSpec, ComponentExtensionSpec"),
    "explainer": ("ExplainerSpec", "ART, PodSpec, ComponentExtensionSpec"),
}
_STORAGE_SPEC_PREFIXES = ("s3://", "hdfs://", "webhdfs://")  # SupportedStorageSpecURIPrefixList
_QUANTITY = re.compile(
    r"^([+-]?[0-9.]+(?:[eE][+-]?[0-9]+)?)(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E)?$"
)
_SUFFIX = {
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "k": Decimal("1e3"),
    "M": Decimal("1e6"),
    "G": Decimal("1e9"),
    "T": Decimal("1e12"),
    "P": Decimal("1e15"),
    "E": Decimal("1e18"),
    **{s: Decimal(1024 ** (i + 1)) for i, s in enumerate(("Ki", "Mi", "Gi", "Ti", "Pi", "Ei"))},
}


def as_map(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def as_int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def go_quote(text: str) -> str:
    """Go's %q for the plain strings names are made of."""
    return json.dumps(text, ensure_ascii=False)


def quantity(value: Any) -> Decimal:
    """A Kubernetes quantity; anything unparseable reads as zero, like Go's empty Quantity."""
    match = _QUANTITY.match(str(value)) if value is not None else None
    if match is None:
        return Decimal(0)
    try:
        return Decimal(match.group(1)) * _SUFFIX.get(match.group(2) or "", Decimal(1))
    except InvalidOperation:
        return Decimal(0)


# -- implementations (PredictorSpec/TransformerSpec/ExplainerSpec.GetImplementations) ----


def implementations(kind: str, spec: Mapping[str, Any]) -> list[str]:
    """The implementations a component names: a key of ``spec``, or ``custom`` for its
    containers (``predictor``: once per container named kserve-container, else once)."""
    found: list[str] = []
    if kind == "predictor":
        found = [key for key in PREDICTOR_IMPLEMENTATIONS if spec.get(key) is not None]
    elif kind == "explainer" and spec.get("art") is not None:
        found = ["art"]
    containers = as_list(spec.get("containers"))
    if containers:
        if kind != "predictor":
            found.append("custom")
        else:
            found += ["custom" for c in containers if as_map(c).get("name") == KSERVE_CONTAINER]
            if not found:
                found.append("custom")
    return found


def _env_value(container: Any, name: str) -> str | None:
    for env in as_list(as_map(container).get("env")):
        if as_map(env).get("name") == name:
            return str(as_map(env).get("value") or "")
    return None


def storage_uri(kind: str, spec: Mapping[str, Any], implementation: str) -> str | None:
    """``GetStorageUri()`` of one implementation (None: not set)."""
    containers = as_list(spec.get("containers"))
    if implementation == "custom":
        if kind == "predictor":  # CustomPredictor: the kserve-container's STORAGE_URI
            named = [c for c in containers if as_map(c).get("name") == KSERVE_CONTAINER]
            return _env_value(named[0], STORAGE_URI_ENV) if named else None
        return _env_value(containers[0], STORAGE_URI_ENV) if containers else None
    uri = as_map(spec.get(implementation)).get("storageUri")
    if implementation == "art":  # ExplainerExtensionSpec: "" means unset
        return str(uri) if uri else None
    return None if uri is None else str(uri)


def validate_exactly_one(kind: str, spec: Mapping[str, Any], path: JsonPath) -> list[Finding]:
    """component.go validateExactlyOneImplementation / ExactlyOneErrorFor."""
    if len(implementations(kind, spec)) == 1:
        return []
    struct, fields = _GO_FIELDS[kind]
    return [Finding(path, f"exactly one of [{fields}] must be specified in {struct}")]


# -- ComponentImplementation.Validate ------------------------------------------------------


def validate_implementation(kind: str, spec: Mapping[str, Any], path: JsonPath) -> list[Finding]:
    """The one implementation's ``Validate()``: CustomPredictor.validateCustomProtocol,
    ONNXRuntimeSpec's file extension, TFServing/TorchServe validateGPU, and
    validateStorageSpec for the kinds that call it (ModelSpec and the other framework
    specs inherit PredictorExtensionSpec.Validate, which checks nothing)."""
    [implementation] = implementations(kind, spec)
    if implementation == "custom":
        if kind != "predictor":
            return []  # CustomTransformer/CustomExplainer.Validate check nothing
        return _custom_protocol(spec, path)
    impl = as_map(spec.get(implementation))
    where: JsonPath = (*path, implementation)
    out: list[Finding] = []
    uri = storage_uri(kind, spec, implementation)
    if implementation == "onnx" and uri is not None:
        ext = _path_ext(uri)
        if ext not in (".onnx", ""):
            out.append(
                Finding(
                    (*where, "storageUri"),
                    f"expected storageUri file extension: '.onnx' but got '{ext}'",
                )
            )
    if implementation in ("tensorflow", "pytorch"):
        out += _runtime_gpu(implementation, impl, where)
    if implementation in ("huggingface", "onnx", "pmml", "tensorflow", "pytorch", "art"):
        out += _storage_spec(impl.get("storage"), uri, where)
    return out


def _path_ext(uri: str) -> str:
    """Go's path.Ext: the suffix from the final dot in the final slash-separated element."""
    last = uri.rsplit("/", 1)[-1]
    return last[last.rfind(".") :] if "." in last else ""


def _custom_protocol(spec: Mapping[str, Any], path: JsonPath) -> list[Finding]:
    """predictor_custom.go CustomPredictor.validateCustomProtocol (first container only)."""
    container = as_list(spec.get("containers"))[0]
    for index, env in enumerate(as_list(as_map(container).get("env"))):
        if as_map(env).get("name") != PROTOCOL_ENV:
            continue
        value = str(as_map(env).get("value") or "")
        if value in ("v1", "v2"):
            return []
        # Upstream passes the arguments the other way round from the format's wording.
        return [
            Finding(
                (*path, "containers", 0, "env", index, "value"),
                f"invalid protocol v1, v2. Must be one of [{value}]",
            )
        ]
    return []


# predictor_tfserving.go / predictor_torchserve.go Invalid*RuntimeIncludesGPU/ExcludesGPU
# (the PyTorch ones end in ". ", the Tensorflow ones in nothing).
_RUNTIME_GPU = {
    "tensorflow": (
        "Tensorflow RuntimeVersion is not GPU enabled but GPU resources are requested",
        "Tensorflow RuntimeVersion is GPU enabled but GPU resources are not requested",
    ),
    "pytorch": (
        "PyTorch RuntimeVersion is not GPU enabled but GPU resources are requested. ",
        "PyTorch RuntimeVersion is GPU enabled but GPU resources are not requested. ",
    ),
}


def _runtime_gpu(framework: str, impl: Mapping[str, Any], path: JsonPath) -> list[Finding]:
    """TFServingSpec.validateGPU / TorchServeSpec.validateGPU (utils.IsGPUEnabled: a limit
    on nvidia.com/gpu or an nvidia.com/mig* resource)."""
    version = impl.get("runtimeVersion")
    if version is None:
        return []
    limits = as_map(as_map(impl.get("resources")).get("limits"))
    gpu = "nvidia.com/gpu" in limits or any(str(k).startswith("nvidia.com/mig") for k in limits)
    includes, excludes = _RUNTIME_GPU[framework]
    if gpu and "-gpu" not in str(version):
        return [Finding((*path, "runtimeVersion"), includes)]
    if not gpu and "-gpu" in str(version):
        return [Finding((*path, "runtimeVersion"), excludes)]
    return []


def _storage_spec(storage: Any, uri: str | None, path: JsonPath) -> list[Finding]:
    """component.go validateStorageSpec."""
    if storage is None:
        return []
    prefixes = ", ".join(_STORAGE_SPEC_PREFIXES)
    if uri is not None:
        if uri.startswith(_STORAGE_SPEC_PREFIXES):
            return []
        return [
            Finding(
                (*path, "storageUri"),
                f"storageUri, must be one of: [{prefixes}] or match "
                "https://{}.blob.core.windows.net/{}/{} or be an absolute or relative local "
                f"path. StorageUri [{uri}] is not supported",
            )
        ]
    kind = as_map(as_map(storage).get("parameters")).get("type")
    if kind is None or f"{kind}://".startswith(_STORAGE_SPEC_PREFIXES):
        return []
    return [
        Finding(
            (*path, "storage", "parameters", "type"),
            f"storage.spec.type, must be one of: [{prefixes}]. storage.spec.type [{kind}] "
            "is not supported",
        )
    ]
