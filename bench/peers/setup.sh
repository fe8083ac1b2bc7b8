#!/usr/bin/env bash
# Idempotent: make the two peers' virtualenvs for bench/compare.py. Peers are benchmark
# extras, never runtime dependencies.
#   bench/.venv-peers      Ray Serve, BentoML, Mosec          (requirements.txt)
#   bench/.venv-peers-np1  NVIDIA Triton (PyTriton), Infinity (requirements-np1.txt;
#                          both need numpy < 2, which the first venv's libraries do not)
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PYTHON:-python3.11}

make_venv() {  # make_venv VENV REQUIREMENTS WHAT
  local venv=$1 reqs=$2 what=$3
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
  "$venv/bin/python" -m pip install -q -c constraints.txt "torch==2.13.0"
  "$venv/bin/python" -m pip install -q -c constraints.txt -r "$reqs"
  echo "$want" > "$stamp"
}

make_venv bench/.venv-peers bench/peers/requirements.txt "Ray Serve, BentoML and Mosec"
make_venv bench/.venv-peers-np1 bench/peers/requirements-np1.txt "PyTriton and Infinity"
