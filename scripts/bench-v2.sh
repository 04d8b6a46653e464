#!/usr/bin/env bash
# Runs the protocol benchmark of BENCHMARKS.md: one server of the demo ONNX
# model, loaded in turn over POST /predict, over the Open Inference
# Protocol with JSON data, over its binary tensor data extension, and over
# its gRPC service, at each concurrency and items per request, alternated
# row by row in one run so that the four see the same machine. It prints
# one table.
#
#   bash scripts/bench-v2.sh
#
# Settings (environment):
#   OUT          results folder (default bin/bench-v2/<UTC time>)
#   DURATION     measured load per row (default 5s)
#   WARMUP       load before each measurement (default 2s)
#   ROWS         "clients:items-per-request" pairs (default "8:1 64:1 16:16")
#   SERVE        the server's flags (default: the demo, 1 worker of 1 thread)
set -euo pipefail

cd "$(dirname "$0")/.."

OUT=${OUT:-bin/bench-v2/$(date -u +%Y%m%dT%H%M%SZ)}
DURATION=${DURATION:-5s}
WARMUP=${WARMUP:-2s}
ROWS=${ROWS:-8:1 64:1 16:16}
SERVE=${SERVE:---model demo --workers 1 --intra-op-threads 1 --batch-size 64}
INPUT='[5.1,3.5,1.4,0.2]'
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
STREAMER=$OUT/streamer

log() { echo "bench-v2.sh: $*" >&2; }

server=
cleanup() { [ -z "$server" ] || { kill -TERM "$server" 2>/dev/null; wait "$server" 2>/dev/null || true; }; }
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

go build -o "$STREAMER" ./cmd/streamer
port=$(free_port)
grpc_port=$(free_port)
# shellcheck disable=SC2086 # SERVE is a list of flags
"$STREAMER" serve $SERVE --listen "127.0.0.1:$port" --grpc-listen "127.0.0.1:$grpc_port" >"$OUT/server.log" 2>&1 &
server=$!
target=http://127.0.0.1:$port
for _ in $(seq 1 400); do
  if curl -sf "$target/readyz" >/dev/null; then break; fi
  sleep 0.05
done
curl -sf "$target/readyz" >/dev/null || { log "the server never became ready; see $OUT/server.log"; exit 1; }

{
  echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), load $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "server: $SERVE"
  echo "started: $(date -u +%FT%TZ)"
} >"$OUT/machine.txt"

# What names the model among the server's flags: bench asks a v2 target
# for the model by that name, and takes no other serve flag with --target.
naming=()
# shellcheck disable=SC2086
set -- $SERVE
while [ $# -gt 0 ]; do
  case $1 in
    --model | --model-name | --plugin) naming+=("$1" "$2"); shift 2 ;;
    --model=* | --model-name=* | --plugin=*) naming+=("$1"); shift ;;
    *) shift ;;
  esac
done

for row in $ROWS; do
  c=${row%%:*} n=${row##*:}
  for protocol in predict v2 v2-binary grpc; do
    log "$c clients, $n items per request, $protocol"
    names=()
    [ "$protocol" = predict ] || names=("${naming[@]}")
    [ "$protocol" != grpc ] || names+=(--grpc-target "127.0.0.1:$grpc_port")
    "$STREAMER" bench --target "$target" "${names[@]}" --protocol "$protocol" --input "$INPUT" \
      --concurrency "$c" --items-per-request "$n" --duration "$DURATION" --warmup "$WARMUP" --json >"$OUT/${protocol}_${c}_${n}.json"
  done
done
echo "ended: $(date -u +%FT%TZ), load $(cut -d' ' -f1-3 /proc/loadavg)" >>"$OUT/machine.txt"

python3 - "$OUT" $ROWS <<'EOF' | tee "$OUT/summary.md"
import json, sys
out, rows = sys.argv[1], sys.argv[2:]
print(open(f"{out}/machine.txt").read().strip().replace("\n", "; "))
print()
print("| clients | items/request | protocol | items/s | ÷ /predict | p50 ms | p99 ms | mean batch | errors |")
print("|---|---|---|---|---|---|---|---|---|")
for row in rows:
    c, n = row.split(":")
    base = None
    for protocol in ("predict", "v2", "v2-binary", "grpc"):
        r = json.load(open(f"{out}/{protocol}_{c}_{n}.json"))
        base = base or r["items_per_s"]
        errs = sum(r.get("errors", {}).values())
        print(f"| {c} | {n} | {protocol} | {r['items_per_s']:.0f} | {r['items_per_s'] / base:.3f} | "
              f"{r['latency_ms']['p50']:.2f} | {r['latency_ms']['p99']:.2f} | {r.get('mean_batch_size', 0):.1f} | {errs} |")
EOF
log "results in $OUT"
