#!/usr/bin/env bash
# Fetches the ONNX Runtime shared library (CPU build) that streamer's ONNX
# runner loads, into third_party/onnxruntime/ (never committed: the folder
# ignores itself). The library comes from the onnxruntime-node package on
# the npm registry, whose tarball ships it for each platform, at the version
# whose C API matches the github.com/yalue/onnxruntime_go version in go.mod.
#
# Usage: scripts/fetch-onnxruntime.sh   (or: make onnxruntime)
# Quiet and quick when the library is already there.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dest="$root/third_party/onnxruntime"

# onnxruntime_go version → the ONNX Runtime release whose C API it targets
# (ORT_API_VERSION in its copy of onnxruntime_c_api.h).
go_version="$(awk '$1 == "github.com/yalue/onnxruntime_go" { print $2 }' "$root/go.mod" | head -n1)"
case "$go_version" in
v1.27.*) ort_version="1.24.3" ;; # C API 24
"")
	echo "fetch-onnxruntime: go.mod does not require github.com/yalue/onnxruntime_go" >&2
	exit 1
	;;
*)
	echo "fetch-onnxruntime: no ONNX Runtime version is known for onnxruntime_go $go_version;" \
		"add it to scripts/fetch-onnxruntime.sh (see ORT_API_VERSION in its onnxruntime_c_api.h)" >&2
	exit 1
	;;
esac

lib="libonnxruntime.so.$ort_version"
if [[ -f "$dest/$lib" && -L "$dest/libonnxruntime.so" && "$(cat "$dest/VERSION" 2>/dev/null)" == "$ort_version" ]]; then
	exit 0
fi

case "$(uname -s)/$(uname -m)" in
Linux/x86_64) platform="linux/x64" ;;
Linux/aarch64 | Linux/arm64) platform="linux/arm64" ;;
*)
	echo "fetch-onnxruntime: no prebuilt ONNX Runtime for $(uname -s)/$(uname -m) in onnxruntime-node;" \
		"install ONNX Runtime $ort_version yourself and pass --ort-lib or set STREAMER_ORT_LIB" >&2
	exit 1
	;;
esac
if ! command -v npm >/dev/null; then
	echo "fetch-onnxruntime: npm is needed to fetch ONNX Runtime $ort_version (install Node.js and npm)" >&2
	exit 1
fi

echo "fetch-onnxruntime: fetching ONNX Runtime $ort_version ($platform) from npm package onnxruntime-node@$ort_version" >&2
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
# npm pack checks the tarball against the registry's integrity hash; no
# install scripts run.
# --loglevel=error, not --silent, which hides npm's errors too: without the
# network, the fetch failed after a minute saying nothing.
if ! (cd "$work" && npm pack "onnxruntime-node@$ort_version" --loglevel=error >/dev/null); then
	echo "fetch-onnxruntime: npm pack onnxruntime-node@$ort_version failed (above, npm's reason: the network, the registry, a proxy?)" >&2
	exit 1
fi
member="package/bin/napi-v6/$platform/libonnxruntime.so.1"
tar -xzf "$work/onnxruntime-node-$ort_version.tgz" -C "$work" "$member"
if ! grep -aq "$ort_version" "$work/$member"; then
	echo "fetch-onnxruntime: $member in onnxruntime-node@$ort_version does not name version $ort_version" >&2
	exit 1
fi

mkdir -p "$dest"
printf '*\n' >"$dest/.gitignore"
install -m 0644 "$work/$member" "$dest/$lib.tmp"
mv -f "$dest/$lib.tmp" "$dest/$lib"
ln -sfn "$lib" "$dest/libonnxruntime.so"
ln -sfn "$lib" "$dest/libonnxruntime.so.1"
echo "$ort_version" >"$dest/VERSION"
echo "fetch-onnxruntime: installed $dest/$lib" >&2
