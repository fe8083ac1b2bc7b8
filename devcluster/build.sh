#!/usr/bin/env bash
# Builds the local control plane's binaries and gathers the upstream CRDs, once per
# machine: everything lands in a cache folder outside the repository keyed by this
# folder's go.mod, go.sum, modules.txt and this script, so a second run builds nothing
# (the Go build cache does the rest when a pin moves).
#
#   devcluster/build.sh            build what is missing (progress on stderr); print the
#                                  cache folder last, on stdout
#   devcluster/build.sh --print    print the cache folder only (nothing is built)
#   devcluster/build.sh --crds     only the CRDs (no Go build: module downloads only)
#
# $MODELCTL_DEVCLUSTER_CACHE moves the cache (default ~/.cache/modelctl/devcluster).
# Binaries built from this folder's go.mod: etcd, kube-apiserver, kube-controller-manager,
# kube-scheduler, kubectl (the tests' client, at the server's version), and Knative
# Serving's controller, webhook, autoscaler and activator. KServe's manager and KEDA's
# operator and webhooks are built inside their own downloaded module (modules.txt), since
# their go.mod has exclude and replace directives that apply only to the main module.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cd "$here"

# Bump RECIPE when this script builds something differently; the pins key the rest.
RECIPE=1
key=$( (cat go.mod go.sum modules.txt; echo "$RECIPE") | sha256sum | cut -c1-16)
root="${MODELCTL_DEVCLUSTER_CACHE:-$HOME/.cache/modelctl/devcluster}"
out="$root/$key"
if [ "${1:-}" = "--print" ]; then
  echo "$out"
  exit 0
fi
mkdir -p "$out/bin" "$out/crds"

# The Kubernetes version the binaries report: component-base's version variables, which
# KWOK, Knative and KEDA read from /version (unset, they say v0.0.0-master).
k8s_version=$(awk '$1 == "k8s.io/kubernetes" { print $2; exit }' go.mod)
k8s_minor=$(echo "$k8s_version" | cut -d. -f2)
version_flags="-X k8s.io/component-base/version.gitVersion=$k8s_version \
-X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$k8s_minor \
-X k8s.io/component-base/version.buildDate=1970-01-01T00:00:00Z \
-X k8s.io/client-go/pkg/version.gitVersion=$k8s_version \
-X k8s.io/client-go/pkg/version.gitMajor=1 -X k8s.io/client-go/pkg/version.gitMinor=$k8s_minor"
export CGO_ENABLED=0 GOFLAGS=-mod=readonly
# Where the machine's Go lives when a non-login shell has not put it on PATH.
command -v go >/dev/null 2>&1 || export PATH="/usr/local/go/bin:$PATH"

module_dir() {  # the read-only folder of a downloaded module, fetched if missing
  go mod download -json "$1@$2" | python3 -c 'import json,sys; d=json.load(sys.stdin); print(d.get("Dir") or sys.exit(d.get("Error", "no Dir")))'
}

required_dir() {  # the folder of a module at the version go.mod requires, fetched if missing
  # (go list -m's .Dir is empty until the module is downloaded: a fresh machine's case)
  module_dir "$1" "$(go list -m -f '{{.Version}}' "$1")"
}

pin() {  # the version modules.txt names for a module
  awk -v m="$1" '$1 == m { print $2; exit }' modules.txt
}

build() {  # build NAME PACKAGE [DIR]: one binary, timed, skipped when present
  local name="$1" pkg="$2" dir="${3:-$here}" started
  if [ -x "$out/bin/$name" ]; then
    return 0
  fi
  started=$(date +%s)
  echo "devcluster: building $name ($pkg)" >&2
  (cd "$dir" && go build -trimpath -ldflags "-s -w $version_flags" -o "$out/bin/$name.tmp" "$pkg")
  mv "$out/bin/$name.tmp" "$out/bin/$name"
  echo "devcluster: built $name in $(( $(date +%s) - started )) s" >&2
}

crds() {  # copy the upstream CRDs this project validates and applies
  local dir
  [ -f "$out/crds/.done-2" ] && return 0
  echo "devcluster: gathering CRDs" >&2
  rm -rf "$out/crds" && mkdir -p "$out/crds"/{kserve,keda,gateway-api,prometheus-operator,istio,knative}
  dir=$(module_dir github.com/kserve/kserve "$(pin github.com/kserve/kserve)")
  cp "$dir"/config/crd/full/serving.kserve.io_*.yaml "$dir"/config/crd/full/clusterstoragecontainer/*_clusterstoragecontainers.yaml \
    "$out/crds/kserve/"
  dir=$(module_dir github.com/kedacore/keda/v2 "$(pin github.com/kedacore/keda/v2)")
  cp "$dir"/config/crd/bases/*.yaml "$out/crds/keda/"
  dir=$(module_dir sigs.k8s.io/gateway-api "$(pin sigs.k8s.io/gateway-api)")
  cp "$dir"/config/crd/standard/gateway.networking.k8s.io_{gatewayclasses,gateways,httproutes,referencegrants,grpcroutes}.yaml \
    "$out/crds/gateway-api/"
  dir=$(module_dir github.com/prometheus-operator/prometheus-operator \
    "$(pin github.com/prometheus-operator/prometheus-operator)")
  cp "$dir"/example/prometheus-operator-crd/monitoring.coreos.com_{podmonitors,servicemonitors,prometheusrules}.yaml \
    "$out/crds/prometheus-operator/"
  dir=$(module_dir istio.io/api "$(pin istio.io/api)")
  cp "$dir"/kubernetes/customresourcedefinitions.gen.yaml "$out/crds/istio/"
  # Knative Serving's, its networking layer's and its image cache's CRDs (the YAML files
  # that hold one; the revision controller watches caching.internal.knative.dev Images).
  for dir in "$(required_dir knative.dev/serving)/config/core/300-resources" \
             "$(required_dir knative.dev/networking)/config" \
             "$(required_dir knative.dev/caching)/config"; do
    grep -l '^kind: CustomResourceDefinition' "$dir"/*.yaml | xargs -I{} cp {} "$out/crds/knative/"
  done
  chmod -R u+w "$out/crds"
  touch "$out/crds/.done-2"
}

kserve_config() {  # what the tests install of KServe besides its CRDs, as it ships them
  local dir
  [ -f "$out/kserve-config/.done" ] && return 0
  dir=$(module_dir github.com/kserve/kserve "$(pin github.com/kserve/kserve)")
  rm -rf "$out/kserve-config" && mkdir -p "$out/kserve-config"
  cp "$dir"/config/configmap/inferenceservice.yaml "$dir"/config/webhook/manifests.yaml \
    "$dir"/config/storagecontainers/default.yaml "$out/kserve-config/"
  chmod -R u+w "$out/kserve-config"
  touch "$out/kserve-config/.done"
}

knative_config() {  # Knative Serving's ConfigMaps and webhook configurations, as shipped
  local serving
  [ -f "$out/knative-config/.done" ] && return 0
  serving=$(required_dir knative.dev/serving)
  rm -rf "$out/knative-config" && mkdir -p "$out/knative-config"/{configmaps,webhooks}
  cp "$serving"/config/core/configmaps/*.yaml \
    "$(required_dir knative.dev/networking)/config/config-network.yaml" \
    "$out/knative-config/configmaps/"
  cp "$serving"/config/core/webhooks/*.yaml "$out/knative-config/webhooks/"
  chmod -R u+w "$out/knative-config"
  touch "$out/knative-config/.done"
}

kwok_stages() {  # KWOK's Stage CRD and its default Stages, applied by the tests as CRs
  local dir
  [ -f "$out/kwok/.done" ] && return 0
  dir=$(module_dir sigs.k8s.io/kwok "$(pin sigs.k8s.io/kwok)")
  rm -rf "$out/kwok" && mkdir -p "$out/kwok/stages"
  cp "$dir"/kustomize/crd/bases/kwok.x-k8s.io_stages.yaml "$out/kwok/"
  cp "$dir"/kustomize/stage/node/fast/node-initialize.yaml \
    "$dir"/kustomize/stage/node/heartbeat-with-lease/node-heartbeat-with-lease.yaml \
    "$dir"/kustomize/stage/pod/fast/pod-{ready,complete,delete}.yaml "$out/kwok/stages/"
  chmod -R u+w "$out/kwok"
  touch "$out/kwok/.done"
}

crds
kserve_config
knative_config
kwok_stages
if [ "${1:-}" = "--crds" ]; then
  echo "$out"
  exit 0
fi

total=$(date +%s)
build etcd go.etcd.io/etcd/server/v3
build kube-apiserver k8s.io/kubernetes/cmd/kube-apiserver
build kube-controller-manager k8s.io/kubernetes/cmd/kube-controller-manager
build kube-scheduler k8s.io/kubernetes/cmd/kube-scheduler
build kubectl k8s.io/kubernetes/cmd/kubectl
kwok=$(module_dir sigs.k8s.io/kwok "$(pin sigs.k8s.io/kwok)")
build kwok ./cmd/kwok "$kwok"
kserve=$(module_dir github.com/kserve/kserve "$(pin github.com/kserve/kserve)")
build kserve-manager ./cmd/manager "$kserve"
keda=$(module_dir github.com/kedacore/keda/v2 "$(pin github.com/kedacore/keda/v2)")
build keda-operator ./cmd/operator "$keda"
build keda-webhooks ./cmd/webhooks "$keda"
build knative-controller knative.dev/serving/cmd/controller
build knative-webhook knative.dev/serving/cmd/webhook
build knative-autoscaler knative.dev/serving/cmd/autoscaler
build knative-activator knative.dev/serving/cmd/activator
echo "devcluster: all binaries in $out/bin ($(( $(date +%s) - total )) s this run)" >&2
# Folders of older pins (about 1 GB each) go once unused for a week; this one is marked.
# A folder's last use is its .used file (each run of this script touches its own).
touch "$out/.used"
for old in "$root"/*/; do
  old="${old%/}"
  [ "$old" = "$out" ] && continue
  used="$old/.used"; [ -e "$used" ] || used="$old"
  if [ -n "$(find "$used" -maxdepth 0 -mtime +7)" ]; then
    rm -rf "$old" && echo "devcluster: removed $old (another pin's build, unused for a week)" >&2
  fi
done
echo "$out"
