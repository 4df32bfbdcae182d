#!/usr/bin/env bash
# A private PostgreSQL cluster for the tests (make test).
#
#   scripts/postgres.sh start DIR   initdb in DIR (created, must not exist or be
#                                   empty), start the server listening only on
#                                   a Unix socket in DIR, create the database
#                                   "sandgate" and print its DSN on stdout.
#   scripts/postgres.sh stop DIR    stop that server and remove DIR.
#
# The server runs as the unprivileged "postgres" system user (PostgreSQL
# refuses root), created by Debian's package or here. No TCP port is opened:
# listen_addresses is empty, and the socket directory is DIR (mode 0700 to the
# server's user; root, which runs the tests, reaches it anyway). Password
# authentication (scram-sha-256) is on even for the socket, so the gateway's
# DSN carries a password the way a fleet's does and the tests can check it is
# never logged. The password is random per cluster and only printed inside the
# DSN.
set -euo pipefail

cmd=${1:-}
dir=${2:-}
[ -n "$cmd" ] && [ -n "$dir" ] || { echo "usage: $0 start|stop DIR" >&2; exit 2; }

pgbin() {
  local b
  b=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
  [ -n "$b" ] && [ -x "$b/initdb" ] && echo "$b"
}

ensure_installed() {
  if pgbin >/dev/null; then return; fi
  echo "postgres.sh: installing postgresql (Debian)" >&2
  [ "$(id -u)" -eq 0 ] || { echo "postgres.sh: need root to install postgresql" >&2; exit 1; }
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >&2
  # A temporary policy-rc.d keeps the package from starting its system
  # cluster: the tests only ever use their private one.
  local policy=/usr/sbin/policy-rc.d ours=0
  if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod 0755 "$policy" && ours=1
  fi
  apt-get install -y -qq --no-install-recommends postgresql >&2 || { [ $ours -eq 1 ] && rm -f "$policy"; exit 1; }
  [ $ours -eq 1 ] && rm -f "$policy"
  return 0
}

ensure_user() {
  id -u postgres >/dev/null 2>&1 && return
  useradd --system --home-dir /nonexistent --shell /usr/sbin/nologin postgres
}

as_pg() {
  if [ "$(id -u)" -eq 0 ]; then
    setpriv --reuid=postgres --regid=postgres --init-groups -- "$@"
  else
    "$@"
  fi
}

case $cmd in
start)
  ensure_installed
  ensure_user
  bin=$(pgbin)
  mkdir -p "$dir"
  [ -z "$(ls -A "$dir")" ] || { echo "postgres.sh: $dir is not empty" >&2; exit 1; }
  [ "$(id -u)" -eq 0 ] && chown postgres:postgres "$dir"
  chmod 0700 "$dir"
  pw=$(head -c 18 /dev/urandom | base64 | tr -d '/+=')
  pwfile="$dir/.pw"
  (umask 077; printf '%s\n' "$pw" >"$pwfile")
  [ "$(id -u)" -eq 0 ] && chown postgres:postgres "$pwfile"
  as_pg "$bin/initdb" -D "$dir/data" -U postgres --pwfile="$pwfile" --auth=scram-sha-256 \
    -E UTF8 --locale=C.UTF-8 >"$dir/initdb.log" 2>&1 || { cat "$dir/initdb.log" >&2; exit 1; }
  rm -f "$pwfile"
  as_pg "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 \
    -o "-c listen_addresses='' -k $dir -c max_connections=300 -c fsync=on" start >/dev/null \
    || { cat "$dir/server.log" >&2; exit 1; }
  PGPASSWORD=$pw as_pg "$bin/psql" -h "$dir" -U postgres -d postgres -qAt \
    -c "CREATE DATABASE sandgate" >/dev/null
  echo "host=$dir user=postgres password=$pw dbname=sandgate sslmode=disable"
  ;;
stop)
  bin=$(pgbin) || exit 0
  if [ -f "$dir/data/postmaster.pid" ]; then
    as_pg "$bin/pg_ctl" -D "$dir/data" -m fast -w -t 60 stop >/dev/null || true
  fi
  rm -rf "$dir"
  ;;
*)
  echo "usage: $0 start|stop DIR" >&2
  exit 2
  ;;
esac
