"""A real control plane for tests: Kubernetes (etcd, kube-apiserver, kube-controller-
manager, kube-scheduler), KWOK for nodes and pods, KServe's manager and webhooks and
KEDA's operator, all built from Go modules by ``devcluster/build.sh`` (pinned in
``devcluster/go.mod`` and ``devcluster/modules.txt``) and started on 127.0.0.1, one per
test session.

``tests/support/cluster/fixtures.py`` holds the pytest fixtures; docs/ROLLOUT.md
"Tested against" lists what is real and what is stood in for. Source: each module names
the upstream files it follows (sigs.k8s.io/kwok ``pkg/kwokctl/components/*.go`` for the
flags, github.com/kserve/kserve ``cmd/manager/main.go``, github.com/kedacore/keda
``cmd/operator/main.go``); the one stand-in, ``_gateway``, cites the Gateway API spec.
"""

from tests.support.cluster._binaries import Binaries, binaries
from tests.support.cluster._cluster import Cluster, start_cluster
from tests.support.cluster._controlplane import ControlPlane, write_kubeconfig
from tests.support.cluster._knative import KnativeServing
from tests.support.cluster._kserve import KServe, config_with, shipped_config
from tests.support.cluster._networking import NetworkingStandIn

__all__ = [
    "Binaries",
    "Cluster",
    "ControlPlane",
    "KServe",
    "KnativeServing",
    "NetworkingStandIn",
    "binaries",
    "config_with",
    "shipped_config",
    "start_cluster",
    "write_kubeconfig",
]
