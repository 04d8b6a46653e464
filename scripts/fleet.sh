# The processes of a fleet on one machine, for bench-redis.sh and
# bench-fleet.sh, which source this file (it is not run on its own): their
# messages, a free port, a wait for readiness, the streamer binary to run,
# and a Redis (Debian's redis-server on a free loopback port, without
# persistence), every process stopped when the script exits. The script
# sets NAME (its messages' prefix) and OUT (its results folder) first.

log() { echo "$NAME: $*" >&2; }

command -v redis-server >/dev/null || { log "redis-server not found: run make install-tools"; exit 1; }

pids=()
cleanup() {
  local pid
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

wait_ready() {
  local url=$1 i
  for i in $(seq 1 200); do
    if curl -sf "$url/readyz" >/dev/null; then return; fi
    sleep 0.05
  done
  log "$url never became ready"; exit 1
}

# The streamer to run: BINARY (another build), or this tree's.
STREAMER=$OUT/streamer
if [ -n "${BINARY:-}" ]; then
  cp "$BINARY" "$STREAMER"
else
  go build -o "$STREAMER" ./cmd/streamer
fi

redis_port=$(free_port)
redis-server --port "$redis_port" --bind 127.0.0.1 --save '' --appendonly no --dir "$OUT" >"$OUT/redis.log" 2>&1 &
pids+=($!)
for i in $(seq 1 100); do
  if redis-cli -p "$redis_port" ping 2>/dev/null | grep -q PONG; then break; fi
  sleep 0.05
done
# shellcheck disable=SC2034 # used by the scripts that source this one
broker=redis://127.0.0.1:$redis_port/0
