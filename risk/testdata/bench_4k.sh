#!/usr/bin/env bash
# Build and package a small project: a realistic agent-written script.
set -euo pipefail

PROJECT="${PROJECT:-demo}"
BUILD_DIR="build"
DIST_DIR="dist"
VERSION="$(git describe --tags --always 2>/dev/null || echo dev)"

log() {
  printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2
}

clean() {
  log "cleaning ${BUILD_DIR} and ${DIST_DIR}"
  rm -rf "${BUILD_DIR}" "${DIST_DIR}"
  mkdir -p "${BUILD_DIR}" "${DIST_DIR}"
}

check_tools() {
  for tool in go tar sha256sum; do
    if ! command -v "$tool" >/dev/null 2>&1; then
      log "missing tool: $tool"
      exit 1
    fi
  done
}

build() {
  local os arch out
  for target in linux/amd64 linux/arm64 darwin/arm64; do
    os="${target%/*}"
    arch="${target#*/}"
    out="${BUILD_DIR}/${PROJECT}-${os}-${arch}"
    log "building ${out}"
    GOOS="$os" GOARCH="$arch" CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o "$out" ./cmd/"${PROJECT}"
  done
}

run_tests() {
  log "running tests"
  go test ./... 2>&1 | tee "${BUILD_DIR}/test.log"
  local failures
  failures=$(grep -c '^--- FAIL' "${BUILD_DIR}/test.log" || true)
  if [ "$failures" -gt 0 ]; then
    log "${failures} tests failed"
    exit 1
  fi
}

package() {
  local f
  for f in "${BUILD_DIR}"/"${PROJECT}"-*; do
    [ -f "$f" ] || continue
    tar -czf "${DIST_DIR}/$(basename "$f").tar.gz" -C "${BUILD_DIR}" "$(basename "$f")"
  done
  (cd "${DIST_DIR}" && sha256sum ./*.tar.gz > SHA256SUMS)
  log "packaged $(ls "${DIST_DIR}" | wc -l) files"
}

summary() {
  local total=0 size
  while IFS= read -r line; do
    size=$(echo "$line" | awk '{print $1}')
    total=$((total + size))
  done < <(du -k "${DIST_DIR}"/*.tar.gz)
  cat <<EOF
Project:  ${PROJECT}
Version:  ${VERSION}
Total KB: ${total}
EOF
}

main() {
  check_tools
  clean
  case "${1:-all}" in
    build) build ;;
    test) run_tests ;;
    all)
      run_tests
      build
      package
      summary
      ;;
    *)
      log "usage: $0 [build|test|all]"
      exit 2
      ;;
  esac
}

main "$@"
