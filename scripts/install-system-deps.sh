#!/usr/bin/env bash
# Install the Debian packages that `make test` and `make demo` need on the controller, and the
# podman engine settings this machine needs. Idempotent; skips apt when everything is present.
set -euo pipefail
PKGS=(
  # local cluster hosts: rootful podman with systemd (TESTBED.md)
  podman runc crun debootstrap uidmap slirp4netns fuse-overlayfs netavark aardvark-dns
  containernetworking-plugins iptables catatonit
  # process-mode dev cluster and service integration tests use a real redis-server
  redis-server redis-tools
  # share tests speak real SMB
  smbclient
  # `vagrant validate` of the Vagrantfile
  vagrant
  # dashboard browser tests (Playwright drives Debian's Chromium)
  chromium
  # ssh client for Ansible over SSH and the on-prem facts tests
  openssh-client openssh-server sshpass
  rsync git make
  # promtool (check and unit-test the alerting rules: tests/roles/test_prometheus_rules.py)
  prometheus
)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "==> apt-get install ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
else
  echo "==> system packages present"
fi
# The redis-server package starts a system instance; our tests start their own on free ports.
if command -v systemctl >/dev/null && systemctl is-active -q redis-server 2>/dev/null; then
  systemctl disable --now redis-server >/dev/null 2>&1 || true
fi
mkdir -p /etc/containers
if ! cmp -s "$(dirname "$0")/containers.conf" /etc/containers/containers.conf; then
  echo "==> writing /etc/containers/containers.conf (runc, ulimits, 10.77.0.0/16)"
  cp "$(dirname "$0")/containers.conf" /etc/containers/containers.conf
fi
