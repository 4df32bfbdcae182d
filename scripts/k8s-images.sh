#!/usr/bin/env bash
# Builds the two images the test cluster runs (issue 29) and imports them
# into its containerd (scripts/k8s.sh), which has no registry to pull from:
#
#   sandgate/k8s-pause:<hash>    the pod sandbox image: images/k8s-pause, static
#   sandgate/k8s-sandbox:<hash>  the sandbox pod: the runtime image
#                                (sandgate/runtime:latest, `make images`)
#                                plus this checkout's sandboxd
#
#   scripts/k8s-images.sh build     build with Docker (legacy builder, no
#                                   registry), print "PAUSE SANDBOX" refs
#   scripts/k8s-images.sh import    build, then import into the cluster's
#                                   containerd what it lacks
#
# <hash> covers the base image id, the binary and the Dockerfile, so an
# unchanged checkout builds and imports nothing. Each import is a
# `docker save | ctr -n k8s.io images import` (the sandbox image is about
# 700 MB: tens of seconds, once per hash).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
GO=${GO:-go}
BASE=${SANDGATE_K8S_BASE_IMAGE:-sandgate/runtime:latest}
SOCK=${SANDGATE_K8S_CONTAINERD_SOCK:-/run/sandgate-k8s/containerd.sock}

# layer NAME DOCKERFILE_TEXT BINARY_PKG BINARY_NAME [BASE]: builds
# NAME:<hash> unless it exists; prints the ref.
layer() {
  local name=$1 dockerfile=$2 pkg=$3 bin=$4 base=${5:-} work hash tag
  work=$(mktemp -d /var/tmp/sandgate-k8s-image.XXXXXX)
  (cd "$here" && CGO_ENABLED=0 GOFLAGS="-trimpath -buildvcs=false" "$GO" build -ldflags=-s -o "$work/$bin" "$pkg")
  printf '%s\n' "$dockerfile" >"$work/Dockerfile"
  hash=$({ [ -z "$base" ] || docker image inspect -f '{{.Id}}' "$base"; sha256sum <"$work/$bin"; sha256sum <"$work/Dockerfile"; } |
    sha256sum | cut -c1-12)
  tag="$name:$hash"
  if ! docker image inspect "$tag" >/dev/null 2>&1; then
    # The legacy builder's deprecation notice is noise; a failure's
    # message is shown.
    DOCKER_BUILDKIT=0 docker build -q ${base:+--build-arg BASE="$base"} --label "sandgate.recipe=$hash" -t "$tag" "$work" \
      >/dev/null 2>"$work/err" || { cat "$work/err" >&2; rm -rf "$work"; exit 1; }
    echo "k8s-images: built $tag" >&2
  fi
  rm -rf "$work"
  # Older builds: removed unless a container still uses them.
  docker image ls --format '{{.Repository}}:{{.Tag}}' "$name" | grep -vx "$tag" |
    xargs -r docker image rm >/dev/null 2>&1 || true
  echo "$tag"
}

build() {
  docker image inspect "$BASE" >/dev/null 2>&1 || { echo "k8s-images: $BASE missing (make images)" >&2; exit 1; }
  local pause sandbox
  pause=$(layer sandgate/k8s-pause 'FROM scratch
COPY k8s-pause /pause
USER 65535:65535
ENTRYPOINT ["/pause"]' ./images/k8s-pause k8s-pause)
  # The sandbox pod runs sandboxd as the session's uid; /workspace, /tmp
  # and the code directory are emptyDir volumes (the root is read-only).
  # A pooled pod runs as a uid of its own from the pool's range
  # (executors/k8s: poolUIDBase, poolUIDCount), which the image names
  # `sandbox` as it names the executors' default uids (images/runtime/
  # trim.sh), so that whoami and $SHELL answer alike in every pod.
  sandbox=$(layer sandgate/k8s-sandbox 'ARG BASE
FROM ${BASE}
RUN i=1000000000; while [ $i -lt 1000008192 ]; do echo "sandbox:x:$i:$i:sandbox:/workspace:/bin/bash" >&3; echo "sandbox:x:$i:" >&4; i=$((i+1)); done 3>>/etc/passwd 4>>/etc/group
COPY sandboxd /usr/local/bin/sandboxd
ENTRYPOINT ["/usr/local/bin/sandboxd"]
CMD ["standby"]' ./cmd/sandboxd sandboxd "$BASE")
  echo "$pause $sandbox"
}

ctr_() { "$("$here/scripts/k8s-build.sh" bindir)/ctr" -a "$SOCK" -n k8s.io "$@" 2> >(grep -v DEPRECATION >&2); }

import() {
  local refs ref
  refs=$(build)
  for ref in $refs; do
    if ctr_ images ls -q | grep -qx "docker.io/$ref"; then
      continue
    fi
    local began=$SECONDS
    docker save "$ref" | ctr_ images import - >/dev/null
    echo "k8s-images: imported $ref in $((SECONDS - began)) s" >&2
  done
  # Older imports: their space is the image store's, kept per machine.
  ctr_ images ls -q 2>/dev/null | grep '^docker.io/sandgate/k8s-' | grep -vxF -e "docker.io/${refs%% *}" -e "docker.io/${refs#* }" |
    xargs -r "$("$here/scripts/k8s-build.sh" bindir)/ctr" -a "$SOCK" -n k8s.io images rm >/dev/null 2>&1 || true
  echo "$refs"
}

case "${1:-build}" in
build) build ;;
import) import ;;
*)
  echo "usage: $0 [build|import]" >&2
  exit 2
  ;;
esac
