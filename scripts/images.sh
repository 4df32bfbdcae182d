#!/usr/bin/env bash
# Builds the local runtime images (DESIGN.md §8). There is no registry to pull
# from: each image is a `debootstrap --variant=minbase` root filesystem (or
# another recipe's image, see BASE) plus the packages its recipe lists, then
# `docker import`.
#
#   scripts/images.sh [RECIPE_DIR...]    default: every images/*/image.conf
#
# A recipe is a directory under images/ with image.conf, packages (one
# Debian package a line, `# why` comments allowed anywhere) and optionally
# stubs (packages, same format, that apt must count as installed without
# installing them: dependencies Debian declares that a run never uses),
# trim.sh (run with the root filesystem as $1 as the last step before the
# import) and layer.sh (run after the image is built or found up to date, to
# add what is built from this checkout on top: images/aio adds sandboxd).
# image.conf sets:
#
#   NAME     the image name (required)
#   SUITE    the Debian suite (required unless BASE is set)
#   CHANGES  `docker import --change` instructions, one a line
#   BASE     another recipe's directory (images/runtime): this image starts
#            from that recipe's image instead of debootstrap, so both share
#            one root filesystem and toolchain. The base is built first, and
#            its hash is part of this recipe's hash.
#   EXPORT   a name: the image's root filesystem is also exported to
#            $SANDGATE_ROOTFS_DIR/<EXPORT>-<hash> (default directory
#            /var/lib/sandgate/rootfs), with the symlink <EXPORT> pointing at
#            the current export: the subprocess executor's root
#            (executors.subprocess.root_dir). Older exports are removed.
#
# The image is tagged NAME:<hash>, where <hash> covers every file of the
# recipe, this script and the base recipe's hash; when that tag exists
# already nothing is built (a missing export is still made). NAME:latest is
# then pointed at it: that is what the executors' defaults name. Each image
# carries the labels sandgate.recipe=<hash> and sandgate.rootfs=<EXPORT>-<hash>
# of the exported recipe it is (or is built on), the root filesystem's
# identity shared by every executor that runs on it.
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

ROOTFS_DIR=${SANDGATE_ROOTFS_DIR:-/var/lib/sandgate/rootfs}

# field RECIPE KEY prints KEY of RECIPE's image.conf.
field() {
  (NAME= SUITE= CHANGES= BASE= EXPORT= && . "$1/image.conf" && printf '%s\n' "${!2}")
}

# install_packages ROOTFS SUITE URL PKGS [STUBS] installs the
# space-separated PKGS with apt in the chroot, from SUITE's main component at
# URL, resolving through the build host's resolver (etc_files resets it
# afterwards, and the recipe's trim.sh removes the sources.list). No service
# starts. STUBS are installed first (stub_packages).
install_packages() {
  local root=$1 suite=$2 url=$3 pkgs=$4 stubs=${5:-}
  [ -n "$pkgs" ] || return 0
  echo "deb $url $suite main" >"$root/etc/apt/sources.list"
  # Never write through a symlink the root filesystem might carry.
  rm -f "$root/etc/resolv.conf"
  cp -L /etc/resolv.conf "$root/etc/resolv.conf"
  printf '#!/bin/sh\nexit 101\n' >"$root/usr/sbin/policy-rc.d"
  chmod +x "$root/usr/sbin/policy-rc.d"
  mount -t proc proc "$root/proc"
  local rc=0
  stub_packages "$root" "$stubs" || rc=$?
  [ $rc -ne 0 ] || chroot "$root" apt-get update -qq || rc=$?
  # shellcheck disable=SC2086 # one word a package
  [ $rc -ne 0 ] || DEBIAN_FRONTEND=noninteractive chroot "$root" \
    apt-get install -y -qq --no-install-recommends $pkgs || rc=$?
  [ $rc -ne 0 ] || chroot "$root" apt-get clean || rc=$?
  umount "$root/proc"
  rm -f "$root/usr/sbin/policy-rc.d"
  return $rc
}

# stub_packages ROOTFS STUBS installs, for each of the space-separated
# package names STUBS, an empty package of that name, held, so that apt
# counts a dependency Debian declares but a run never uses as met instead
# of installing it (python3-scipy's on the pythran compiler, say: its
# modules ship compiled). A package that later needs a real version of a
# stub makes apt fail, loudly, rather than bring it in.
stub_packages() {
  local root=$1 stubs=$2 name dir
  for name in $stubs; do
    dir="$root/tmp/stub-$name"
    mkdir -p "$dir/DEBIAN"
    cat >"$dir/DEBIAN/control" <<CONTROL
Package: $name
Version: 0~sandgate
Architecture: all
Maintainer: sandgate <root@localhost>
Description: empty stand-in for $name (scripts/images.sh)
 A dependency Debian declares that no sandboxed run uses.
CONTROL
    chroot "$root" dpkg-deb --build "/tmp/stub-$name" "/tmp/stub-$name.deb" >/dev/null &&
      chroot "$root" dpkg -i "/tmp/stub-$name.deb" >/dev/null &&
      chroot "$root" apt-mark hold "$name" >/dev/null || return 1
    rm -rf "$dir" "$dir.deb"
  done
}

# etc_files ROOTFS writes the files debootstrap copies from the build host
# (its hostname and resolver) and docker replaces in a running container:
# no image carries the build host's, and an exported root, used without
# docker, still resolves localhost. No resolver: runs have no network, and
# egress, when a policy grants it, goes through a proxy.
etc_files() {
  local root=$1
  rm -f "$root/etc/hostname" "$root/etc/hosts" "$root/etc/resolv.conf"
  echo sandbox >"$root/etc/hostname"
  printf '127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n' >"$root/etc/hosts"
  : >"$root/etc/resolv.conf"
  chmod 0644 "$root/etc/hostname" "$root/etc/hosts" "$root/etc/resolv.conf"
}

# extract TAG DEST unpacks image TAG's root filesystem into the directory
# DEST with owners, modes, links and device nodes kept. `docker export` adds
# the container's init layer, which is not the image's: /.dockerenv, a
# placeholder /dev/console and empty /etc/hostname, hosts and resolv.conf;
# those are undone.
extract() {
  local tag=$1 dest=$2 c rc=0
  c=$(docker create --network none "$tag" /bin/true) || return 1
  mkdir -p "$dest"
  docker export "$c" | tar -C "$dest" --numeric-owner -xpf - || rc=$?
  docker rm "$c" >/dev/null || true
  [ $rc -eq 0 ] || return $rc
  rm -f "$dest/.dockerenv" "$dest/dev/console"
  etc_files "$dest"
}

# export_rootfs TAG ROOTID PREFIX makes $ROOTFS_DIR/ROOTID (PREFIX-<hash>)
# from image TAG unless it exists, points the symlink $ROOTFS_DIR/PREFIX at
# it (a rename: a reader sees the old target or the new one, never none)
# and removes older exports. An export appears under its final name only
# once complete. The lock serialises concurrent builds.
export_rootfs() {
  local tag=$1 rootid=$2 prefix=$3
  local dest="$ROOTFS_DIR/$rootid"
  # Up to date: nothing to write (and no root needed).
  [ ! -d "$dest" ] || [ "$(readlink "$ROOTFS_DIR/$prefix")" != "$rootid" ] || return 0
  [ "$(id -u)" -eq 0 ] || die "exporting $tag to $dest needs root"
  mkdir -p "$ROOTFS_DIR"
  exec 9>"$ROOTFS_DIR/.lock"
  flock 9
  if [ ! -d "$dest" ]; then
    local began=$SECONDS tmp
    tmp=$(mktemp -d "$ROOTFS_DIR/.$rootid.XXXXXX")
    WORKDIRS+=("$tmp")
    extract "$tag" "$tmp" || die "export of $tag to $dest failed"
    chmod 0755 "$tmp"
    mv -T "$tmp" "$dest"
    echo "images: exported $tag to $dest in $((SECONDS - began))s, $(du -sh "$dest" | cut -f1)"
  fi
  if [ "$(readlink "$ROOTFS_DIR/$prefix" 2>/dev/null)" != "$rootid" ]; then
    rm -f "$ROOTFS_DIR/.$prefix.link"
    ln -s "$rootid" "$ROOTFS_DIR/.$prefix.link"
    mv -T "$ROOTFS_DIR/.$prefix.link" "$ROOTFS_DIR/$prefix"
  fi
  # Older exports, and what an interrupted export left behind. An export
  # a running subprocess executor still uses holds a shared flock on its
  # directory (executors/subprocess lockShared): it is kept, and removed
  # by a later run once nothing uses it. The exclusive lock is held while
  # it is removed, so no executor can start using it half-deleted.
  local old
  for old in "$ROOTFS_DIR/$prefix"-* "$ROOTFS_DIR/.$prefix"-*; do
    [ -e "$old" ] && [ "$old" != "$dest" ] || continue
    if [ -d "$old" ]; then
      local rc=0
      flock -n -E 75 -x "$old" rm -rf --one-file-system "$old" || rc=$?
      [ $rc -ne 75 ] || echo "images: $old is in use by a running executor; kept"
      continue
    fi
    rm -rf --one-file-system "$old"
  done
  exec 9>&-
}

# cleanup WORK removes a build directory, never crossing into a mount a
# failed build left behind.
cleanup() {
  local work=$1
  umount "$work/rootfs/proc" 2>/dev/null || true
  rm -rf --one-file-system "$work"
}

recipe_hash() {
  local dir=$1 base
  base=$(field "$dir" BASE)
  [ -z "$base" ] || base=$(recipe_hash "${base%/}")
  # Names and contents of every recipe file, this script, then the base's
  # hash: a change to the base rebuilds what is built on it.
  (cd "$dir" && find . -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum
    sha256sum <"$here/scripts/images.sh"
    [ -z "$base" ] || echo "base $base") | sha256sum | cut -c1-12
}

# packages_of ROOTFS lists the installed packages and their versions.
packages_of() {
  chroot "$1" dpkg-query -W -f '${Package} ${Version}\n'
}

# make_image DIR TAG SUITE BASE_TAG ROOTID builds TAG from recipe DIR: the
# root filesystem of BASE_TAG, or a debootstrap of SUITE when there is
# none, plus the recipe's packages, then trim.sh and `docker import` with
# the recipe's CHANGES (build's, which calls it).
make_image() {
  local dir=$1 tag=$2 suite=$3 base_tag=$4 rootid=$5
  local hash=${tag##*:}
  [ "$(id -u)" -eq 0 ] || die "building $tag needs root (debootstrap, chroot)"
  [ -n "$base_tag" ] || command -v debootstrap >/dev/null || die "debootstrap is not installed (make deps)"
  local url
  url=$(mirror "$suite")
  [ -n "$url" ] || die "no enabled deb source for $suite in the apt sources"
  local pkgs
  pkgs=$(sed 's/#.*//' "$dir/packages" | xargs)
  local work
  work=$(mktemp -d /var/tmp/sandgate-image.XXXXXX)
  WORKDIRS+=("$work")
  local began=$SECONDS root="$work/rootfs" log="$work/build.log"
  echo "images: building $tag (${base_tag:-$suite minbase} + $pkgs)"
  if [ -n "$base_tag" ]; then
    extract "$base_tag" "$root" >"$log" 2>&1 || { tail -n 30 "$log" >&2; die "cannot unpack $base_tag"; }
    packages_of "$root" >"$work/base.pkgs"
  else
    # The base system first; the packages then through apt in the chroot:
    # debootstrap's own --include resolver cannot order the configuration
    # of larger dependency trees (a browser's, say).
    debootstrap --variant=minbase "$suite" "$root" "$url" >"$log" 2>&1 ||
      { tail -n 30 "$log" >&2; die "build failed for $tag"; }
  fi
  local stubs=
  [ ! -f "$dir/stubs" ] || stubs=$(sed 's/#.*//' "$dir/stubs" | xargs)
  install_packages "$root" "$suite" "$url" "$pkgs" "$stubs" >>"$log" 2>&1 ||
    { tail -n 30 "$log" >&2; die "build failed for $tag"; }
  if [ -n "$base_tag" ]; then
    # apt upgrades a base package when a new one needs a newer version (the
    # mirror moved since the base was built): the two images would then no
    # longer share one toolchain. Said, not fatal.
    local changed
    changed=$(packages_of "$root" | awk 'NR == FNR { v[$1] = $2; next } ($1 in v) && v[$1] != $2 { print $1 }' "$work/base.pkgs" -)
    [ -z "$changed" ] || echo "images: warning: $tag upgraded packages of $base_tag: $(echo $changed);" \
      "rebuild both (docker image rm $base_tag) to share one toolchain again" >&2
  fi
  etc_files "$root"
  [ -x "$dir/trim.sh" ] && "$dir/trim.sh" "$root"
  local args=(--message "sandgate recipe $dir $hash")
  while IFS= read -r line; do
    [ -n "$line" ] && args+=(--change "$line")
  done <<<"$CHANGES"
  args+=(--change "LABEL sandgate.recipe=$hash")
  [ -z "$rootid" ] || args+=(--change "LABEL sandgate.rootfs=$rootid")
  tar -C "$root" --numeric-owner -cf - . | docker import "${args[@]}" - "$tag" >/dev/null
  docker tag "$tag" "${tag%:*}:latest"
  echo "images: built $tag in $((SECONDS - began))s, $(docker image inspect -f '{{.Size}}' "$tag" | awk '{printf "%.0f MB", $1 / 1e6}')"
  # The build directory is big: gone now rather than at exit.
  cleanup "$work"
  # Older builds of this recipe: removed unless a container still uses them.
  docker image ls --format '{{.Repository}}:{{.Tag}}' "${tag%:*}" | grep -v -e ":latest$" -e ":$hash$" |
    xargs -r docker image rm >/dev/null 2>&1 || true
}

declare -A BUILT=() ROOTID=()

# build DIR builds recipe DIR (its base first) unless its tag exists, points
# NAME:latest at it and makes its export. BUILT maps a recipe to its tag.
build() {
  local dir=${1%/}
  [ -z "${BUILT[$dir]:-}" ] || return 0
  [ -f "$dir/image.conf" ] || die "$dir: no image.conf"
  local NAME= SUITE= CHANGES= BASE= EXPORT=
  # shellcheck disable=SC1091
  . "$dir/image.conf"
  [ -n "$NAME" ] || die "$dir/image.conf: NAME is required"
  local base_tag= rootid=
  if [ -n "$BASE" ]; then
    BASE=${BASE%/}
    build "$BASE"
    base_tag=${BUILT[$BASE]} rootid=${ROOTID[$BASE]}
    local base_suite
    base_suite=$(field "$BASE" SUITE)
    [ -z "$SUITE" ] || [ "$SUITE" = "$base_suite" ] || die "$dir: SUITE $SUITE differs from its base's ($base_suite)"
    SUITE=$base_suite
  fi
  [ -n "$SUITE" ] || die "$dir/image.conf: SUITE is required"
  local hash tag
  hash=$(recipe_hash "$dir")
  tag="$NAME:$hash"
  [ -z "$EXPORT" ] || rootid="$EXPORT-$hash"
  if docker image inspect "$tag" >/dev/null 2>&1; then
    echo "images: $tag is up to date"
    docker tag "$tag" "$NAME:latest"
  else
    make_image "$dir" "$tag" "$SUITE" "$base_tag" "$rootid"
  fi
  [ -z "$EXPORT" ] || export_rootfs "$tag" "$rootid" "$EXPORT"
  BUILT[$dir]=$tag ROOTID[$dir]=$rootid
}

WORKDIRS=()
trap 'for w in "${WORKDIRS[@]}"; do cleanup "$w"; done' EXIT

docker version >/dev/null 2>&1 || die "no Docker engine answers (scripts/dockerd.sh start)"
if [ $# -eq 0 ]; then
  # Only recipes: a folder without image.conf (images/k8s-pause, built by
  # scripts/k8s-images.sh) is not this script's.
  set --
  for c in images/*/image.conf; do set -- "$@" "${c%image.conf}"; done
fi
for d in "$@"; do
  build "$d"
  if [ -x "${d%/}/layer.sh" ]; then
    "${d%/}/layer.sh"
  fi
done
