#!/usr/bin/env bash
# Regenerates the Go code of the model plugin contract
# (model/plugin/pluginpb/model.proto) and of the Open Inference Protocol's
# gRPC service (supervisor/httpapi/inferencepb/inference.proto). Run it
# through `make proto`.
#
# Needs protoc (Debian: apt-get install -y protobuf-compiler). The Go code
# generators are installed into bin/ at the versions this module uses:
# protoc-gen-go at go.mod's google.golang.org/protobuf version, and
# protoc-gen-go-grpc (pinned below; bump it on purpose).
set -euo pipefail

cd "$(dirname "$0")/.."
root=$PWD
gobin=$root/bin
grpc_gen_version=v1.6.2

if ! command -v protoc >/dev/null 2>&1; then
  echo "gen-proto: protoc not found; install it with: apt-get install -y protobuf-compiler" >&2
  exit 1
fi

protobuf_version=$(go list -m -f '{{.Version}}' google.golang.org/protobuf)
mkdir -p "$gobin"
if [ "$("$gobin/protoc-gen-go" --version 2>/dev/null)" != "protoc-gen-go $protobuf_version" ]; then
  GOBIN=$gobin go install "google.golang.org/protobuf/cmd/protoc-gen-go@$protobuf_version"
fi
if [ "$("$gobin/protoc-gen-go-grpc" --version 2>/dev/null)" != "protoc-gen-go-grpc ${grpc_gen_version#v}" ]; then
  GOBIN=$gobin go install "google.golang.org/grpc/cmd/protoc-gen-go-grpc@$grpc_gen_version"
fi

# gen DIR FILE: the Go code of DIR/FILE, beside it.
gen() {
  PATH=$gobin:$PATH protoc \
    --proto_path="$1" \
    --go_out="$1" --go_opt=paths=source_relative \
    --go-grpc_out="$1" --go-grpc_opt=paths=source_relative \
    "$1/$2"
}
gen model/plugin/pluginpb model.proto
gen supervisor/httpapi/inferencepb inference.proto
echo "gen-proto: regenerated model/plugin/pluginpb from model.proto and supervisor/httpapi/inferencepb from inference.proto (protoc $(protoc --version | cut -d' ' -f2), protoc-gen-go $protobuf_version, protoc-gen-go-grpc $grpc_gen_version)"
