#!/usr/bin/env bash
# Runs the many-machine benchmark of BENCHMARKS.md on one machine: a Redis
# (Debian's redis-server on a free loopback port, no persistence), GPU
# nodes (two of 2 workers each, unless NODES and NODE_WORKERS say) and one
# front end, driven over HTTP by `streamer
# bench --target` at several closed-loop concurrencies; and, alternated row
# by row in the same run, one local server of as many workers with the same
# model.
# It prints one table: items/s and p50 of both, their ratio, and the best
# any batcher could do (c / (F + p·⌈c/w⌉) while c ≤ w·B, else w·B / (F + p·B)).
# Redis's INFO commandstats at the end goes to OUT/commandstats.txt.
#
#   bash scripts/bench-redis.sh
#
# Settings (environment):
#   OUT          results folder (default bin/bench-redis/<UTC time>)
#   DURATION     measured load per row (default 5s)
#   WARMUP       load before each measurement (default 2s)
#   CONCURRENCY  the clients of each row (default "8 32 64 128 256 512")
#   MODEL        the model (default sleep:10ms,100us)
#   NODES        GPU nodes (default 2)
#   NODE_WORKERS workers on each node (default 2); the local server gets
#                NODES × NODE_WORKERS
#   NODE_FLAGS   more flags for the nodes (e.g. "--batching greedy")
#   BINARY       a streamer binary to run instead of building this tree's
#                (to set an older build beside this one)
#   RATES        open-loop rows after the closed ones, in requests/s
#                (default none; e.g. "4000 8000", a quarter and a half of
#                the limit)
set -euo pipefail

cd "$(dirname "$0")/.."

OUT=${OUT:-bin/bench-redis/$(date -u +%Y%m%dT%H%M%SZ)}
DURATION=${DURATION:-5s}
WARMUP=${WARMUP:-2s}
CONCURRENCY=${CONCURRENCY:-8 32 64 128 256 512}
MODEL=${MODEL:-sleep:10ms,100us}
NODES=${NODES:-2}
NODE_WORKERS=${NODE_WORKERS:-2}
WORKERS=$((NODES * NODE_WORKERS))
NODE_FLAGS=${NODE_FLAGS:-}
RATES=${RATES:-}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)

NAME=bench-redis.sh
# shellcheck source=scripts/fleet.sh
source scripts/fleet.sh

for node in $(seq 1 "$NODES"); do
  port=$(free_port)
  # shellcheck disable=SC2086 # NODE_FLAGS is a list of flags
  "$STREAMER" serve --broker "$broker" --workers "$NODE_WORKERS" --model "$MODEL" --listen "127.0.0.1:$port" $NODE_FLAGS >"$OUT/node$node.log" 2>&1 &
  pids+=($!)
  wait_ready "http://127.0.0.1:$port"
done
front_port=$(free_port)
"$STREAMER" serve --broker "$broker" --workers 0 --model "$MODEL" --listen "127.0.0.1:$front_port" >"$OUT/front.log" 2>&1 &
pids+=($!)
front=http://127.0.0.1:$front_port
wait_ready "$front"

{
  echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), load $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "redis: $(redis-server --version | cut -d' ' -f3); $NODES nodes × $NODE_WORKERS workers"
  echo "started: $(date -u +%FT%TZ)"
} >"$OUT/machine.txt"

for c in $CONCURRENCY; do
  log "$c clients through redis"
  "$STREAMER" bench --target "$front" --concurrency "$c" --duration "$DURATION" --warmup "$WARMUP" --json >"$OUT/redis_$c.json"
  log "$c clients on one local server"
  "$STREAMER" bench --model "$MODEL" --workers "$WORKERS" --concurrency "$c" --duration "$DURATION" --warmup "$WARMUP" --json >"$OUT/local_$c.json"
done
for r in $RATES; do
  log "$r requests/s through redis"
  # A rate the server did not keep (sends skipped for the in-flight bound)
  # exits 1 with its figures written: the table shows the skipped share.
  "$STREAMER" bench --target "$front" --rate "$r" --concurrency 4096 --duration "$DURATION" --warmup "$WARMUP" --json >"$OUT/redis_rate_$r.json" ||
    log "$r requests/s through redis: not kept (exit $?)"
  log "$r requests/s on one local server"
  "$STREAMER" bench --model "$MODEL" --workers "$WORKERS" --rate "$r" --concurrency 4096 --duration "$DURATION" --warmup "$WARMUP" --json >"$OUT/local_rate_$r.json" ||
    log "$r requests/s on one local server: not kept (exit $?)"
done
echo "ended: $(date -u +%FT%TZ), load $(cut -d' ' -f1-3 /proc/loadavg)" >>"$OUT/machine.txt"
# What Redis spent its time on, over every row: calls and µs per command.
redis-cli -p "$redis_port" info commandstats >"$OUT/commandstats.txt"

python3 - "$OUT" "$MODEL" "$RATES" "$WORKERS" $CONCURRENCY <<'EOF' | tee "$OUT/summary.md"
import json, math, re, sys
out, model, rates, workers, clients = sys.argv[1], sys.argv[2], sys.argv[3].split(), int(sys.argv[4]), [int(c) for c in sys.argv[5:]]
m = re.fullmatch(r"sleep:([0-9.]+)ms,([0-9.]+)us", model)
batch = 64
def best(c):
    if not m:
        return 0
    fixed, per = float(m.group(1)) / 1000, float(m.group(2)) / 1e6
    if c > workers * batch:
        return workers * batch / (fixed + per * batch)
    return c / (fixed + per * math.ceil(c / workers))
print(open(f"{out}/machine.txt").read().strip().replace("\n", "; "))
print()
print("| clients | best items/s | local items/s | local of best | redis items/s | redis of best | redis ÷ local | local p50 ms | redis p50 ms | redis p99 ms | errors |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
for c in clients:
    lo = json.load(open(f"{out}/local_{c}.json"))
    re_ = json.load(open(f"{out}/redis_{c}.json"))
    b = best(c)
    of = lambda x: f"{x / b:.3f}" if b else "—"
    errs = sum(re_.get("errors", {}).values())
    print(f"| {c} | {b:.0f} | {lo['items_per_s']:.0f} | {of(lo['items_per_s'])} | {re_['items_per_s']:.0f} | {of(re_['items_per_s'])} | "
          f"{re_['items_per_s'] / lo['items_per_s']:.3f} | {lo['latency_ms']['p50']:.2f} | {re_['latency_ms']['p50']:.2f} | {re_['latency_ms']['p99']:.2f} | {errs} |")
if rates:
    print()
    print("| requests/s | local items/s | local p50 ms | local p99 ms | local skipped | redis items/s | redis p50 ms | redis p99 ms | redis skipped | errors |")
    print("|---|---|---|---|---|---|---|---|---|---|")
for r in rates:
    lo = json.load(open(f"{out}/local_rate_{r}.json"))
    re_ = json.load(open(f"{out}/redis_rate_{r}.json"))
    errs = sum(re_.get("errors", {}).values())
    print(f"| {r} | {lo['items_per_s']:.0f} | {lo['latency_ms']['p50']:.2f} | {lo['latency_ms']['p99']:.2f} | {lo.get('skipped_fraction', 0):.3f} | "
          f"{re_['items_per_s']:.0f} | {re_['latency_ms']['p50']:.2f} | {re_['latency_ms']['p99']:.2f} | {re_.get('skipped_fraction', 0):.3f} | {errs} |")
EOF
log "results in $OUT"
