#!/usr/bin/env bash
# `make test`: every stage of the test suite, then the wall time of each stage and the total,
# printed at the end whether the stages passed or not (issue 33).
#   setup   make deps venv base-image (apt packages, the venv, the podman base image);
#           nothing else can run without it, so a failure here ends the run
#   lint    make lint
#   python  make test-python (pytest-xdist workers, then the `serial` tests alone)
#   e2e     make test-e2e     } side by side: they use different podman networks
#   ansible make test-ansible } (pasture-e2e 10.77.2.0/24; pasture-mol-<role> 10.77.2x-3x.0/24)
#                               and different container names, and the base image is built
#                               once by setup before either starts
# The two side-by-side stages write to .state/test-logs/<stage>.log, printed whole when the
# stage ends, so their outputs never interleave. Every stage runs even after another failed
# (setup excepted); the exit status is 1 when any failed.
#   TEST_OVERLAP=0 bash scripts/test-stages.sh   # e2e, then ansible, one after the other
set -uo pipefail
cd "$(dirname "$0")/.."
MAKE=${MAKE:-make}
logdir=.state/test-logs
mkdir -p "$logdir"

names=()
declare -A took=() result=()
started_all=$SECONDS

summary() {
  local name failed=0
  echo
  echo "==> make test: stage wall times"
  for name in "${names[@]}"; do
    printf '  %-8s %5ss  %s\n' "$name" "${took[$name]:-?}" "${result[$name]:-not run}"
    [[ ${result[$name]:-} == passed ]] || failed=1
  done
  printf '  %-8s %5ss  (%dm%02ds)\n' total $((SECONDS - started_all)) \
    $(((SECONDS - started_all) / 60)) $(((SECONDS - started_all) % 60))
  if ((failed)); then echo "==> make test: FAILED"; else echo "==> make test: all stages passed"; fi
}
trap summary EXIT

record() {  # name rc seconds
  names+=("$1")
  took[$1]=$3
  if (($2 == 0)); then result[$1]=passed; else result[$1]="FAILED (exit $2)"; fi
}

stage() {  # name command...: run in the foreground
  local name=$1 start=$SECONDS rc
  shift
  echo "==> stage $name: $*"
  "$@"
  rc=$?
  record "$name" "$rc" $((SECONDS - start))
  return "$rc"
}

stage setup "$MAKE" --no-print-directory deps venv base-image || exit 1
stage lint "$MAKE" --no-print-directory lint
stage python "$MAKE" --no-print-directory test-python

declare -A pid_of=() start_of=()
background() {  # name make-target
  echo "==> stage $1: $MAKE $2 (log: $logdir/$1.log)"
  start_of[$1]=$SECONDS
  "$MAKE" --no-print-directory "$2" >"$logdir/$1.log" 2>&1 &
  pid_of[$1]=$!
}
finish() {  # name: wait for it, print its log, record it
  local rc
  wait "${pid_of[$1]}"
  rc=$?
  record "$1" "$rc" $((SECONDS - ${start_of[$1]}))
  echo "==> stage $1 ended (exit $rc) after ${took[$1]}s; its output:"
  cat "$logdir/$1.log"
}
if [[ ${TEST_OVERLAP:-1} == 0 ]]; then
  background e2e test-e2e && finish e2e
  background ansible test-ansible && finish ansible
else
  background e2e test-e2e
  background ansible test-ansible
  finish e2e
  finish ansible
fi
for name in "${names[@]}"; do [[ ${result[$name]} == passed ]] || exit 1; done
exit 0
