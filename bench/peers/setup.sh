#!/usr/bin/env bash
# Idempotent: make bench/.venv-peers with the peer servers (Ray Serve, BentoML, Mosec) for
# bench/compare.py. Peers are benchmark extras, never runtime dependencies.
set -euo pipefail
cd "$(dirname "$0")/../.."
VENV=bench/.venv-peers
PY=${PYTHON:-python3.11}
stamp="$VENV/.peers-setup"
want=$(cat bench/peers/requirements.txt constraints.txt | sha256sum | cut -d' ' -f1)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  exit 0
fi
if [ ! -x "$VENV/bin/python" ]; then
  echo "peers: creating $VENV"
  "$PY" -m venv "$VENV"
fi
echo "peers: installing Ray Serve, BentoML and Mosec into $VENV"
"$VENV/bin/python" -m pip install -q --upgrade pip
# torch first, from the pin: an unpinned torch would pull a multi-GB CUDA build.
"$VENV/bin/python" -m pip install -q -c constraints.txt "torch==2.13.0"
"$VENV/bin/python" -m pip install -q -c constraints.txt -r bench/peers/requirements.txt
echo "$want" > "$stamp"
