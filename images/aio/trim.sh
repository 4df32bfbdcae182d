#!/bin/sh
# Runs on the host as the last step before the import, with the root
# filesystem as $1: drops what a sandbox never needs (documentation, apt's
# caches and lists, locales beyond C.UTF-8) from what this recipe added to
# the runtime image. The root filesystem is read-only at run time.
set -eu
root=$1
rm -rf "$root"/usr/share/doc/* "$root"/usr/share/man/* "$root"/usr/share/info/* \
  "$root"/usr/share/locale/* "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/* \
  "$root"/var/cache/debconf/*-old "$root"/var/log/* "$root"/tmp/* "$root"/var/tmp/*
# Mount points the pool uses: the session workspace, sandboxd's socket
# directory (a per-instance host directory) and the tmpfs /tmp.
mkdir -p "$root"/workspace "$root"/run/sandboxd "$root"/tmp
chmod 1777 "$root"/tmp
# Never let sandboxed code find an apt configuration to act on.
rm -f "$root"/etc/apt/sources.list "$root"/etc/apt/sources.list.d/*
