#!/usr/bin/env bash
# pasture on a GPU host, checked as it is used: a process-mode cluster (as `pasture dev up`
# starts it) and jobs through the API, with a JSON summary. The checks and their pass rules
# are in scheduler/gpu_check/ (its docstring); docs/operations.md says how to read them.
#   bash scripts/gpu-check.sh                          # summary in .state/gpu-check.json
#   bash scripts/gpu-check.sh --out /tmp/gpu.json --step-timeout 300
#   bash scripts/gpu-check.sh --nvml-recording tests/fixtures/nvml/h200_recorded.json
#                                   # no GPU: replay a recorded GPU (what CI runs)
# The interpreter must import scheduler (and, on a GPU host, torch) from outside the
# repository: checked first, exit 2 naming what is missing. The JSON summary is rewritten
# after every check and on every exit, a SIGTERM at the limit included ("interrupted").
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
case "$PY" in */*) PY="$(cd "$(dirname "$PY")" && pwd)/$(basename "$PY")" ;; esac
# Tasks run "$PY -m scheduler.gpu_check probe" outside the repository with PYTHONPATH
# stripped by the executor: the interpreter itself must import pasture (and torch on a GPU).
(cd / && "$PY" -c 'import scheduler' 2>/dev/null) || {
  echo "gpu-check: $PY cannot import scheduler outside the repository (its tasks run it" \
    "there, without PYTHONPATH): install pasture into it ('$PY -m pip install -e .')" \
    "or set PASTURE_GPU_CHECK_PYTHON to one that has it" >&2
  exit 2
}
if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then
  (cd / && "$PY" -c 'import torch' 2>/dev/null) || {
    echo "gpu-check: this host has a GPU but $PY cannot import torch (the CUDA, NCCL and" \
      "torch_ddp checks need it): install torch into it or set PASTURE_GPU_CHECK_PYTHON" >&2
    exit 2
  }
fi
command -v redis-server >/dev/null || {
  echo "gpu-check: redis-server is not on PATH (apt-get install redis-server)" >&2
  exit 2
}
out=.state/gpu-check.json
for arg in "$@"; do
  if [ "$arg" = "--out" ]; then out=""; fi
done
mkdir -p .state
# SIGTERM at the limit lets the check stop its cluster (further SIGTERMs are ignored while
# it does) and write its summary, marked "interrupted"; SIGKILL 30 s later if it cannot
exec timeout --kill-after=30 "$LIMIT" "$PY" -m scheduler.gpu_check ${out:+--out "$out"} "$@"
