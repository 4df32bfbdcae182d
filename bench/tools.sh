#!/usr/bin/env bash
# Installs the peers bench/ measures against: Debian bubblewrap, socat and ripgrep
# (apt, if missing) and Anthropic's sandbox-runtime (`srt`, npm) into
# bench/.tools. Any failure is reported, not fatal: the report then shows
# srt as "measured: unavailable" with the reason.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
tools="$here/.tools"
mkdir -p "$tools"
reason=""
need=()
command -v bwrap >/dev/null 2>&1 || need+=(bubblewrap)
command -v socat >/dev/null 2>&1 || need+=(socat)
command -v rg >/dev/null 2>&1 || need+=(ripgrep) # srt checks for it
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" -eq 0 ]; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${need[@]}" >/dev/null 2>&1 ||
      { apt-get update -q >/dev/null 2>&1 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${need[@]}" >/dev/null 2>&1; } ||
      reason="apt-get install ${need[*]} failed"
  else
    reason="${need[*]} missing and installing needs root"
  fi
fi
if [ ! -x "$tools/node_modules/.bin/srt" ]; then
  if command -v npm >/dev/null 2>&1; then
    npm install --silent --no-audit --no-fund --prefix "$tools" @anthropic-ai/sandbox-runtime >"$tools/npm.log" 2>&1 ||
      reason="${reason:+$reason; }npm install @anthropic-ai/sandbox-runtime failed (see bench/.tools/npm.log)"
  else
    reason="${reason:+$reason; }npm not installed"
  fi
fi
rm -f "$tools/unavailable"
if [ -n "$reason" ]; then
  echo "bench tools: $reason" >&2
  echo "$reason" >"$tools/unavailable"
fi
exit 0
