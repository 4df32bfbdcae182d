#!/usr/bin/env bash
# Builds sandgate/aio from sandgate/aio-base (this directory's recipe, built
# by scripts/images.sh) and the sandboxd binary of this checkout:
#
#   images/aio/layer.sh [BASE_IMAGE]     default sandgate/aio-base:latest
#
# scripts/images.sh runs it after building (or finding) the base image.
# The tag is sandgate/aio:<hash>, where <hash> covers the base image id, the
# binary and the Dockerfile; nothing is built when that tag exists. The
# binary is static (CGO_ENABLED=0) and reproducible (-trimpath), so an
# unchanged checkout never rebuilds. sandgate/aio:latest is then pointed at
# the tag: that is what executors/aio's PoolConfig.Image defaults to.
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
base=${1:-sandgate/aio-base:latest}
name=sandgate/aio
GO=${GO:-go}

docker image inspect "$base" >/dev/null 2>&1 || { echo "layer: $base missing (scripts/images.sh images/aio)" >&2; exit 1; }
work=$(mktemp -d /var/tmp/sandgate-aio-layer.XXXXXX)
trap 'rm -rf "$work"' EXIT
(cd "$here" && CGO_ENABLED=0 "$GO" build -trimpath -ldflags=-s -o "$work/sandboxd" ./cmd/sandboxd)
cp "$here/images/aio/Dockerfile" "$work/Dockerfile"
hash=$({ docker image inspect -f '{{.Id}}' "$base"; sha256sum <"$work/sandboxd"; sha256sum <"$work/Dockerfile"; } | sha256sum | cut -c1-12)
tag="$name:$hash"
if docker image inspect "$tag" >/dev/null 2>&1; then
  echo "images: $tag is up to date"
else
  began=$SECONDS
  DOCKER_BUILDKIT=0 docker build -q --build-arg BASE="$base" --label "sandgate.recipe=$hash" -t "$tag" "$work" >/dev/null
  echo "images: built $tag in $((SECONDS - began))s, $(docker image inspect -f '{{.Size}}' "$tag" | awk '{printf "%.0f MB", $1 / 1e6}')"
fi
docker tag "$tag" "$name:latest"
# Older layers: removed unless a container still uses them.
docker image ls --format '{{.Repository}}:{{.Tag}}' "$name" | grep -v -e ":latest$" -e ":$hash$" |
  xargs -r docker image rm >/dev/null 2>&1 || true
