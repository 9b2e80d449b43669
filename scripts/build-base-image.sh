#!/usr/bin/env bash
# Build the podman base image for local-cluster hosts from Debian's archive (no registry is
# reachable here). Idempotent: does nothing when the image exists. See TESTBED.md.
set -euo pipefail
IMAGE=${1:-localhost/pasture-base:bookworm}
if podman image exists "$IMAGE"; then echo "base image $IMAGE present"; exit 0; fi
# The first non-security mirror apt uses (deb822 `URIs:` or one-line `deb URL` form).
MIRROR=$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.sources /etc/apt/sources.list.d/*.list 2>/dev/null \
  | awk '/^URIs:/ {print $2} /^deb / {print ($2 ~ /^\[/ ? $3 : $2)}' | grep -v security | sed -n 1p || true)
MIRROR=${MIRROR:-http://deb.debian.org/debian}
ROOTFS=$(mktemp -d /var/tmp/pasture-rootfs.XXXXXX)
trap 'rm -rf "$ROOTFS"' EXIT
echo "building $IMAGE with debootstrap from $MIRROR (about 90 s)"
debootstrap --variant=minbase \
  --include=systemd,systemd-sysv,dbus,openssh-server,python3,python3-apt,sudo,iproute2,procps,ca-certificates \
  bookworm "$ROOTFS" "$MIRROR" >/var/tmp/pasture-debootstrap.log 2>&1 \
  || { tail -20 /var/tmp/pasture-debootstrap.log; exit 1; }
cp /etc/apt/sources.list.d/debian.sources "$ROOTFS/etc/apt/sources.list.d/" 2>/dev/null || true
tar -C "$ROOTFS" -c . | podman import --change 'CMD ["/sbin/init"]' - "$IMAGE" >/dev/null
echo "built $IMAGE"
