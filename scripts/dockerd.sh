#!/usr/bin/env bash
# Starts a Docker engine for the tests when none answers, and stops it again
# afterwards, but only one this script started (DESIGN.md §8).
#
#   scripts/dockerd.sh start [HOLDER]   start dockerd unless an engine answers; wait for it
#   scripts/dockerd.sh stop  [HOLDER]   stop the dockerd this script started, once no
#                                        other holder still needs it
#   scripts/dockerd.sh status
#
# HOLDER is the pid of the process the engine is held for (the Makefile passes
# make's own pid); it defaults to the caller's pid. Every start records a
# lease for its holder, also when the engine was already running, so two
# concurrent `make test` runs on one machine do not pull the engine from under
# each other: stop drops its own lease and stops the engine only when this
# script started it and no lease with a living holder is left. An engine
# started any other way (systemd, by hand) is never stopped.
#
# The engine runs without a bridge or iptables rules: containers here get
# NetworkMode none, and the host's firewall is left alone.
#
# gVisor: when runsc is installed (scripts/gvisor.sh, `make gvisor`, which
# `make test` runs before this), the engine is started with it registered
# as the runtime "runsc", which the gvisor executor asks for: through this
# script's daemon.json ($STATE_DIR/daemon.json, --config-file), or, when
# the machine has an /etc/docker/daemon.json of its own, through
# --add-runtime (see engine_args). An engine this script started earlier
# without it (runsc built since) gets it registered live: the runtimes are
# written to the file that engine reads its configuration from, when that
# file is this script's or absent, and SIGHUP makes it reload them (dockerd
# reloads "runtimes" without a restart; running containers are untouched).
# An engine started any other way is left as it is: the gvisor executor
# then reports it unavailable, and the README says how to register runsc.
#
# A private second engine (make soak-faults restarts its engine on purpose
# and must never touch the shared one): point every path of this script and
# of dockerd somewhere else, e.g.
#
#   SANDGATE_DOCKERD_STATE=/run/sgsoak SANDGATE_DOCKERD_SOCK=/run/sgsoak/docker.sock \
#   SANDGATE_DOCKERD_DATA_ROOT=/var/lib/sgsoak-docker SANDGATE_DOCKERD_EXEC_ROOT=/run/sgsoak/exec \
#   SANDGATE_DOCKERD_PIDFILE=/run/sgsoak/docker.pid SANDGATE_DOCKERD_LOG=/var/log/sgsoak-dockerd.log \
#     scripts/dockerd.sh start
#
# Without them dockerd's own defaults apply (/var/lib/docker, /var/run/docker,
# /var/run/docker.pid), which two engines cannot share.
set -euo pipefail

STATE_DIR=${SANDGATE_DOCKERD_STATE:-/run/sandgate-dockerd}
SOCK=${SANDGATE_DOCKERD_SOCK:-/var/run/docker.sock}
LOG=${SANDGATE_DOCKERD_LOG:-/var/log/sandgate-dockerd.log}
WAIT_S=${SANDGATE_DOCKERD_WAIT:-60}
CONFIG=$STATE_DIR/daemon.json
SYSTEM_CONFIG=${SANDGATE_DOCKERD_SYSTEM_CONFIG:-/etc/docker/daemon.json}
RUNSC=${SANDGATE_RUNSC:-/usr/local/bin/runsc}
# gVisor's platform (how the sentry intercepts the code's system calls):
# systrap by default, the right one on this kind of machine (200k os.stat
# calls 0.77 s against 8.9 s under ptrace); kvm hangs at the first program
# start where KVM is nested paravirtual (issue 34). Registered as runsc's
# --platform=; the gvisor executor shows it in /readyz. An engine already
# running with runsc registered keeps its platform unless this variable is
# set explicitly (then it is re-registered as below).
RUNSC_PLATFORM=${SANDGATE_RUNSC_PLATFORM:-systrap}
DATA_ROOT=${SANDGATE_DOCKERD_DATA_ROOT:-}
EXEC_ROOT=${SANDGATE_DOCKERD_EXEC_ROOT:-}
PIDFILE=${SANDGATE_DOCKERD_PIDFILE:-}

mode=${1:-}
holder=${2:-$PPID}

engine_up() {
  # /_ping answers "OK" once the API serves requests.
  [ -S "$SOCK" ] && curl -fsS --max-time 2 --unix-socket "$SOCK" http://localhost/_ping >/dev/null 2>&1
}

ping_engine() {
  if command -v curl >/dev/null 2>&1; then
    engine_up
  else
    docker -H "unix://$SOCK" version >/dev/null 2>&1
  fi
}

alive() { [ -n "$1" ] && kill -0 "$1" 2>/dev/null; }

# running PID: alive and not a zombie waiting to be reaped.
running() { alive "$1" && [ "$(cut -d' ' -f3 "/proc/$1/stat" 2>/dev/null)" != Z ]; }

# started_pid prints the pid of the dockerd this script started, if it still runs.
started_pid() {
  local pid
  pid=$(cat "$STATE_DIR/dockerd.pid" 2>/dev/null || true)
  if alive "$pid" && [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = dockerd ]; then
    echo "$pid"
  fi
}

live_leases() {
  local f n=0
  for f in "$STATE_DIR"/leases/*; do
    [ -e "$f" ] || continue
    if alive "$(basename "$f")"; then n=$((n + 1)); else rm -f "$f"; fi
  done
  echo "$n"
}

# daemon_config prints the engine configuration this script starts
# dockerd with: runsc registered when it is installed. Without
# --oci-seccomp on purpose: runsc would then apply the container's seccomp
# profile inside the sandbox, but it ignores errnoRet, so Docker's default
# profile's clone3 -> ENOSYS becomes EPERM and glibc (2.34+) stops
# creating threads (node and python threads fail). The code's system
# calls go to gVisor's kernel, which runs under gVisor's own seccomp filter.
# --host-uds=open lets a sandbox connect to a host Unix socket bind-mounted
# into it: the egress bridge's (executors/docker egress.go). Without it the
# gvisor executor reports network_grant false and refuses runs granted
# network. It opens nothing else: only the executor's own socket
# directory is ever mounted into a container.
daemon_config() {
  if [ -x "$RUNSC" ]; then
    printf '{\n  "runtimes": {\n    "runsc": {"path": "%s", "runtimeArgs": ["--host-uds=open", "--network=none", "--platform=%s"]}\n  }\n}\n' "$RUNSC" "$RUNSC_PLATFORM"
  else
    echo '{}'
  fi
}

# engine_args prints, one a line, the private paths (when set) and the
# arguments that register runsc with a dockerd about to start. Without a system daemon.json the engine reads
# this script's own file (which register_runsc may rewrite later). With one,
# the engine keeps reading it (its settings stay in force) and runsc comes
# as a flag, unless the file has a "runtimes" key already: dockerd refuses
# a directive set both ways, and that file is the administrator's.
engine_args() {
  [ -z "$DATA_ROOT" ] || printf '%s\n' --data-root "$DATA_ROOT"
  [ -z "$EXEC_ROOT" ] || printf '%s\n' --exec-root "$EXEC_ROOT"
  [ -z "$PIDFILE" ] || printf '%s\n' --pidfile "$PIDFILE"
  if [ ! -e "$SYSTEM_CONFIG" ]; then
    daemon_config >"$CONFIG"
    printf '%s\n' --config-file "$CONFIG"
  elif [ -x "$RUNSC" ] && ! grep -q '"runtimes"' "$SYSTEM_CONFIG"; then
    printf '%s\n' --add-runtime "runsc=$RUNSC"
  fi
}

# has_runsc: the engine lists runsc, with --host-uds=open and
# --network=none (an engine this script registered runsc with before those
# flags gets them on the next start).
has_runsc() {
  local names
  names=$(docker -H "unix://$SOCK" info --format '{{range $name, $r := .Runtimes}}{{$name}} {{$r.Args}}{{"\n"}}{{end}}' 2>/dev/null) || return 1
  grep '^runsc ' <<<"$names" | grep -q -- '--host-uds=open' &&
    grep '^runsc ' <<<"$names" | grep -q -- '--network=none' &&
    { [ -z "${SANDGATE_RUNSC_PLATFORM:-}" ] || grep '^runsc ' <<<"$names" | grep -q -- "--platform=$RUNSC_PLATFORM"; }
}

# config_file_of PID DEFAULT prints the configuration file the dockerd
# PID reads: its --config-file, else dockerd's default, DEFAULT.
config_file_of() {
  local arg next=0 file=$2
  while IFS= read -r -d '' arg; do
    if [ "$next" = 1 ]; then file=$arg; next=0; continue; fi
    case "$arg" in
    --config-file) next=1 ;;
    --config-file=*) file=${arg#--config-file=} ;;
    esac
  done <"/proc/$1/cmdline"
  echo "$file"
}

# register_runsc adds runsc to a running engine this script started
# without it, by rewriting the file the engine reads (only when that file
# is this script's own, or absent) and SIGHUP. Anything else is left
# alone, with a message.
register_runsc() {
  [ -x "$RUNSC" ] || return 0
  has_runsc && return 0
  local pid file
  pid=$(started_pid)
  if [ -z "$pid" ]; then
    echo "dockerd: the engine on $SOCK was not started by this script and has no runsc runtime;" \
      "the gvisor executor stays unavailable (README: registering runsc)" >&2
    return 0
  fi
  file=$(config_file_of "$pid" "$SYSTEM_CONFIG")
  if [ "$file" != "$CONFIG" ] && [ -e "$file" ]; then
    echo "dockerd: pid $pid reads $file, which this script did not write; not changing it." \
      "Add runsc there (README) or restart the engine with scripts/dockerd.sh" >&2
    return 0
  fi
  mkdir -p "$(dirname "$file")"
  daemon_config >"$file"
  kill -HUP "$pid"
  for _ in $(seq 50); do
    if has_runsc; then
      echo "dockerd: registered runsc ($RUNSC) with pid $pid through $file"
      return 0
    fi
    sleep 0.2
  done
  echo "dockerd: pid $pid did not pick up runsc from $file; see $LOG" >&2
}

start() {
  mkdir -p "$STATE_DIR/leases"
  exec 9>"$STATE_DIR/lock"
  flock 9
  touch "$STATE_DIR/leases/$holder"
  if ping_engine; then
    echo "dockerd: an engine already answers on $SOCK"
    register_runsc
    return 0
  fi
  # launched is the pid just started: until it has exec'd dockerd its
  # comm is still this shell's (or setsid's), so the wait below watches
  # it by pid, not through started_pid (which checks the comm).
  local launched=""
  if [ -n "$(started_pid)" ]; then
    echo "dockerd: started earlier, waiting for it"
  else
    if ! command -v dockerd >/dev/null 2>&1; then
      echo "dockerd: not installed (make deps installs docker.io)" >&2
      exit 1
    fi
    if [ "$(id -u)" -ne 0 ]; then
      echo "dockerd: no engine answers and starting one needs root" >&2
      exit 1
    fi
    # A dockerd that died (or was stopped by other means) may have left
    # mounts the new one would trip over.
    root_in_use || unmount_residue
    local extra
    mapfile -t extra < <(engine_args)
    # setsid: the engine must outlive this shell and make's job control.
    setsid dockerd --bridge=none --iptables=false --ip6tables=false \
      "${extra[@]}" -H "unix://$SOCK" >>"$LOG" 2>&1 </dev/null 9>&- &
    launched=$!
    echo "$launched" >"$STATE_DIR/dockerd.pid"
    echo "dockerd: started pid $launched (log $LOG)"
  fi
  for _ in $(seq $((WAIT_S * 5))); do
    if ping_engine; then
      echo "dockerd: ready"
      return 0
    fi
    if { [ -n "$launched" ] && ! running "$launched"; } || { [ -z "$launched" ] && [ -z "$(started_pid)" ]; }; then
      echo "dockerd: exited during start-up; last log lines:" >&2
      tail -n 20 "$LOG" >&2 || true
      exit 1
    fi
    sleep 0.2
  done
  echo "dockerd: no answer after ${WAIT_S}s; last log lines:" >&2
  tail -n 20 "$LOG" >&2 || true
  exit 1
}

stop() {
  [ -d "$STATE_DIR" ] || return 0
  exec 9>"$STATE_DIR/lock"
  flock 9
  rm -f "$STATE_DIR/leases/$holder"
  local pid
  pid=$(started_pid)
  if [ -z "$pid" ]; then
    rm -f "$STATE_DIR/dockerd.pid"
    echo "dockerd: nothing started by this script is running"
    return 0
  fi
  local n
  n=$(live_leases)
  if [ "$n" -gt 0 ]; then
    echo "dockerd: leaving pid $pid running for $n other holder(s)"
    return 0
  fi
  echo "dockerd: stopping pid $pid"
  kill -TERM "$pid"
  # dockerd stops its containers (10 s grace each, in parallel) and the
  # containerd it launched before exiting.
  for _ in $(seq 300); do
    alive "$pid" || break
    sleep 0.2
  done
  if alive "$pid"; then
    echo "dockerd: pid $pid did not exit in 60s; killing it" >&2
    kill -KILL "$pid" 2>/dev/null || true
    for _ in $(seq 50); do
      alive "$pid" || break
      sleep 0.2
    done
  fi
  alive "$pid" || unmount_residue
  rm -f "$STATE_DIR/dockerd.pid"
}

# unmount_residue unmounts what a stopped dockerd left mounted below its
# data root. Docker 20.10 mounts a container's root file system while it
# creates the container; stopped in between (make soak-faults' engine
# restart does that), it leaves the mount behind, and the next dockerd can
# never remove that container ("unlinkat .../merged: device or resource
# busy"): the container stays, "removing", for good. Once dockerd is gone
# nothing of its own may be mounted there.
# root_in_use reports whether a dockerd on this data root runs (one not
# started by this script, say): its mounts are not residue.
root_in_use() {
  local root=${DATA_ROOT:-/var/lib/docker} c cmd
  for c in /proc/[0-9]*/comm; do
    [ "$(cat "$c" 2>/dev/null)" = dockerd ] || continue
    cmd=$(tr '\0' ' ' <"${c%/comm}/cmdline" 2>/dev/null) || continue
    case "$cmd" in
      *"--data-root=$root "* | *"--data-root $root "*) return 0 ;;
      *--data-root*) ;;
      *) [ "$root" = /var/lib/docker ] && return 0 ;;
    esac
  done
  return 1
}

unmount_residue() {
  local root=${DATA_ROOT:-/var/lib/docker} m n=0
  while read -r m; do
    umount -l "$m" 2>/dev/null && n=$((n + 1))
  done < <(awk -v r="$root/" 'index($5, r) == 1 { print $5 }' /proc/self/mountinfo | sort -r)
  if [ "$n" -gt 0 ]; then
    echo "dockerd: unmounted $n file systems the engine left below $root"
  fi
}

status() {
  local pid
  pid=$(started_pid)
  if ping_engine; then echo "engine: up"; else echo "engine: down"; fi
  if has_runsc; then echo "runsc runtime: registered"; else echo "runsc runtime: no"; fi
  echo "started by this script: ${pid:-no}"
  echo "live leases: $( [ -d "$STATE_DIR/leases" ] && live_leases || echo 0)"
}

case "$mode" in
start) start ;;
stop) stop ;;
status) status ;;
*)
  echo "usage: $0 start|stop|status [HOLDER_PID]" >&2
  exit 2
  ;;
esac
