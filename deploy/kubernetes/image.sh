#!/usr/bin/env bash
# Builds the gateway's image for deploy/kubernetes/ (issue 29): the
# static gateway of this checkout and a policy folder (the default one,
# its modes' rows routed to the Kubernetes tier, no isolation upgrade),
# on an empty base, as uid 65532. No registry is involved.
#
#   deploy/kubernetes/image.sh build    docker build; print the ref
#   deploy/kubernetes/image.sh import   build, then import into the test
#                                       cluster's containerd (scripts/k8s.sh)
#
# The tag is a hash of the binary, the policy and the Dockerfile: an
# unchanged checkout builds and imports nothing.
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
GO=${GO:-go}
SOCK=${SANDGATE_K8S_CONTAINERD_SOCK:-/run/sandgate-k8s/containerd.sock}

build() {
  local work hash tag
  work=$(mktemp -d /var/tmp/sandgate-gateway-image.XXXXXX)
  trap 'rm -rf "$work"' RETURN
  (cd "$here" && CGO_ENABLED=0 GOFLAGS="-trimpath -buildvcs=false" "$GO" build -ldflags=-s -o "$work/gateway" ./cmd/gateway)
  cp -r "$here/policy/rego" "$work/policy"
  python3 - "$work/policy/sandgate/config/data.json" <<'PY'
import json, sys
p = sys.argv[1]
cfg = json.load(open(p))
for levels in cfg["modes"].values():
    for row in levels.values():
        row["executor"] = "kubernetes"
cfg["isolation_upgrade"]["modes"] = []
json.dump(cfg, open(p, "w"), indent=2)
PY
  cat >"$work/Dockerfile" <<'DF'
FROM scratch
COPY gateway /usr/local/bin/sandgate-gateway
COPY policy /etc/sandgate/policy
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/sandgate-gateway"]
DF
  hash=$(cd "$work" && find gateway policy Dockerfile -type f -print0 | sort -z | xargs -0 sha256sum | sha256sum | cut -c1-12)
  tag=sandgate/gateway:$hash
  if ! docker image inspect "$tag" >/dev/null 2>&1; then
    DOCKER_BUILDKIT=0 docker build -q -t "$tag" "$work" >/dev/null 2>"$work/err" || { cat "$work/err" >&2; exit 1; }
    echo "gateway-image: built $tag" >&2
  fi
  echo "$tag"
}

import() {
  local ref ctr
  ref=$(build)
  ctr="$("$here/scripts/k8s-build.sh" bindir)/ctr"
  if ! "$ctr" -a "$SOCK" -n k8s.io images ls -q 2>/dev/null | grep -qx "docker.io/$ref"; then
    docker save "$ref" | "$ctr" -a "$SOCK" -n k8s.io images import - >/dev/null 2> >(grep -v DEPRECATION >&2)
    echo "gateway-image: imported $ref" >&2
  fi
  echo "$ref"
}

case "${1:-build}" in
build) build ;;
import) import ;;
*)
  echo "usage: $0 [build|import]" >&2
  exit 2
  ;;
esac
