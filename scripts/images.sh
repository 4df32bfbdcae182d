#!/usr/bin/env bash
# Builds the local runtime images (DESIGN.md §8). There is no registry to pull
# from: each image is a `debootstrap --variant=minbase` root filesystem plus
# the packages its recipe lists, then `docker import`.
#
#   scripts/images.sh [RECIPE_DIR...]    default: every images/*/image.conf
#
# A recipe is a directory under images/ with image.conf (NAME, SUITE,
# CHANGES), packages (one Debian package a line) and optionally trim.sh
# (run with the root filesystem as $1 before import) and layer.sh (run after
# the image is built or found up to date, to add what is built from this
# checkout on top: images/aio adds sandboxd). The image is tagged
# NAME:<hash>, where <hash> covers every file of the recipe and this
# script; when that tag exists already nothing is built. NAME:latest is
# then pointed at it: that is what the executors' defaults name.
#
# The Debian mirror is read from this machine's apt sources at build time
# (sources.list and sources.list.d, one-line or deb822 format) and never
# written into the repository.
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"

die() { echo "images: $*" >&2; exit 1; }

# mirror SUITE prints the URI of the first enabled `deb` source for SUITE.
mirror() {
  local suite=$1 f
  local files=()
  [ -f /etc/apt/sources.list ] && files+=(/etc/apt/sources.list)
  for f in /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources; do
    [ -f "$f" ] && files+=("$f")
  done
  for f in "${files[@]}"; do
    case "$f" in
    *.sources) awk -v suite="$suite" '
        function flush() {
          if (types ~ /(^| )deb( |$)/ && enabled != "no" && (" " suites " ") ~ (" " suite " ")) {
            split(uris, u, " "); print u[1]; found = 1; exit
          }
          types = uris = suites = enabled = ""
        }
        /^[ \t]*#/ { next }
        /^[ \t]*$/ { flush(); next }
        { key = tolower($1); sub(/:$/, "", key); $1 = ""; sub(/^ +/, "")
          if (key == "types") types = $0
          else if (key == "uris") uris = $0
          else if (key == "suites") suites = $0
          else if (key == "enabled") enabled = tolower($0) }
        END { if (!found) flush() }' "$f" ;;
    *) awk -v suite="$suite" '
        $1 == "deb" { i = 2; if ($2 ~ /^\[/) { while (i <= NF && $i !~ /\]$/) i++; i++ }
          if ($(i + 1) == suite) { print $i; exit } }' "$f" ;;
    esac
  done | head -n 1
}

# install_packages ROOTFS PKGS installs the comma-separated PKGS with apt in
# the chroot. debootstrap left the mirror in the chroot's sources.list; the
# recipe's trim.sh removes it before the image is made. No service starts.
install_packages() {
  local root=$1 pkgs=$2
  [ -n "$pkgs" ] || return 0
  printf '#!/bin/sh\nexit 101\n' >"$root/usr/sbin/policy-rc.d"
  chmod +x "$root/usr/sbin/policy-rc.d"
  mount -t proc proc "$root/proc"
  local rc=0
  chroot "$root" apt-get update -qq || rc=$?
  [ $rc -ne 0 ] || DEBIAN_FRONTEND=noninteractive chroot "$root" \
    apt-get install -y -qq --no-install-recommends ${pkgs//,/ } || rc=$?
  [ $rc -ne 0 ] || chroot "$root" apt-get clean || rc=$?
  umount "$root/proc"
  rm -f "$root/usr/sbin/policy-rc.d"
  return $rc
}

# cleanup WORK removes a build directory, never crossing into a mount a
# failed build left behind.
cleanup() {
  local work=$1
  umount "$work/rootfs/proc" 2>/dev/null || true
  rm -rf --one-file-system "$work"
}

recipe_hash() {
  local dir=$1
  # Names and contents of every recipe file, then this script.
  (cd "$dir" && find . -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum
    sha256sum <"$here/scripts/images.sh") | sha256sum | cut -c1-12
}

build() {
  local dir=${1%/} NAME= SUITE= CHANGES=
  [ -f "$dir/image.conf" ] || die "$dir: no image.conf"
  # shellcheck disable=SC1091
  . "$dir/image.conf"
  [ -n "$NAME" ] && [ -n "$SUITE" ] || die "$dir/image.conf: NAME and SUITE are required"
  local hash tag
  hash=$(recipe_hash "$dir")
  tag="$NAME:$hash"
  if docker image inspect "$tag" >/dev/null 2>&1; then
    echo "images: $tag is up to date"
    docker tag "$tag" "$NAME:latest"
    return 0
  fi
  [ "$(id -u)" -eq 0 ] || die "building $tag needs root (debootstrap)"
  command -v debootstrap >/dev/null || die "debootstrap is not installed (make deps)"
  local url
  url=$(mirror "$SUITE")
  [ -n "$url" ] || die "no enabled deb source for $SUITE in the apt sources"
  local pkgs
  pkgs=$(grep -v '^[[:space:]]*#' "$dir/packages" | xargs | tr ' ' ,)
  local work
  work=$(mktemp -d /var/tmp/sandgate-image.XXXXXX)
  WORKDIRS+=("$work")
  local began=$SECONDS
  echo "images: building $tag ($SUITE minbase + ${pkgs//,/ })"
  # The base system first; the packages then through apt in the chroot:
  # debootstrap's own --include resolver cannot order the configuration of
  # larger dependency trees (a browser's, say).
  if ! debootstrap --variant=minbase "$SUITE" "$work/rootfs" "$url" >"$work/build.log" 2>&1 ||
    ! install_packages "$work/rootfs" "$pkgs" >>"$work/build.log" 2>&1; then
    tail -n 30 "$work/build.log" >&2
    die "build failed for $tag"
  fi
  [ -x "$dir/trim.sh" ] && "$dir/trim.sh" "$work/rootfs"
  local args=(--message "sandgate recipe $dir $hash")
  while IFS= read -r line; do
    [ -n "$line" ] && args+=(--change "$line")
  done <<<"$CHANGES"
  args+=(--change "LABEL sandgate.recipe=$hash")
  tar -C "$work/rootfs" --numeric-owner -cf - . | docker import "${args[@]}" - "$tag" >/dev/null
  docker tag "$tag" "$NAME:latest"
  echo "images: built $tag in $((SECONDS - began))s, $(docker image inspect -f '{{.Size}}' "$tag" | awk '{printf "%.0f MB", $1 / 1e6}')"
  # Older builds of this recipe: removed unless a container still uses them.
  docker image ls --format '{{.Repository}}:{{.Tag}}' "$NAME" | grep -v -e ":latest$" -e ":$hash$" |
    xargs -r docker image rm >/dev/null 2>&1 || true
}

WORKDIRS=()
trap 'for w in "${WORKDIRS[@]}"; do cleanup "$w"; done' EXIT

docker version >/dev/null 2>&1 || die "no Docker engine answers (scripts/dockerd.sh start)"
if [ $# -eq 0 ]; then
  set -- images/*/
fi
for d in "$@"; do
  build "$d"
  if [ -x "${d%/}/layer.sh" ]; then
    "${d%/}/layer.sh"
  fi
done
