#!/usr/bin/env bash
# Ansible checks of `make test`: the pinned collections, yamllint, ansible-lint at the
# repository root, `vagrant validate`, then
# `molecule test` of every roles/*/molecule/default (podman driver, one /24 per scenario,
# MOLECULE_JOBS scenarios at a time, default 2).
# Builds the base image first when it is missing. Fails on the first failing stage after
# running every scenario, and prints the time each role took.
#   bash scripts/test-ansible.sh              # everything
#   bash scripts/test-ansible.sh redis common # only these roles' scenarios (lint still runs)
set -uo pipefail
cd "$(dirname "$0")/.."
export PATH="$PWD/.venv/bin:$PATH"
export ANSIBLE_CONFIG="$PWD/ansible.cfg"
export ANSIBLE_ROLES_PATH="$PWD/roles"
export ANSIBLE_FORCE_COLOR=0 PY_COLORS=0
# Each task's time in every scenario's log (.state/molecule/<role>.log) and the slowest
# tasks at the end of each playbook: where a scenario spends its time.
export ANSIBLE_CALLBACKS_ENABLED=ansible.posix.profile_tasks

failed=()
step() { echo "==> $*"; }

step "collections (collections/requirements.yml; a no-op when the venv ships the pins)"
ansible-galaxy collection install -r collections/requirements.yml || failed+=("collections")

step "yamllint (Ansible files)"
yamllint --strict site.yml playbooks roles molecule collections inventories/sample .config \
  .yamllint .ansible-lint || failed+=("yamllint")

step "ansible-lint (repository root; .ansible-lint lists what is not Ansible content)"
ansible-lint --offline || failed+=("ansible-lint")

step "vagrant validate --ignore-provider"
if command -v vagrant >/dev/null; then
  VAGRANT_CHECKPOINT_DISABLE=1 vagrant validate --ignore-provider || failed+=("vagrant validate")
else
  echo "vagrant is not installed (scripts/install-system-deps.sh installs it)"; failed+=("vagrant missing")
fi

step "base image"
bash scripts/build-base-image.sh || failed+=("base image")

roles=("$@")
if ((${#roles[@]} == 0)); then
  for d in roles/*/molecule/default; do [[ -d $d ]] && roles+=("$(basename "$(dirname "$(dirname "$d")")")"); done
fi
# Scenarios run MOLECULE_JOBS at a time (default 2: each spends much of its time waiting on
# its containers' systemd and package steps, so two overlap well on a 2-core machine). Each
# scenario's output goes to .state/molecule/<role>.log and is printed whole when it ends,
# so logs never interleave.
jobs_max=${MOLECULE_JOBS:-2}
logdir=.state/molecule
mkdir -p "$logdir"
declare -A took=() status=() pid_role=() started=()
run_scenario() {  # role -> exit status of `molecule test`, output in $logdir/<role>.log
  (cd "roles/$1" && molecule test --scenario-name default) >"$logdir/$1.log" 2>&1
}
reap() {  # wait for one scenario to end, then print its log and record its result
  local pid rc role
  wait -n -p pid; rc=$?
  role=${pid_role[$pid]}; unset "pid_role[$pid]"
  took[$role]=$((SECONDS - ${started[$role]}))
  step "molecule test ($role): $( ((rc == 0)) && echo passed || echo FAILED) in ${took[$role]}s"
  cat "$logdir/$role.log"
  if ((rc == 0)); then status[$role]=passed; else status[$role]=FAILED; failed+=("molecule $role"); fi
}
for role in "${roles[@]}"; do
  [[ -d roles/$role/molecule/default ]] || { echo "no scenario roles/$role/molecule/default"; failed+=("$role (no scenario)"); continue; }
  while ((${#pid_role[@]} >= jobs_max)); do reap; done
  echo "==> molecule test ($role) started (log: $logdir/$role.log)"
  started[$role]=$SECONDS
  run_scenario "$role" &
  pid_role[$!]=$role
done
while ((${#pid_role[@]})); do reap; done
for role in "${roles[@]}"; do  # a scenario that never reported is a failure, not a pass
  [[ -n ${status[$role]:-} || ! -d roles/$role/molecule/default ]] || failed+=("molecule $role (no result)")
done

echo
echo "==> molecule timings"
for role in "${roles[@]}"; do
  [[ -n ${took[$role]:-} ]] && printf '  %-20s %4ss  %s\n' "$role" "${took[$role]}" "${status[$role]}"
done
if ((${#failed[@]})); then
  echo "==> test-ansible: FAILED: ${failed[*]}"; exit 1
fi
echo "==> test-ansible: all passed"
