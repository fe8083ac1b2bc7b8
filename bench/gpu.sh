#!/usr/bin/env bash
# The peer comparison's embedding workload (all-MiniLM-L6-v2, short and mixed-length
# texts) on a CUDA machine, in under 8 minutes, with every result under one folder.
#
#   bench/gpu.sh [OUT_DIR]        # default: bench/results/gpu-<UTC time>
#
# Needs: Linux x86_64 with an NVIDIA GPU and driver (nvidia-smi), python3.11, and
# PyPI reachable (or a wheel cache with a CUDA build of torch 2.13.0). It sets up
# .venv (make setup-python) and the peers' bench/.venv-peers and .venv-peers-np1
# (bench/peers/setup.sh) if they are missing, checks that torch sees the GPU in all
# three, then runs every server that serves the embedding model (KServe, Ray Serve,
# BentoML, Mosec, Triton through PyTriton, Infinity, ours) with --device cuda and each
# peer's knob as tuned (bench/results/peers-tuning.json, when present). Writes into OUT_DIR: peers.json,
# peers.md, peers-embedding-*.png, nvidia-smi.txt, env.txt and run.log.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-bench/results/gpu-$(date -u +%Y%m%d-%H%M%S)}
started=$(date +%s)

if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi >/dev/null 2>&1; then
  echo "gpu.sh: no working nvidia-smi: this script needs a CUDA machine" >&2
  exit 2
fi
mkdir -p "$OUT"
nvidia-smi > "$OUT/nvidia-smi.txt"

# torch 2.13.0 from PyPI is the CUDA build on Linux x86_64; a CPU-only wheel cache
# (like the development VM's /opt/wheels) would give the CPU build, which the check
# below refuses.
PYTHON=${PYTHON:-python3.11} scripts/setup.sh python
PYTHON=${PYTHON:-python3.11} bench/peers/setup.sh
for py in .venv/bin/python bench/.venv-peers/bin/python bench/.venv-peers-np1/bin/python; do
  if ! "$py" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"; then
    echo "gpu.sh: $py has torch without CUDA ($("$py" -c 'import torch; print(torch.__version__)'));" \
         "reinstall it with a CUDA build of torch==2.13.0" >&2
    exit 2
  fi
done
{
  echo "date: $(date -u +%FT%TZ)"; uname -a; nproc; free -g
  .venv/bin/python -c "import torch; print('torch', torch.__version__, torch.version.cuda, torch.cuda.get_device_name(0))"
} > "$OUT/env.txt"

tuning=()
if [ -f bench/results/peers-tuning.json ]; then
  tuning=(--tuning bench/results/peers-tuning.json)
fi
# Loads for a GPU: servers are CPU-bound in HTTP and Python long before the GPU is
# busy. 3 runs x (0.5 s warm-up + 2 s) per point; --budget-s stops starting new load
# points after 6 minutes so that results are always written before the 8.
.venv/bin/python -m bench.compare matrix --workloads embedding --device cuda \
  --short-loads 300,1000,3000 --mixed-loads 300,1000,3000 \
  --runs 3 --duration-s 2 --warmup-s 0.5 --quiet-deadline-s 5 --budget-s 360 \
  "${tuning[@]}" --out "$OUT" 2>&1 | tee "$OUT/run.log"
echo "gpu.sh: done in $(( $(date +%s) - started )) s; results in $OUT"
