#!/usr/bin/env bash
# Runs BENCHMARKS.md's fleet of unequal nodes on one machine: a Redis
# (Debian's redis-server on a free loopback port, no persistence), nodes of
# one model at different speeds, one front end, and `streamer bench
# --target` on the front end at each concurrency. The default fleet is the
# table's: a node of 1 worker and one of 4 running sleep:40ms,1ms (104 ms
# a batch of 64), and a node of 1 worker running sleep:160ms,4ms (416 ms).
# It prints a line per concurrency: items/s, latency percentiles, errors,
# and each node's batches and those dispatched with a worker idle.
#
#   bash scripts/bench-fleet.sh
#   BINARY=/path/to/older/streamer bash scripts/bench-fleet.sh   # the same with another build
#
# Settings (environment):
#   OUT          results folder (default bin/bench-fleet/<UTC time>)
#   DURATION     load per row (default 15s)
#   CONCURRENCY  the clients of each row (default "64 512")
#   FLEET        the nodes, "WORKERS:MODEL" each (default
#                "1:sleep:40ms,1ms 4:sleep:40ms,1ms 1:sleep:160ms,4ms")
#   BINARY       a streamer binary to run instead of building this tree's
set -euo pipefail

cd "$(dirname "$0")/.."

OUT=${OUT:-bin/bench-fleet/$(date -u +%Y%m%dT%H%M%SZ)}
DURATION=${DURATION:-15s}
CONCURRENCY=${CONCURRENCY:-64 512}
FLEET=${FLEET:-1:sleep:40ms,1ms 4:sleep:40ms,1ms 1:sleep:160ms,4ms}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)

NAME=bench-fleet.sh
# shellcheck source=scripts/fleet.sh
source scripts/fleet.sh

nodes=()
for spec in $FLEET; do
  workers=${spec%%:*}
  model=${spec#*:}
  port=$(free_port)
  "$STREAMER" serve --broker "$broker" --workers "$workers" --model "$model" --listen "127.0.0.1:$port" >"$OUT/node$port.log" 2>&1 &
  pids+=($!)
  wait_ready "http://127.0.0.1:$port"
  nodes+=("http://127.0.0.1:$port $workers:$model")
done
first_model=${FLEET%% *}
first_model=${first_model#*:}
front_port=$(free_port)
"$STREAMER" serve --broker "$broker" --workers 0 --model "$first_model" --listen "127.0.0.1:$front_port" >"$OUT/front.log" 2>&1 &
pids+=($!)
front=http://127.0.0.1:$front_port
wait_ready "$front"

echo "machine: $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg); fleet: $FLEET; $(date -u +%FT%TZ)" | tee "$OUT/summary.txt"
for c in $CONCURRENCY; do
  log "$c clients"
  "$STREAMER" bench --target "$front" --concurrency "$c" --duration "$DURATION" --json >"$OUT/bench_$c.json"
  python3 - "$OUT/bench_$c.json" "$c" <<'EOF' | tee -a "$OUT/summary.txt"
import json, sys
j = json.load(open(sys.argv[1]))
lat = " ".join(f"{k} {round(v)} ms" for k, v in j["latency_ms"].items())
print(f"{sys.argv[2]} clients: {j['items_per_s']:.0f} items/s; {lat}; errors {j['errors'] or 'none'}")
EOF
  for n in "${nodes[@]}"; do
    curl -sf "${n%% *}/v1/stats" | python3 -c '
import json, sys
s = json.load(sys.stdin)
d = s.get("dispatch", {})
print("  node %s: %s batches so far, %s dispatched with a worker idle, %s full" % (sys.argv[1], s.get("batches"), d.get("idle"), d.get("full")))
' "${n#* }" | tee -a "$OUT/summary.txt"
  done
done
