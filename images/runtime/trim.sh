#!/bin/sh
# Runs on the host as the last step before the import, with the root
# filesystem as $1: drops what a sandboxed run never needs (documentation,
# apt's caches and lists, locales beyond C.UTF-8) to keep the image small,
# then sets up what every executor relies on. The root filesystem is
# read-only at run time, so nothing dropped here could be used later anyway.
set -eu
root=$1
rm -rf "$root"/usr/share/doc/* "$root"/usr/share/man/* "$root"/usr/share/info/* \
  "$root"/usr/share/locale/* "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/* \
  "$root"/var/cache/debconf/*-old "$root"/var/log/* "$root"/tmp/* "$root"/var/tmp/*
# The Python packages' own test suites (scipy's, sympy's, numpy's...): about
# 145 MB no run imports. Their modules probe for them and cope (openpyxl,
# mpmath); numpy.testing and pandas._testing are not under tests/ and stay.
find "$root"/usr/lib/python3/dist-packages -type d -name tests -prune -exec rm -rf {} +
# Mount points the executors use, present so they need not be created:
# among them the frameworks' own names of the workspace
# (executors.LayoutRoots: E2B's /home/user, Daytona's /home/daytona,
# DeerFlow's /mnt/user-data), where a session's layout shows it.
mkdir -p "$root"/workspace "$root"/tmp "$root"/proc "$root"/dev \
  "$root"/home/user "$root"/home/daytona "$root"/mnt/user-data
# `python` is Python 3, as agents' prompts and tools assume (DeerFlow's
# tell the model to run `python`): Debian ships python3 alone.
[ -x "$root"/usr/bin/python3 ] || { echo "trim: python3 missing" >&2; exit 1; }
[ -e "$root"/usr/bin/python ] || ln -s python3 "$root"/usr/bin/python
chmod 1777 "$root"/tmp
# Never let a run find an apt configuration to act on.
rm -f "$root"/etc/apt/sources.list "$root"/etc/apt/sources.list.d/*

# matplotlib draws with Agg: no display exists in a run, and the rc file
# holds where MPLBACKEND would not (the subprocess executor's environment
# is empty but for a small allowlist). Debian's matplotlib reads this file
# last, after a matplotlibrc in the cwd or ~/.config/matplotlib, so a run's
# own rc file still wins.
rc="$root"/etc/matplotlibrc
[ -f "$rc" ] || { echo "trim: $rc missing (python3-matplotlib?)" >&2; exit 1; }
sed -i -E 's/^#?[[:space:]]*backend[[:space:]]*:.*/backend: Agg/' "$rc"
grep -qx 'backend: Agg' "$rc" || echo 'backend: Agg' >>"$rc"

# The sandbox account: one name for the executors' default uids (subprocess
# 60000, docker 61000, aio 62000; DefaultSandboxID in executors/*), so
# `whoami` and `id -un` answer `sandbox` whichever executor ran the code,
# with /workspace as its home. getpwnam("sandbox") finds 60000.
for id in 60000 61000 62000; do
  grep -q "^[^:]*:[^:]*:$id:" "$root"/etc/passwd ||
    echo "sandbox:x:$id:$id:sandbox:/workspace:/bin/bash" >>"$root"/etc/passwd
  grep -q "^[^:]*:[^:]*:$id:" "$root"/etc/group ||
    echo "sandbox:x:$id:" >>"$root"/etc/group
done
