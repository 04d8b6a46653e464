#!/usr/bin/env bash
# Measures what an idle fleet costs its Redis (BENCHMARKS.md, "What an idle
# fleet costs Redis"): a Redis (Debian's redis-server on a free loopback
# port, no persistence), NODES nodes of one worker each (the echo model,
# each also listening for HTTP) and FRONTS front ends, left idle; then
# Redis's commands a second, by command, and its CPU over WINDOW seconds.
#
#   bash scripts/bench-idle-fleet.sh
#   NODES=16 BINARY=/path/to/older/streamer bash scripts/bench-idle-fleet.sh
#
# Settings (environment):
#   OUT     results folder (default bin/bench-idle-fleet/<UTC time>)
#   NODES   nodes (default 16)
#   FRONTS  front ends (default 3)
#   WINDOW  seconds measured, after 6 s of quiet (default 20)
#   BINARY  a streamer binary to run instead of building this tree's
set -euo pipefail

cd "$(dirname "$0")/.."

OUT=${OUT:-bin/bench-idle-fleet/$(date -u +%Y%m%dT%H%M%SZ)}
NODES=${NODES:-16}
FRONTS=${FRONTS:-3}
WINDOW=${WINDOW:-20}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)

NAME=bench-idle-fleet.sh
# shellcheck source=scripts/fleet.sh
source scripts/fleet.sh

for _ in $(seq 1 "$NODES"); do
  port=$(free_port)
  "$STREAMER" serve --broker "$broker" --workers 1 --model echo --listen "127.0.0.1:$port" >"$OUT/node$port.log" 2>&1 &
  pids+=($!)
  wait_ready "http://127.0.0.1:$port"
done
for _ in $(seq 1 "$FRONTS"); do
  port=$(free_port)
  "$STREAMER" serve --broker "$broker" --workers 0 --listen "127.0.0.1:$port" >"$OUT/front$port.log" 2>&1 &
  pids+=($!)
  wait_ready "http://127.0.0.1:$port"
done
sleep 6 # the fleet settles: every node listed, and its first claims and forgets done

echo "machine: $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg); $NODES nodes, $FRONTS front ends, idle; $(date -u +%FT%TZ)" | tee "$OUT/summary.txt"
python3 - "$redis_port" "${pids[0]}" "$WINDOW" <<'PY' | tee -a "$OUT/summary.txt"
import os, re, subprocess, sys, time
port, pid, window = sys.argv[1], sys.argv[2], float(sys.argv[3])
def commands():
    out = subprocess.run(["redis-cli", "-p", port, "INFO", "commandstats"], capture_output=True, text=True, check=True).stdout
    return {m[1]: int(m[2]) for m in re.finditer(r"cmdstat_(\S+):calls=(\d+)", out)}
def cpu():
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
c0, t0, w0 = commands(), cpu(), time.monotonic()
time.sleep(window)
c1, t1, w1 = commands(), cpu(), time.monotonic()
wall = w1 - w0
rates = sorted(((n - c0.get(name, 0)) / wall, name) for name, n in c1.items())
print(f"commands/s {sum(r for r, _ in rates):.0f}; Redis CPU {100 * (t1 - t0) / wall:.2f}% of a core")
for rate, name in reversed(rates):
    if rate > 0:
        print(f"  {name:20s} {rate:8.1f}/s")
PY
