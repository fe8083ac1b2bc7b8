"""KServe's configuration and the constants the port uses, quoted from kserve/kserve aaac4e294.

Every constant names the Go identifier it quotes; the file is ``pkg/constants/constants.go``
unless said otherwise. Knative's keys come from knative/serving
``pkg/apis/autoscaling/register.go``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any

# -- pkg/constants/constants.go -----------------------------------------------------------
KSERVE_GROUP = "serving.kserve.io"  # KServeAPIGroupName
DEPLOYMENT_MODE = "serving.kserve.io/deploymentMode"  # DeploymentMode
ENABLE_TAG_ROUTING = "serving.kserve.io/enable-tag-routing"  # EnableRoutingTagAnnotationKey
AUTOSCALER_CLASS = "serving.kserve.io/autoscalerClass"  # AutoscalerClass
AUTOSCALER_CLASS_HPA = "hpa"  # AutoscalerClassHPA (DefaultAutoscalerClass)
AUTOSCALER_CLASS_NONE = "none"  # AutoscalerClassNone
AUTOSCALER_CLASS_EXTERNAL = "external"  # AutoscalerClassExternal
DISABLE_AUTO_UPDATE = "serving.kserve.io/disable-auto-update"  # DisableAutoUpdateAnnotationKey
STORAGE_URI_ANNOTATION = (  # StorageInitializerSourceUriInternalAnnotationKey
    "internal.serving.kserve.io/storage-initializer-sourceuri")


def template_uri(template: dict[str, Any]) -> str | None:
    """The storageUri a pod or revision template carries (STORAGE_URI_ANNOTATION)."""
    return ((template.get("metadata") or {}).get("annotations") or {}).get(
        STORAGE_URI_ANNOTATION)


ROLLOUT_DURATION = "serving.knative.dev/rollout-duration"  # RollOutDurationAnnotationKey
OPENSHIFT_PASSTHROUGH = (  # KnativeOpenshiftEnablePassthroughKey
    "serving.knative.openshift.io/enablePassthrough")
ISVC_LABEL = "serving.kserve.io/inferenceservice"  # InferenceServicePodLabelKey
COMPONENT_LABEL = "component"  # KServiceComponentLabel
PREDICTOR = "predictor"  # v1beta1.PredictorComponent / constants.Predictor
RAW_APP_LABEL = "app"  # RawDeploymentAppLabel
NETWORK_VISIBILITY = "networking.kserve.io/visibility"  # NetworkVisibility
CLUSTER_LOCAL = "cluster-local"  # ClusterLocalVisibility
CLUSTER_LOCAL_DOMAIN = "svc.cluster.local"  # ClusterLocalDomain
CONTAINER_NAME = "kserve-container"  # InferenceServiceContainerName
ISVC_NAME_ENV = "INFERENCE_SERVICE_NAME"  # InferenceServiceNameEnvVarKey
CUSTOM_STORAGE_URI_ENV = "STORAGE_URI"  # CustomSpecStorageUriEnvVarKey
DEFAULT_HTTP_PORT = 8080  # InferenceServiceDefaultHttpPort
COMMON_HTTP_PORT = 80  # CommonDefaultHttpPort
DEFAULT_MIN_REPLICAS = 1  # DefaultMinReplicas
DEFAULT_CPU_UTILIZATION = 80  # DefaultCPUUtilization
ISVC_NAME_HEADER = "KServe-Isvc-Name"  # IsvcNameHeader
ISVC_NAMESPACE_HEADER = "KServe-Isvc-Namespace"  # IsvcNamespaceHeader
FALLBACK_PREFIX = "^/.*$"  # FallbackPrefix()
KNATIVE_MODES = {"Knative": "Knative", "Serverless": "Knative"}  # ParseDeploymentMode
STANDARD_MODES = {"Standard": "Standard", "RawDeployment": "Standard"}

# -- knative/serving pkg/apis/autoscaling/register.go --------------------------------------
KNATIVE_CLASS = "autoscaling.knative.dev/class"  # ClassAnnotationKey
KNATIVE_KPA = "kpa.autoscaling.knative.dev"  # KPA
KNATIVE_TARGET = "autoscaling.knative.dev/target"  # TargetAnnotationKey
KNATIVE_METRIC = "autoscaling.knative.dev/metric"  # MetricAnnotationKey
KNATIVE_MIN_SCALE = "autoscaling.knative.dev/min-scale"  # MinScaleAnnotationKey
KNATIVE_MAX_SCALE = "autoscaling.knative.dev/max-scale"  # MaxScaleAnnotationKey

# constants.ServiceAnnotationDisallowedList, in its order.
SERVICE_ANNOTATION_DISALLOWED_LIST = (
    KNATIVE_MIN_SCALE,
    KNATIVE_MAX_SCALE,
    STORAGE_URI_ANNOTATION,
    "kubectl.kubernetes.io/last-applied-configuration",
    "modelFormat",  # ModelFormatAnnotationKey
)
# constants.RevisionTemplateLabelDisallowedList: VisibilityLabel.
REVISION_TEMPLATE_LABEL_DISALLOWED_LIST = ("networking.knative.dev/visibility",)


@dataclass(frozen=True)
class KServeConfig:
    """What the stand-in reads from KServe's ``inferenceservice-config`` ConfigMap.

    Defaults are KServe's shipped ones (``config/configmap/inferenceservice.yaml``):
    ``ingress.enableGatewayApi`` false, ``ingress.ingressDomain`` example.com,
    ``ingress.domainTemplate`` ``{{ .Name }}-{{ .Namespace }}.{{ .IngressDomain }}``,
    ``ingress.urlScheme`` http, ``ingress.ingressClassName`` istio,
    ``ingress.kserveIngressGateway`` kserve/kserve-ingress-gateway,
    ``ingress.localGatewayService``, ``ingress.disableIngressCreation`` false,
    ``deploy.defaultDeploymentMode`` Serverless (normalised to Knative by
    ``NewDeployConfig``). The two disallowed lists are exactly what a field holds;
    :meth:`from_configmap` builds them as ``NewInferenceServicesConfig`` does (the
    ConfigMap's entries appended to KServe's own).
    """

    disallowed_annotations: tuple[str, ...] = SERVICE_ANNOTATION_DISALLOWED_LIST
    disallowed_labels: tuple[str, ...] = REVISION_TEMPLATE_LABEL_DISALLOWED_LIST
    enable_gateway_api: bool = False
    default_deployment_mode: str = "Knative"
    ingress_domain: str = "example.com"
    url_scheme: str = "http"
    ingress_class_name: str = "istio"
    kserve_ingress_gateway: str = "kserve/kserve-ingress-gateway"
    local_gateway_service: str = "knative-local-gateway.istio-system.svc.cluster.local"
    disable_ingress_creation: bool = False

    @classmethod
    def from_configmap(cls, *, service_annotation_disallowed_list: Iterable[str] | None = None,
                       service_label_disallowed_list: Iterable[str] | None = None,
                       **fields: object) -> KServeConfig:
        """pkg/apis/serving/v1beta1/configmap.go ``NewInferenceServicesConfig``: a list the
        ConfigMap leaves out is KServe's default; one it sets is appended to the default."""
        config = cls()
        if service_annotation_disallowed_list is not None:
            config = replace(config, disallowed_annotations=(
                *SERVICE_ANNOTATION_DISALLOWED_LIST, *service_annotation_disallowed_list))
        if service_label_disallowed_list is not None:
            config = replace(config, disallowed_labels=(
                *REVISION_TEMPLATE_LABEL_DISALLOWED_LIST, *service_label_disallowed_list))
        return replace(config, **fields)  # type: ignore[arg-type]

    def domain(self, name: str, namespace: str) -> str:
        """reconcilers/ingress/domain.go ``GenerateDomainName`` with the shipped template."""
        return f"{name}-{namespace}.{self.ingress_domain}"


KSERVE_DEFAULTS = KServeConfig()


def predictor_service_name(isvc: str, predictor_name: str | None = None) -> str:
    """``PredictorServiceName``: ``<isvc>-<predictor.name>-predictor`` or ``<isvc>-predictor``."""
    return f"{isvc}-{predictor_name}-{PREDICTOR}" if predictor_name else f"{isvc}-{PREDICTOR}"


def raw_service_label(service: str) -> str:
    """``GetRawServiceLabel``."""
    return f"isvc.{service}"


def service_hostname(name: str, namespace: str) -> str:
    """knative.dev/pkg network/domain.go ``GetServiceHostname`` (cluster domain cluster.local)."""
    return f"{name}.{namespace}.svc.cluster.local"


def parse_deployment_mode(mode: str, default: str) -> str:
    """``ParseDeploymentMode``: "" is the default; legacy names are normalised."""
    if not mode:
        return default
    return KNATIVE_MODES.get(mode) or STANDARD_MODES.get(mode) or mode


def deployment_mode(status_mode: str, annotations: dict[str, str], default: str) -> str:
    """controller/v1beta1/inferenceservice/utils/utils.go ``GetDeploymentMode``: the mode
    recorded in the status first, then a valid annotation, then the configured default."""
    if status_mode:
        return parse_deployment_mode(status_mode, default)
    if DEPLOYMENT_MODE in annotations:
        mode = parse_deployment_mode(annotations[DEPLOYMENT_MODE], default)
        if mode in ("Standard", "Knative", "ModelMesh"):
            return mode
    return parse_deployment_mode(default, "Knative")
