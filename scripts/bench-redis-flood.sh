#!/usr/bin/env bash
# Runs the two overload trials of BENCHMARKS.md's "A full shared backlog"
# on one machine, on a Redis (Debian's redis-server on a free loopback
# port, no persistence):
#   flood: one GPU node (1 worker, batch 16, sleep:5ms,0s) and one front
#          end, both --max-queue 64; `streamer bench --target` with 32
#          clients (under the bound: what the node can do), then 256, whose
#          refused requests come again at once. It prints the items/s of
#          both and their ratio.
#   large: one node (1 worker, batch 4, sleep:20ms,0s) and two front ends
#          (--stream-prefix large), --max-queue 16; 32 clients of one-item
#          requests on the first front end, coming again at once when
#          refused, and beside them one client of 4-item requests on the
#          second. It prints what each front end answered and refused.
#
#   bash scripts/bench-redis-flood.sh
#
# Settings (environment):
#   OUT       results folder (default bin/bench-redis-flood/<UTC time>)
#   DURATION  measured load per trial (default 5s)
#   BINARY    a streamer binary to run instead of building this tree's
set -euo pipefail

cd "$(dirname "$0")/.."

OUT=${OUT:-bin/bench-redis-flood/$(date -u +%Y%m%dT%H%M%SZ)}
DURATION=${DURATION:-5s}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)

NAME=bench-redis-flood.sh
# shellcheck source=scripts/fleet.sh
source scripts/fleet.sh

# serve_on NAME FLAGS...: a process of the fleet, on a free port, ready;
# its URL in $url.
serve_on() {
  local name=$1 port
  shift
  port=$(free_port)
  "$STREAMER" serve --broker "$broker" --listen "127.0.0.1:$port" "$@" >"$OUT/$name.log" 2>&1 &
  pids+=($!)
  url=http://127.0.0.1:$port
  wait_ready "$url"
}

{
  echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), load $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "started: $(date -u +%FT%TZ)"
} >"$OUT/machine.txt"

log "flood: one node, one front end, --max-queue 64"
redis_only=${#pids[@]}
serve_on flood-node --workers 1 --batch-size 16 --model sleep:5ms,0s --max-queue 64
serve_on flood-front --workers 0 --max-queue 64
front=$url
for c in 32 256; do
  log "flood: $c clients"
  "$STREAMER" bench --target "$front" --concurrency "$c" --duration "$DURATION" --warmup 1s --json >"$OUT/flood_$c.json"
done

# The first trial's processes stop, and the second keeps its keys under
# a prefix of its own: the first one's mean size of the requests
# admitted would weigh on it.
for pid in "${pids[@]:redis_only}"; do kill -TERM "$pid"; done
for pid in "${pids[@]:redis_only}"; do wait "$pid" || true; done
pids=("${pids[@]:0:redis_only}")
log "large: one node, two front ends, --max-queue 16"
serve_on large-node --stream-prefix large --workers 1 --batch-size 4 --model sleep:20ms,0s --max-queue 16
serve_on large-smalls --stream-prefix large --workers 0 --max-queue 16
smalls=$url
serve_on large-larges --stream-prefix large --workers 0 --max-queue 16
larges=$url
"$STREAMER" bench --target "$smalls" --concurrency 32 --duration "$DURATION" --warmup 1s --json >"$OUT/large_smalls.json" &
flood=$!
# The large requests begin once the small ones have filled the backlog.
for i in $(seq 1 100); do
  if [ "$(redis-cli -p "$redis_port" xlen large:items)" -ge 16 ]; then break; fi
  sleep 0.05
done
"$STREAMER" bench --target "$larges" --concurrency 1 --items-per-request 4 --duration "$DURATION" --warmup 0s --json >"$OUT/large_larges.json"
wait "$flood"
echo "ended: $(date -u +%FT%TZ), load $(cut -d' ' -f1-3 /proc/loadavg)" >>"$OUT/machine.txt"

python3 - "$OUT" <<'EOF' | tee "$OUT/summary.md"
import json, sys
out = sys.argv[1]
load = lambda name: json.load(open(f"{out}/{name}.json"))
print(open(f"{out}/machine.txt").read().strip().replace("\n", "; "))
print()
under, flood = load("flood_32"), load("flood_256")
refused = lambda d: sum(d.get("errors", {}).values())
print("| flood | items/s | of 32 clients' | refused |")
print("|---|---|---|---|")
for name, d in (("32 clients", under), ("256 clients", flood)):
    print(f"| {name} | {d['items_per_s']:.0f} | {d['items_per_s'] / under['items_per_s']:.3f} | {refused(d)} |")
print()
print("| large | requests answered | items/s | refused |")
print("|---|---|---|---|")
for name in ("smalls", "larges"):
    d = load(f"large_{name}")
    print(f"| {name} | {d['requests']} | {d['items_per_s']:.0f} | {refused(d)} |")
EOF
log "results in $OUT"
