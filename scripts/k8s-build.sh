#!/usr/bin/env bash
# Builds the single-node Kubernetes cluster that the Kubernetes executor
# tier's tests run on (issue 29), from the Go module proxy, with pinned
# versions, and caches the binaries per machine outside the repository
# (as scripts/gvisor.sh does runsc), so a second run builds nothing.
#
#   scripts/k8s-build.sh          build what is missing; prints the bin dir
#   scripts/k8s-build.sh bindir   print the bin dir, build nothing
#   scripts/k8s-build.sh check    exit 0 when every binary is cached
#
# What it builds (each step `nice -n 19`, one at a time: the machine has
# two cores and the apiserver link alone peaks near 3 GB):
#   - kube-apiserver, kubelet, kube-scheduler, kube-controller-manager and
#     kubectl v$K8S_VERSION (k8s.io/kubernetes), in a throwaway module: the
#     kubernetes module names its staging modules as v0.0.0 with `replace`
#     directives, which `go install pkg@version` refuses, so the same
#     replaces are written into a scratch go.mod pointing at the published
#     v0.x.y staging modules;
#   - containerd, ctr and containerd-shim-runc-v2 $CONTAINERD_VERSION
#     (`go install`, static);
#   - kine $KINE_VERSION (etcd's API on SQLite; cgo, for SQLite).
# None of them enters this repository's go.mod: they are tools.
#
# Debian packages (apt): runc (containerd's OCI runtime) and
# containernetworking-plugins (the bridge/host-local/loopback CNI plugins
# for the pod network).
#
# Cold, on two contended cores, this takes 12-25 minutes
# (shared/research/k8s-node.md §2); cached, under a second.
set -euo pipefail

K8S_VERSION=${K8S_VERSION:-v1.37.2}
CONTAINERD_VERSION=${CONTAINERD_VERSION:-v2.4.2}
KINE_VERSION=${KINE_VERSION:-v0.17.5}
ROOT=${SANDGATE_K8S_CACHE:-/var/lib/sandgate/k8s}
GO=${GO:-go}

# One bin dir per pin set: a new pin builds beside the old one.
BIN="$ROOT/k8s-$K8S_VERSION-containerd-$CONTAINERD_VERSION-kine-$KINE_VERSION/bin"
KUBE_CMDS=(kube-apiserver kubelet kube-scheduler kube-controller-manager kubectl)
CTRD_CMDS=(containerd ctr containerd-shim-runc-v2)
ALL=("${KUBE_CMDS[@]}" "${CTRD_CMDS[@]}" kine)

have() {
  local c
  for c in "$@"; do [ -x "$BIN/$c" ] || return 1; done
}

# gobuild runs the go command niced, with this repository's GOFLAGS
# (-mod=..., -modfile=...) kept out of the tools' own modules.
gobuild() {
  GOFLAGS=-buildvcs=false nice -n 19 "$GO" "$@"
}

apt_deps() {
  local missing=()
  command -v runc >/dev/null || missing+=(runc)
  command -v jq >/dev/null || missing+=(jq)
  command -v openssl >/dev/null || missing+=(openssl)
  [ -x /usr/lib/cni/bridge ] || missing+=(containernetworking-plugins)
  [ ${#missing[@]} -eq 0 ] && return 0
  echo "k8s-build: apt-get install ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y --no-install-recommends "${missing[@]}" >/dev/null ||
    { apt-get update >/dev/null && apt-get install -y --no-install-recommends "${missing[@]}" >/dev/null; }
}

# scratch_module writes a module that requires k8s.io/kubernetes at the pin,
# with the kubernetes go.mod's staging replaces rewritten to the published
# staging version (v1.X.Y -> v0.X.Y).
scratch_module() {
  local dir=$1 staging gomod pkgs=() c
  staging="v0.${K8S_VERSION#v1.}"
  gomod=$(GOFLAGS= "$GO" mod download -json "k8s.io/kubernetes@$K8S_VERSION" |
    sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",\{0,1\}$/\1/p')
  [ -f "$gomod" ] || { echo "k8s-build: no go.mod for k8s.io/kubernetes@$K8S_VERSION" >&2; return 1; }
  {
    echo "module sandgate.local/k8sbuild"
    echo
    grep -m1 '^go [0-9.]*$' "$gomod"
    echo
    echo "replace ("
    # Lines like "	k8s.io/api => ./staging/src/k8s.io/api".
    sed -n 's#^[[:space:]]*\(k8s\.io/[^ ]*\) => \./staging/src/.*$#\t\1 => \1 '"$staging"'#p' "$gomod"
    echo ")"
  } >"$dir/go.mod"
  for c in "${KUBE_CMDS[@]}"; do pkgs+=("k8s.io/kubernetes/cmd/$c@$K8S_VERSION"); done
  (cd "$dir" && gobuild get "${pkgs[@]}")
}

build_kube() {
  local tmp=$1 start ver ld c
  have "${KUBE_CMDS[@]}" && return 0
  mkdir -p "$tmp/kmod"
  start=$(date +%s)
  echo "k8s-build: kubernetes $K8S_VERSION (${KUBE_CMDS[*]})"
  scratch_module "$tmp/kmod"
  ver=${K8S_VERSION#v}
  ld="-s -w"
  for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ld="$ld -X $p.gitVersion=$K8S_VERSION -X $p.gitMajor=${ver%%.*}"
    ld="$ld -X $p.gitMinor=$(echo "$ver" | cut -d. -f2) -X $p.gitTreeState=clean"
  done
  for c in "${KUBE_CMDS[@]}"; do
    [ -x "$BIN/$c" ] && continue
    echo "k8s-build:   $c"
    (cd "$tmp/kmod" && CGO_ENABLED=0 gobuild build -trimpath \
      -ldflags "$ld" -o "$tmp/$c" "k8s.io/kubernetes/cmd/$c")
    mv "$tmp/$c" "$BIN/$c"
  done
  echo "k8s-build: kubernetes built in $(($(date +%s) - start)) s"
}

build_containerd() {
  local tmp=$1 start c
  have "${CTRD_CMDS[@]}" && return 0
  start=$(date +%s)
  echo "k8s-build: containerd $CONTAINERD_VERSION"
  mkdir -p "$tmp/ctrd"
  for c in "${CTRD_CMDS[@]}"; do
    [ -x "$BIN/$c" ] && continue
    CGO_ENABLED=0 GOBIN="$tmp/ctrd" gobuild install -trimpath \
      -ldflags "-s -w -X github.com/containerd/containerd/v2/version.Version=$CONTAINERD_VERSION" \
      "github.com/containerd/containerd/v2/cmd/$c@$CONTAINERD_VERSION"
    mv "$tmp/ctrd/$c" "$BIN/$c"
  done
  echo "k8s-build: containerd built in $(($(date +%s) - start)) s"
}

build_kine() {
  local tmp=$1 start
  have kine && return 0
  start=$(date +%s)
  echo "k8s-build: kine $KINE_VERSION (cgo, SQLite)"
  mkdir -p "$tmp/kine"
  CGO_ENABLED=1 GOBIN="$tmp/kine" gobuild install -trimpath -ldflags "-s -w" \
    "github.com/k3s-io/kine@$KINE_VERSION"
  mv "$tmp/kine/kine" "$BIN/kine"
  echo "k8s-build: kine built in $(($(date +%s) - start)) s"
}

case "${1:-build}" in
build)
  apt_deps
  if ! have "${ALL[@]}"; then
    mkdir -p "$BIN"
    tmp=$(mktemp -d "$ROOT/.build.XXXXXX")
    trap 'rm -rf "$tmp"' EXIT
    start=$(date +%s)
    build_containerd "$tmp"
    build_kine "$tmp"
    build_kube "$tmp"
    echo "k8s-build: all built in $(($(date +%s) - start)) s"
  fi
  echo "$BIN"
  ;;
bindir) echo "$BIN" ;;
check) have "${ALL[@]}" ;;
*)
  echo "usage: $0 [build|bindir|check]" >&2
  exit 2
  ;;
esac
