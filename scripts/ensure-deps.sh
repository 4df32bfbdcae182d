#!/usr/bin/env bash
# Installs, from Debian's apt, the system tools the tests need and a fresh
# machine may lack. Each entry is "command package": the package is installed
# only when the command is missing, so a provisioned machine pays nothing.
set -euo pipefail

deps=(
  "python3 python3"           # subprocess executor: python; clients/python tests (urllib, unittest: the full stdlib)
  "node nodejs"               # subprocess executor: javascript; e2e npm clients
  "npm npm"                   # e2e npm clients (make npm-deps), when nodejs lacks it
  "bash bash"
  "unshare util-linux"        # subprocess executor: namespaces and /proc
  "setpriv util-linux"        # the rootless tests drop to an unprivileged user
  "bwrap bubblewrap"          # subprocess executor when the gateway is not root (user namespaces)
  "dockerd docker.io"         # docker executor and aio pool (engine started by scripts/dockerd.sh)
  "debootstrap debootstrap"   # runtime images are built from a minbase rootfs
  "chromium chromium"         # browser router and the approval page's browser test
  "git git"                   # egress tests: git clone, fetch and push through the proxy to git http-backend
)

missing=()
for d in "${deps[@]}"; do
  read -r cmd pkg <<<"$d"
  # The executor looks interpreters up on the sandbox PATH, not the caller's.
  if ! PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin command -v "$cmd" >/dev/null 2>&1; then
    missing+=("$pkg")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
echo "ensure-deps: installing ${missing[*]}"
if [ "$(id -u)" -ne 0 ]; then
  echo "ensure-deps: need root to install ${missing[*]}" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}"
