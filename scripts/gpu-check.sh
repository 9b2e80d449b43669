#!/usr/bin/env bash
# pasture on a GPU host, checked as it is used: a process-mode cluster (as `pasture dev up`
# starts it) and jobs through the API, with a JSON summary. The checks and their pass rules
# are in scheduler/gpu_check.py (its docstring); docs/operations.md says how to read them.
#   bash scripts/gpu-check.sh                          # summary in .state/gpu-check.json
#   bash scripts/gpu-check.sh --out /tmp/gpu.json --step-timeout 300
#   bash scripts/gpu-check.sh --nvml-recording tests/fixtures/nvml/h200_recorded.json
#                                   # no GPU: replay a recorded GPU (what CI runs)
# Without a GPU and without a recording, the GPU checks are skipped, each naming why
# (--require-gpu makes that exit 2). Exit 0: no check failed; 1: a check failed.
# Environment: PASTURE_GPU_CHECK_PYTHON (the interpreter for the cluster and its tasks,
# default .venv/bin/python; give one that imports torch for the CUDA, NCCL and torch_ddp
# checks), PASTURE_GPU_CHECK_LIMIT (hard limit of the whole run, seconds, default 1800).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PASTURE_GPU_CHECK_PYTHON:-.venv/bin/python}
LIMIT=${PASTURE_GPU_CHECK_LIMIT:-1800}
[ -x "$PY" ] || command -v "$PY" >/dev/null || {
  echo "gpu-check: no interpreter $PY (run 'make venv' or set PASTURE_GPU_CHECK_PYTHON)" >&2
  exit 2
}
command -v redis-server >/dev/null || {
  echo "gpu-check: redis-server is not on PATH (apt-get install redis-server)" >&2
  exit 2
}
out=.state/gpu-check.json
for arg in "$@"; do
  if [ "$arg" = "--out" ]; then out=""; fi
done
mkdir -p .state
# SIGTERM at the limit lets the check stop its cluster; SIGKILL 30 s later if it cannot
exec timeout --kill-after=30 "$LIMIT" "$PY" -m scheduler.gpu_check ${out:+--out "$out"} "$@"
