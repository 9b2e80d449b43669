#!/usr/bin/env bash
# `make demo` (after the Makefile installed the system packages and the venv): a local
# cluster of podman containers provisioned by our own playbooks, then a parameter-server
# training job on real data across its nodes, submitted and followed with the pasture CLI.
# Idempotent: a second run reuses the cluster and the image and runs a new job.
#   bash scripts/demo.sh            # cluster "local": network pasture-local, 10.77.1.0/24
#   make demo-down                  # remove it
# The job part (login, submit, follow, report) is scripts/demo-job.sh, which the end-to-end
# test (tests/e2e) runs as it is on its own cluster: CI runs this command's own steps.
# Environment: PASTURE_DEMO_JOB (spec, default examples/jobs/digits-ps-worker.yaml);
# PASTURE_DEMO_CLUSTER and PASTURE_DEMO_SUBNET (default local, 10.77.1.0/24) run a second
# demo cluster beside the first (remove it with local-cluster.yml -e state=absent and the
# same local_cluster_name / local_cluster_subnet).
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
export PATH="$REPO/.venv/bin:$PATH" ANSIBLE_FORCE_COLOR=${ANSIBLE_FORCE_COLOR:-0}
PY="$REPO/.venv/bin/python"
CLUSTER=${PASTURE_DEMO_CLUSTER:-local}
SUBNET=${PASTURE_DEMO_SUBNET:-10.77.1.0/24}
INVENTORY_DIR="$REPO/inventories/$CLUSTER"
T0=$(date +%s)

step() { printf '\n==> %s  [%ss]\n' "$*" "$(($(date +%s) - T0))"; }
fail() { printf '\ndemo FAILED: %s (after %ss)\n' "$*" "$(($(date +%s) - T0))" >&2; exit 1; }
# Ansible output goes to a log; on failure its tail and the log's path are shown.
LOG_DIR="$REPO/.state/demo"; mkdir -p "$LOG_DIR"
playbook() {
  local log="$LOG_DIR/$1.log"; shift
  if ! ansible-playbook "$@" >"$log" 2>&1; then
    tail -40 "$log" >&2
    fail "ansible-playbook $* (full log: $log)"
  fi
  grep -A4 '^PLAY RECAP' "$log" | sed 's/^/    /'
}

for tool in podman ansible-playbook pasture; do
  command -v "$tool" >/dev/null || fail "$tool not found: run 'make demo' (it installs deps and the venv)"
done

step "base image for the hosts (localhost/pasture-base:bookworm, debootstrap; ~90 s once)"
bash scripts/build-base-image.sh

step "local cluster '$CLUSTER': 1 master + 2 node containers on $SUBNET (playbooks/local-cluster.yml)"
playbook local-cluster playbooks/local-cluster.yml \
  -e "local_cluster_name=$CLUSTER" -e "local_cluster_subnet=$SUBNET"
[ -s "$INVENTORY_DIR/hosts.yml" ] || fail "the playbook wrote no $INVENTORY_DIR/hosts.yml"

step "converge the cluster with site.yml (the same playbooks as for cloud VMs)"
playbook site -i "$INVENTORY_DIR/hosts.yml" site.yml

step "task image localhost/pasture-examples:latest (numpy + scikit-learn + scheduler/examples)"
bash scripts/build-task-image.sh

# The job on the cluster: login, submit, follow, report (the step clock goes on).
export PASTURE_DEMO_CLUSTER=$CLUSTER PASTURE_DEMO_T0=$T0
exec bash scripts/demo-job.sh
