#!/usr/bin/env bash
# Installs what building and testing streamer needs beyond Go itself, on a
# Debian machine: Debian packages (only those missing), Go tools into ./bin,
# and the ONNX Runtime library into ./third_party. Safe to run again: each
# step checks first and does nothing when its tool is already there.
#
# Run it through `make install-tools` (`make test` does).
set -euo pipefail

cd "$(dirname "$0")/.."
root=$PWD
gobin=$root/bin

# staticcheck 2026.2.2, the first line of releases built for Go 1.26.
staticcheck_version=v0.8.2
# grpcurl: a gRPC client the project did not write, for the tests of the
# Open Inference Protocol's gRPC service.
grpcurl_version=v1.9.4

log() { echo "install-tools: $*"; }

# apt_packages are the Debian packages the build and tests need.
# ── Add packages here. ──
#   gcc, libc6-dev: cgo, for -race and the ONNX Runtime binding.
#   protobuf-compiler: make proto, and the Python plugin's generated stubs.
#   python3-grpcio, python3-protobuf, python3-msgpack, python3-cryptography: the
#   Python plugin example (cryptography makes its TLS certificate).
#   redis-server: the Redis broker's tests, which start their own servers
#   (internal/redistest).
#   chromium: the status page's test loads GET / in headless Chromium.
apt_packages=(gcc libc6-dev protobuf-compiler python3-grpcio python3-protobuf python3-msgpack python3-cryptography redis-server chromium)

# install_apt_packages installs those of apt_packages that are missing,
# refreshing the package lists once first.
install_apt_packages() {
  local missing=() pkg
  for pkg in "${apt_packages[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed'; then
      missing+=("$pkg")
    fi
  done
  if [ ${#missing[@]} -eq 0 ]; then
    return
  fi
  local sudo=()
  if [ "$(id -u)" -ne 0 ]; then
    if ! command -v sudo >/dev/null 2>&1; then
      log "missing Debian packages: ${missing[*]}; install them as root: apt-get install -y ${missing[*]}" >&2
      exit 1
    fi
    sudo=(sudo)
  fi
  log "installing Debian packages: ${missing[*]}"
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -q
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}" </dev/null
}

# install_go_tool NAME PACKAGE VERSION installs a Go command into ./bin unless
# the one there was built from its module at VERSION (as go version -m
# reads it from the binary).
install_go_tool() {
  local name=$1 pkg=$2 version=$3
  if [ "$(go version -m "$gobin/$name" 2>/dev/null | awk '$1 == "mod" { print $3; exit }')" = "$version" ]; then
    return
  fi
  log "installing $name $version into bin/"
  mkdir -p "$gobin"
  GOBIN=$gobin go install "$pkg@$version"
}

install_go_tools() {
  install_go_tool staticcheck honnef.co/go/tools/cmd/staticcheck "$staticcheck_version"
  install_go_tool grpcurl github.com/fullstorydev/grpcurl/cmd/grpcurl "$grpcurl_version"
  # ── Add Go tools here. ──
}

# fetch_onnxruntime puts the ONNX Runtime shared library into third_party/
# (the same as `make onnxruntime`), for the ONNX runner's tests.
# ── The fetch itself lives in scripts/fetch-onnxruntime.sh. ──
fetch_onnxruntime() {
  if [ -f scripts/fetch-onnxruntime.sh ]; then
    bash scripts/fetch-onnxruntime.sh
  fi
}

if ! command -v go >/dev/null 2>&1; then
  log "go is not on PATH (it usually lives in /usr/local/go/bin)" >&2
  exit 1
fi
if [ "${1:-}" = "--serve" ]; then
  # Only what `make serve` needs: cgo for the ONNX binding, and the runtime.
  apt_packages=(gcc libc6-dev)
fi
# The ONNX Runtime fetch needs npm. Machines that bring their own Node.js
# have it already; installing Debian's over theirs could conflict.
if ! command -v npm >/dev/null 2>&1; then
  apt_packages+=(npm)
fi
if [ "${1:-}" = "--serve" ]; then
  install_apt_packages
  fetch_onnxruntime
  exit 0
fi
install_apt_packages
install_go_tools
fetch_onnxruntime
