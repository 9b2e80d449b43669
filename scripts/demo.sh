#!/usr/bin/env bash
# `make demo` (after the Makefile installed the system packages and the venv): a local
# cluster of podman containers provisioned by our own playbooks, then a parameter-server
# training job on real data across its nodes, submitted and followed with the pasture CLI.
# Idempotent: a second run reuses the cluster and the image and runs a new job.
#   bash scripts/demo.sh            # cluster "local": network pasture-local, 10.77.1.0/24
#   make demo-down                  # remove it
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
JOB_SPEC=${PASTURE_DEMO_JOB:-examples/jobs/digits-ps-worker.yaml}
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

step "pasture login (API over TLS, admin token and CA fetched by the playbook)"
ENDPOINT=$("$PY" -c 'import sys, yaml; print(yaml.safe_load(open(sys.argv[1]))["all"]["vars"]["pasture_api_endpoint"])' "$INVENTORY_DIR/hosts.yml")
[ -s "$INVENTORY_DIR/admin.token" ] || fail "no admin token in $INVENTORY_DIR/admin.token"
[ -s "$INVENTORY_DIR/ca.crt" ] || fail "no API CA certificate in $INVENTORY_DIR/ca.crt"
PASTURE_TOKEN="$(cat "$INVENTORY_DIR/admin.token")" \
  pasture login "$ENDPOINT" --ca-cert "$INVENTORY_DIR/ca.crt"
pasture node list

# Job names are unique in a cluster: every demo run submits a copy with a fresh name.
JOB="digits-$(date +%m%d-%H%M%S)"
SPEC_COPY="$LOG_DIR/$JOB.yaml"
"$PY" - "$JOB_SPEC" "$SPEC_COPY" "$JOB" <<'PYEOF'
import sys, yaml
spec = yaml.safe_load(open(sys.argv[1]))
spec["name"] = sys.argv[3]
yaml.safe_dump(spec, open(sys.argv[2], "w"), sort_keys=False)
PYEOF

step "submit $JOB_SPEC as job $JOB, follow ps-0's log"
pasture job submit "$SPEC_COPY"
pasture job logs "$JOB" --role ps --index 0 --follow \
  || echo "(streaming the log failed; waiting for the job to end instead)"

step "result of job $JOB"
set +e
"$PY" scripts/demo_report.py "$JOB" --wait 900 --min-accuracy 0.9 >"$LOG_DIR/$JOB.report" 2>&1
REPORT_RC=$?
set -e
pasture job show "$JOB" || true
cat "$LOG_DIR/$JOB.report"
TOTAL=$(($(date +%s) - T0))
if [ "$REPORT_RC" -ne 0 ]; then
  echo "logs of every task: pasture job logs $JOB --role ROLE --index I" >&2
  fail "job $JOB did not succeed with test accuracy >= 0.9"
fi
printf '\n==> demo done in %d s (%dm%02ds). The cluster stays up: pasture job list / node list;\n' \
  "$TOTAL" $((TOTAL / 60)) $((TOTAL % 60))
echo "    run 'make demo' again for another job, 'make demo-down' to remove the cluster."
