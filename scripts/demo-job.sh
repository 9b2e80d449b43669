#!/usr/bin/env bash
# The job half of `make demo` (scripts/demo.sh runs it once the cluster is converged): log in
# to the cluster's API, submit the example training job under a fresh name, follow ps-0's
# log, and judge the result with scripts/demo_report.py. Exit 0 only when the job succeeded
# with test accuracy >= 0.9; 1 (with the reason) otherwise. The end-to-end test
# (tests/e2e/test_local_cluster.py) runs this same script on its own cluster, so CI fails
# whenever the demo would.
#   bash scripts/demo-job.sh            # on the cluster of inventories/$PASTURE_DEMO_CLUSTER
# Environment: PASTURE_DEMO_CLUSTER (default local: inventories/local/, written by
# playbooks/local-cluster.yml); PASTURE_DEMO_JOB (spec, default
# examples/jobs/digits-ps-worker.yaml); PASTURE_DEMO_JOB_NAME (the job's name, default
# digits-<MMDD-HHMMSS>: names are unique in a cluster); PASTURE_DEMO_WAIT (seconds the report
# waits for the job to end, default 900); PASTURE_CONFIG_HOME (where `pasture login`
# keeps the login, as for every CLI command).
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
export PATH="$REPO/.venv/bin:$PATH"
PY="$REPO/.venv/bin/python"
CLUSTER=${PASTURE_DEMO_CLUSTER:-local}
INVENTORY_DIR="$REPO/inventories/$CLUSTER"
JOB_SPEC=${PASTURE_DEMO_JOB:-examples/jobs/digits-ps-worker.yaml}
WAIT_S=${PASTURE_DEMO_WAIT:-900}
T0=${PASTURE_DEMO_T0:-$(date +%s)}
LOG_DIR="$REPO/.state/demo"; mkdir -p "$LOG_DIR"

step() { printf '\n==> %s  [%ss]\n' "$*" "$(($(date +%s) - T0))"; }
fail() { printf '\ndemo FAILED: %s (after %ss)\n' "$*" "$(($(date +%s) - T0))" >&2; exit 1; }

[ -s "$INVENTORY_DIR/hosts.yml" ] || fail "no cluster inventory $INVENTORY_DIR/hosts.yml: run 'make demo'"

step "pasture login (API over TLS, admin token and CA fetched by the playbook)"
ENDPOINT=$("$PY" -c 'import sys, yaml; print(yaml.safe_load(open(sys.argv[1]))["all"]["vars"]["pasture_api_endpoint"])' "$INVENTORY_DIR/hosts.yml")
[ -s "$INVENTORY_DIR/admin.token" ] || fail "no admin token in $INVENTORY_DIR/admin.token"
[ -s "$INVENTORY_DIR/ca.crt" ] || fail "no API CA certificate in $INVENTORY_DIR/ca.crt"
PASTURE_TOKEN="$(cat "$INVENTORY_DIR/admin.token")" \
  pasture login "$ENDPOINT" --ca-cert "$INVENTORY_DIR/ca.crt"
pasture node list

# Job names are unique in a cluster: every demo run submits a copy with a fresh name.
JOB=${PASTURE_DEMO_JOB_NAME:-digits-$(date +%m%d-%H%M%S)}
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
"$PY" scripts/demo_report.py "$JOB" --wait "$WAIT_S" --min-accuracy 0.9 >"$LOG_DIR/$JOB.report" 2>&1
REPORT_RC=$?
set -e
pasture job show "$JOB" || true
cat "$LOG_DIR/$JOB.report"
TOTAL=$(($(date +%s) - T0))
if [ "$REPORT_RC" -ne 0 ]; then
  echo "logs of every task: pasture job logs $JOB --role ROLE --index I" >&2
  fail "job $JOB did not succeed with test accuracy >= 0.9 (scripts/demo_report.py exited $REPORT_RC)"
fi
printf '\n==> demo done in %d s (%dm%02ds). The cluster stays up: pasture job list / node list;\n' \
  "$TOTAL" $((TOTAL / 60)) $((TOTAL % 60))
echo "    run 'make demo' again for another job, 'make demo-down' to remove the cluster."
