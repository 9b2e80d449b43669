#!/usr/bin/env bash
# Build the example task image (examples/images/digits/Containerfile: the hosts' Debian base
# + numpy + scikit-learn + scheduler/examples) on the controller with podman. The local
# cluster's nodes see the controller's image store read-only, so agents run it with
# --pull=never and nothing is copied. Idempotent: skips the build when an image built from
# the same sources exists (a content hash kept in the label pasture.examples.hash).
#   bash scripts/build-task-image.sh [IMAGE]
set -euo pipefail
cd "$(dirname "$0")/.."
IMAGE=${1:-localhost/pasture-examples:latest}
CONTAINERFILE=examples/images/digits/Containerfile
BASE=localhost/pasture-base:bookworm
HASH=$(cat "$CONTAINERFILE" scheduler/examples/*.py | sha256sum | cut -c1-16)
if podman image exists "$IMAGE" \
  && [ "$(podman image inspect --format '{{index .Labels "pasture.examples.hash"}}' "$IMAGE")" = "$HASH" ]; then
  echo "task image $IMAGE is up to date ($HASH)"
  exit 0
fi
podman image exists "$BASE" || bash scripts/build-base-image.sh "$BASE"
# A TLS-intercepting proxy that the controller trusts must be trusted by pip in the build
# too: hand the controller's CA bundle in as a build secret (mounted for one step only).
SECRET=()
for ca in "${SSL_CERT_FILE:-}" /etc/ssl/certs/ca-certificates.crt; do
  if [ -n "$ca" ] && [ -s "$ca" ]; then SECRET=(--secret "id=ca-bundle,src=$ca"); break; fi
done
echo "building task image $IMAGE ($HASH; numpy + scikit-learn from PyPI, about 1 min the first time)"
LOG=$(mktemp /var/tmp/pasture-task-image.XXXXXX.log)
if ! podman build --layers -t "$IMAGE" --label "pasture.examples.hash=$HASH" "${SECRET[@]}" \
  -f "$CONTAINERFILE" --ignorefile examples/images/digits/containerignore \
  scheduler/examples >"$LOG" 2>&1; then
  tail -25 "$LOG"
  echo "task image build failed; full log: $LOG" >&2
  exit 1
fi
rm -f "$LOG"
# Drop the previous build of this tag (now dangling) so repeated builds do not pile up.
podman image prune -f --filter "label=pasture.examples.hash" >/dev/null 2>&1 || true
echo "built $IMAGE"
