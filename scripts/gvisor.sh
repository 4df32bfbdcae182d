#!/usr/bin/env bash
# Builds gVisor's runsc from the Go module proxy and installs it where the
# engine that scripts/dockerd.sh starts looks for it (DESIGN.md §6, §8).
#
#   scripts/gvisor.sh          build (unless cached) and install; prints the path
#   scripts/gvisor.sh path     print the installed path, build nothing
#   scripts/gvisor.sh version  print the pinned version
#
# runsc is built as a tool, not linked: `go install pkg@version` builds it
# in module mode outside this repository, so gVisor never enters our go.mod
# or go.sum, and the version is pinned here (RUNSC_VERSION) instead.
#
# It must be built statically (CGO_ENABLED=0): a cgo build links the
# dynamic loader, and the sandbox, which re-executes /proc/self/exe after
# pivoting into an empty root, then fails to boot with "fork/exec
# /proc/self/exe: no such file or directory".
#
# gVisor's Bazel build embeds precompiled seccomp-bpf programs; the Go
# module ships without them, and such a runsc builds and optimises its
# filter at every sandbox start (about 36 ms of each boot and restore
# here). The build therefore copies the module's source, runs
# scripts/gvisor/precompile.go in it (gVisor's own PrecompiledPrograms),
# and builds runsc from that copy.
#
# The binary is cached by version under $SANDGATE_GVISOR_DIR (default
# /var/lib/sandgate/gvisor/runsc-<version>-seccomp), so a second run costs nothing
# and changing the pin builds the new one beside the old. The stable path
# $SANDGATE_RUNSC (default /usr/local/bin/runsc) is a symlink to the cached
# binary: that is the path registered with the engine (daemon.json
# "runtimes"), so a new pin needs no engine configuration change.
set -euo pipefail

# The newest pseudo-version of gvisor.dev/gvisor on the Go module proxy
# when this was pinned (the "go" branch, which is the one that builds with
# the go command). Bump it deliberately: runsc is a security boundary.
RUNSC_VERSION=${RUNSC_VERSION:-v0.0.0-20260905035102-160fafc42237}
PKG=gvisor.dev/gvisor/runsc
CACHE=${SANDGATE_GVISOR_DIR:-/var/lib/sandgate/gvisor}
LINK=${SANDGATE_RUNSC:-/usr/local/bin/runsc}
GO=${GO:-go}

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

# The suffix names the build recipe: a runsc cached by an earlier recipe
# is not reused.
bin="$CACHE/runsc-$RUNSC_VERSION-seccomp"

# static reports whether the Go binary $1 was built without cgo, from the
# build settings the go command embeds in it.
static() {
  "$GO" version -m "$1" | grep -q 'CGO_ENABLED=0'
}

build() {
  local start src
  mkdir -p "$CACHE"
  tmp=$(mktemp -d "$CACHE/.build.XXXXXX")
  trap 'rm -rf "$tmp"' EXIT
  echo "gvisor: building $PKG@$RUNSC_VERSION (CGO_ENABLED=0, precompiled seccomp)"
  start=$(date +%s)
  # GOFLAGS is reset: -mod=... or -modfile=... meant for this repository
  # must not leak into the tool's own module. The download runs outside
  # this repository, so our go.mod is not consulted.
  src=$(cd "$tmp" && GOFLAGS= "$GO" mod download -json "gvisor.dev/gvisor@$RUNSC_VERSION" |
    sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
  [ -d "$src" ] || { echo "gvisor: module source not found" >&2; exit 1; }
  cp -r "$src" "$tmp/src"
  chmod -R u+w "$tmp/src"
  mkdir "$tmp/src/sgprecompile"
  cp "$HERE/gvisor/precompile.go" "$tmp/src/sgprecompile/main.go"
  (cd "$tmp/src" && CGO_ENABLED=0 GOFLAGS=-buildvcs=false "$GO" run ./sgprecompile/main.go)
  # -s -w: no symbol table or DWARF (100 MB down to 87); -X: `runsc
  # --version` names the pin instead of VERSION_MISSING. The version is
  # the pin's: the source is gVisor's, and checkpoints of a runsc built
  # before precompilation restore with this one.
  (cd "$tmp/src" && CGO_ENABLED=0 GOFLAGS=-buildvcs=false "$GO" build -trimpath -o "$tmp/runsc" \
    -ldflags "-s -w -X gvisor.dev/gvisor/runsc/version.version=$RUNSC_VERSION" ./runsc)
  static "$tmp/runsc" || { echo "gvisor: $tmp/runsc is not static" >&2; exit 1; }
  mv "$tmp/runsc" "$bin"
  echo "gvisor: built in $(($(date +%s) - start)) s: $bin"
}

install_link() {
  local cur
  cur=$(readlink "$LINK" 2>/dev/null || true)
  [ "$cur" = "$bin" ] && return 0
  if [ -e "$LINK" ] && [ ! -L "$LINK" ]; then
    echo "gvisor: $LINK exists and is not our symlink; leaving it (set SANDGATE_RUNSC)" >&2
    exit 1
  fi
  mkdir -p "$(dirname "$LINK")"
  ln -sfn "$bin" "$LINK"
}

case "${1:-install}" in
install)
  [ -x "$bin" ] || build
  install_link
  echo "gvisor: runsc $RUNSC_VERSION at $LINK"
  ;;
path) echo "$LINK" ;;
version) echo "$RUNSC_VERSION" ;;
*)
  echo "usage: $0 [install|path|version]" >&2
  exit 2
  ;;
esac
