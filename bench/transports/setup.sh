#!/usr/bin/env bash
# The transports bench's servers that are not dependencies of modelctl, each in its own
# virtualenv under bench/ (ignored by git). Idempotent: an existing virtualenv is kept.
set -euo pipefail
cd "$(dirname "$0")/.."
make_venv() {  # make_venv DIR PACKAGE...
  local dir=$1; shift
  if [ ! -x "$dir/bin/python" ]; then
    python3.11 -m venv "$dir"
    "$dir/bin/pip" install --quiet "$@"
  fi
}
make_venv .venv-granian granian==2.8.7 uvloop
make_venv .venv-grpclib grpclib==0.4.9
