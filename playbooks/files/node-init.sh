#!/bin/sh
# Entrypoint of local-cluster node containers that run task containers (nested podman).
# TESTBED.md "Tasks as containers inside node containers": the node runs with
# --cgroupns=private --systemd=false, so podman mounts its cgroup controllers read-only;
# remount each one read-write so that the node's systemd and the nested podman can create
# cgroups (CPU/memory limits of tasks are enforced only then), then hand PID 1 to systemd.
set -u
for d in /sys/fs/cgroup/*; do
  mount -o remount,bind,rw "$d" 2>/dev/null || echo "node-init: cannot remount $d rw" >&2
done
exec /sbin/init
