#!/usr/bin/env bash
# Idempotent: make the two peers' virtualenvs for bench/compare.py. Peers are benchmark
# extras, never runtime dependencies.
#   bench/.venv-peers      Ray Serve, BentoML, Mosec          (requirements.txt)
#   bench/.venv-peers-np1  NVIDIA Triton (PyTriton), Infinity (requirements-np1.txt;
#                          both need numpy < 2, which the first venv's libraries do not)
#   bench/.venv-peers-llm  llama.cpp's server (requirements-llm.txt; `setup.sh llm` only:
#                          pip builds llama.cpp from source, minutes on 2 cores; no torch)
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PYTHON:-python3.11}

make_venv() {  # make_venv VENV REQUIREMENTS WHAT [no-torch]
  local venv=$1 reqs=$2 what=$3 torch=${4:-torch}
  local stamp="$venv/.peers-setup" want
  want=$(cat "$reqs" constraints.txt | sha256sum | cut -d' ' -f1)
  if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
    return 0
  fi
  if [ ! -x "$venv/bin/python" ]; then
    echo "peers: creating $venv"
    "$PY" -m venv "$venv"
  fi
  echo "peers: installing $what into $venv"
  "$venv/bin/python" -m pip install -q --upgrade pip
  # torch first, from the pin: an unpinned torch would pull a multi-GB CUDA build.
  if [ "$torch" = torch ]; then
    "$venv/bin/python" -m pip install -q -c constraints.txt "torch==2.13.0"
  fi
  "$venv/bin/python" -m pip install -q -c constraints.txt -r "$reqs"
  echo "$want" > "$stamp"
}

if [ "${1:-}" = llm ]; then  # bench/llm_peers.py's
  make_venv bench/.venv-peers-llm bench/peers/requirements-llm.txt "llama-cpp-python[server]" \
    no-torch
  exit 0
fi
make_venv bench/.venv-peers bench/peers/requirements.txt "Ray Serve, BentoML and Mosec"
make_venv bench/.venv-peers-np1 bench/peers/requirements-np1.txt "PyTriton and Infinity"
