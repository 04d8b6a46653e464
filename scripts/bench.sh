#!/usr/bin/env bash
# Runs the performance scenarios A–F that BENCHMARKS.md records, with the
# exact commands it quotes, and prints a summary table with each figure's
# ratio to its target. Everything a run measured lands in one folder: the
# machine, each command and its JSON report, the side-by-side rounds of
# scenario E against a bare net/http handler, the RSS samples of scenario F,
# the Go benchmarks and CPU profiles of the HTTP and Go API paths.
#
# Not part of `make test`: it takes about twenty minutes and wants a quiet
# machine. Other engineers on the same cores skew absolute figures; the
# side-by-side ratios of scenario E (streamer against bare, alternated in
# the same run) hold up better, and the load average is recorded before and
# after so that a busy run can be told apart.
#
#   bash scripts/bench.sh                  # everything
#   SCENARIOS="B E" bash scripts/bench.sh  # some scenarios
#
# Settings (environment):
#   OUT            results folder (default bin/bench/<UTC time>)
#   DURATION       measured load per bench run (default 10s)
#   WARMUP         load before each measurement (default 2s)
#   ROUNDS         side-by-side rounds for scenario E (default 3)
#   MEMORY_SECONDS length of scenario F (default 60)
#   M_DURATION     measured load per row of scenario M's sweeps (default 4s)
#   SCENARIOS      which of A B C D M E F G P to run (default all; M is the
#                  moderate-load sweeps of greedy against adaptive; G is the
#                  Go benchmarks of the supervisor, ipc and httpapi, P the
#                  CPU profiles)
set -euo pipefail

cd "$(dirname "$0")/.."

OUT=${OUT:-bin/bench/$(date -u +%Y%m%dT%H%M%SZ)}
DURATION=${DURATION:-10s}
WARMUP=${WARMUP:-2s}
ROUNDS=${ROUNDS:-3}
MEMORY_SECONDS=${MEMORY_SECONDS:-60}
SCENARIOS=${SCENARIOS:-A B C D M E F G P}
M_DURATION=${M_DURATION:-4s}

SLEEP_MODEL=sleep:10ms,100us
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
STREAMER=$OUT/streamer
BARE=$OUT/bare
SUMMARY=$OUT/summary.md
COMMANDS=$OUT/commands.txt

log() { echo "bench.sh: $*" >&2; }

wants() { [[ " $SCENARIOS " == *" $1 "* ]]; }

# ── Processes this script starts, stopped on exit. ──
started_pids=()
cleanup() {
  local pid
  for pid in "${started_pids[@]}"; do
    kill -TERM "$pid" 2>/dev/null || true
  done
  for pid in "${started_pids[@]}"; do
    wait "$pid" 2>/dev/null || true
  done
}
trap cleanup EXIT

# ── Reading the JSON reports (pretty-printed, one key a line). ──

# jnum FILE KEY prints the first number stored under KEY in FILE.
jnum() {
  sed -n "s/^ *\"$2\": *\([-0-9.eE+]*\).*/\1/p" "$1" | head -n 1
}

# calc EXPRESSION prints the value of an awk expression.
calc() { awk "BEGIN { printf \"%.6g\", $1 }"; }

# ── The summary table. ──

# row SCENARIO WHAT MEASURED TARGET_TEXT MARGIN: MARGIN ≥ 1 meets the target.
row() {
  local verdict=MISSED
  if awk "BEGIN { exit !($5 >= 1) }"; then verdict=met; fi
  printf '| %s | %s | %s | %s | %s | %s |\n' "$1" "$2" "$3" "$4" "$(calc "$5" | xargs printf '%.3f')" "$verdict" >>"$SUMMARY"
}

# run_bench NAME ARGS... runs `streamer bench ARGS --json` into NAME.json,
# recording the exact command.
run_bench() {
  local name=$1
  shift
  echo "streamer bench $* --duration $DURATION --warmup $WARMUP --json" >>"$COMMANDS"
  log "$name: streamer bench $*"
  "$STREAMER" bench "$@" --duration "$DURATION" --warmup "$WARMUP" --json >"$OUT/$name.json"
}

# ── Servers this script starts, for scenarios E and F. ──

# start_server LOG CMD... starts a server that logs its address and waits
# for it to listen and be ready; its URL is then in server_url and its pid
# in server_pid.
server_pid=
server_url=
start_server() {
  local logfile=$1 addr="" tries
  shift
  "$@" >"$logfile" 2>&1 &
  server_pid=$!
  started_pids+=("$server_pid")
  for ((tries = 0; tries < 600; tries++)); do
    addr=$(sed -n -e 's/.*listen=\([0-9.]*:[0-9]*\).*/\1/p' -e 's/^listening on \([0-9.]*:[0-9]*\).*/\1/p' "$logfile" | head -n 1)
    if [[ -n $addr ]] && curl -sf "http://$addr/readyz" >/dev/null 2>&1; then
      server_url=http://$addr
      return 0
    fi
    if ! kill -0 "$server_pid" 2>/dev/null; then
      log "server exited: $(cat "$logfile")"
      return 1
    fi
    sleep 0.1
  done
  log "server not ready after 60s: $(cat "$logfile")"
  return 1
}

stop_server() {
  kill -TERM "$1" 2>/dev/null || true
  wait "$1" 2>/dev/null || true
}

# descendants PID prints PID and all its descendants.
descendants() {
  local pid=$1 child
  echo "$pid"
  # shellcheck disable=SC2013 # the file is one line of space-separated pids
  for child in $(cat /proc/"$pid"/task/*/children 2>/dev/null); do
    descendants "$child"
  done
}

# cpu_ticks PID... prints the user+system clock ticks used by the processes.
cpu_ticks() {
  local total=0 pid t
  for pid in "$@"; do
    t=$(awk '{ print $14 + $15 }' /proc/"$pid"/stat 2>/dev/null || echo 0)
    total=$((total + t))
  done
  echo "$total"
}

rss_kib() { awk '/^VmRSS:/ { print $2 }' /proc/"$1"/status; }

# ── The machine. ──

machine() {
  {
    echo "date (UTC):   $(date -u '+%Y-%m-%d %H:%M')"
    echo "commit:       $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet HEAD 2>/dev/null || echo ' + uncommitted changes')"
    echo "cores:        $(nproc)"
    echo "cpu:          $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | sort | uniq -c | sed 's/^ *//')"
    echo "memory:       $(awk '/^MemTotal:/ { printf "%.1f GiB", $2 / 1048576 }' /proc/meminfo)"
    echo "kernel:       $(uname -sr)"
    echo "go:           $(go version | cut -d' ' -f3-)"
    if command -v wrk >/dev/null; then
      echo "wrk:          $(wrk --version 2>&1 | head -n 1 | cut -d' ' -f1-2)"
    else
      echo "wrk:          not installed (apt-get install wrk adds the wrk rounds of scenario E)"
    fi
    echo "load at start: $(cut -d' ' -f1-3 /proc/loadavg)"
  } | tee "$OUT/machine.txt" >&2
}

# ── Scenarios. ──

# calibrate measures what the sleep model's 16.4 ms batch really takes on
# this machine (and how late a plain nanosleep returns): the ceiling that A
# and B can reach here whatever streamer does.
calibrate() {
  go run ./scripts/calibrate | tee -a "$OUT/notes.txt" >&2
}

# A: the sleep model through the Go API, against the physical limit.
scenario_a() {
  local w
  for w in 1 2 4 8; do
    run_bench "A-workers$w" --api go --model "$SLEEP_MODEL" --batch-size 64 --workers "$w" --concurrency $((256 * w))
    row A "Go API, sleep, $w worker(s): of limit" "$(jnum "$OUT/A-workers$w.json" of_limit | xargs printf '%.3f')" "≥ 0.98" \
      "$(jnum "$OUT/A-workers$w.json" of_limit) / 0.98"
  done
}

# B: the same over HTTP.
scenario_b() {
  local w c
  for w in 1 2 4; do
    c=256
    ((w == 4)) && c=512
    run_bench "B-workers$w" --model "$SLEEP_MODEL" --batch-size 64 --workers "$w" --concurrency "$c"
    row B "HTTP, sleep, $w worker(s), $c clients: of limit" "$(jnum "$OUT/B-workers$w.json" of_limit | xargs printf '%.3f')" "≥ 0.95" \
      "$(jnum "$OUT/B-workers$w.json" of_limit) / 0.95"
  done
}

# M: moderate load, closed loops from 1 to 512 clients, greedy and adaptive
# batching side by side at each, beside the best possible; and the same for
# a model whose per-item cost dominates. The tables land in M-*.txt.
scenario_m() {
  local w
  for w in 1 2 4; do
    log "M: sweep, $w worker(s)"
    echo "streamer bench --model $SLEEP_MODEL --batch-size 64 --workers $w --sweep-concurrency 1,2,8,32,64,128,256,512 --sweep-batching greedy,adaptive --duration $M_DURATION --warmup $WARMUP" >>"$COMMANDS"
    "$STREAMER" bench --model "$SLEEP_MODEL" --batch-size 64 --workers "$w" --sweep-concurrency 1,2,8,32,64,128,256,512 \
      --sweep-batching greedy,adaptive --duration "$M_DURATION" --warmup "$WARMUP" >"$OUT/M-workers$w.txt"
  done
  log "M: sweep, per-item cost dominant"
  echo "streamer bench --model sleep:1ms,300us --batch-size 64 --workers 1 --sweep-concurrency 1,2,8,32,64,128 --sweep-batching greedy,adaptive --duration $M_DURATION --warmup $WARMUP" >>"$COMMANDS"
  "$STREAMER" bench --model sleep:1ms,300us --batch-size 64 --workers 1 --sweep-concurrency 1,2,8,32,64,128 \
    --sweep-batching greedy,adaptive --duration "$M_DURATION" --warmup "$WARMUP" >"$OUT/M-per-item.txt"
  cat "$OUT"/M-*.txt >>"$OUT/notes.txt"
}

# C: one client at a time on default flags.
scenario_c() {
  run_bench C-lone-user --model "$SLEEP_MODEL" --concurrency 1
  local p50
  p50=$(jnum "$OUT/C-lone-user.json" p50)
  row C "lone user, sleep, default flags: p50 ms" "$(printf '%.2f' "$p50")" "≤ 12" "12 / $p50"
}

# D: the echo model through the Go API: streamer's own cost per item.
scenario_d() {
  local w
  for w in 1 2; do
    run_bench "D-workers$w" --api go --model echo --workers "$w" --concurrency 512
    row D "Go API, echo, $w worker(s), single items: items/s" "$(printf '%.0f' "$(jnum "$OUT/D-workers$w.json" items_per_s)")" "≥ 1000000" \
      "$(jnum "$OUT/D-workers$w.json" items_per_s) / 1000000"
  done
}

# E: the echo model over HTTP with 128 clients, as the target states it,
# then side by side with a bare net/http JSON handler.
scenario_e() {
  run_bench E-echo-http --model echo --workers 2 --concurrency 128
  row E "HTTP, echo, 2 workers, 128 clients: requests/s" "$(printf '%.0f' "$(jnum "$OUT/E-echo-http.json" requests_per_s)")" "≥ 20000" \
    "$(jnum "$OUT/E-echo-http.json" requests_per_s) / 20000"
  scenario_e_side_by_side
}

# scenario_e_side_by_side alternates the same client against streamer and
# against bare, ROUNDS times, and records requests/s and server CPU per
# request of each (streamer's includes its worker processes).
scenario_e_side_by_side() {
  local streamer_url bare_url streamer_pid bare_pid round kind url pids t0 t1 rps
  start_server "$OUT/E-streamer-serve.log" "$STREAMER" serve --model echo --workers 2 --listen 127.0.0.1:0
  streamer_url=$server_url streamer_pid=$server_pid
  start_server "$OUT/E-bare.log" "$BARE" --listen 127.0.0.1:0
  bare_url=$server_url bare_pid=$server_pid
  local table=$OUT/E-side-by-side.tsv
  printf 'round\tclient\tserver\trequests_per_s\tserver_cpu_us_per_request\n' >"$table"
  echo "side by side: streamer serve --model echo --workers 2; $BARE; each loaded in turn by: streamer bench --target URL --concurrency 128 --duration $DURATION --warmup $WARMUP --json" >>"$COMMANDS"
  if command -v wrk >/dev/null; then
    echo "side by side: wrk -t2 -c128 -d$DURATION -s examples/wrk/predict.lua URL" >>"$COMMANDS"
  fi
  for round in $(seq "$ROUNDS"); do
    for kind in streamer bare; do
      if [[ $kind == streamer ]]; then url=$streamer_url pids=$(descendants "$streamer_pid"); else url=$bare_url pids=$bare_pid; fi
      # shellcheck disable=SC2086
      t0=$(cpu_ticks $pids)
      "$STREAMER" bench --target "$url" --concurrency 128 --duration "$DURATION" --warmup "$WARMUP" --json >"$OUT/E-round$round-$kind.json" 2>/dev/null
      # shellcheck disable=SC2086
      t1=$(cpu_ticks $pids)
      rps=$(jnum "$OUT/E-round$round-$kind.json" requests_per_s)
      # The CPU ticks cover the warm-up too: per request over both.
      printf '%s\tstreamer-bench\t%s\t%.0f\t%.1f\n' "$round" "$kind" "$rps" \
        "$(calc "($t1 - $t0) / $(getconf CLK_TCK) * 1e6 / ($rps * ($(seconds "$DURATION") + $(seconds "$WARMUP")))")" >>"$table"
      if command -v wrk >/dev/null; then
        rps=$(wrk -t2 -c128 -d"$DURATION" -s examples/wrk/predict.lua "$url" | tee "$OUT/E-round$round-$kind-wrk.txt" | awk '/^Requests\/sec:/ { print $2 }')
        printf '%s\twrk\t%s\t%.0f\t\n' "$round" "$kind" "$rps" >>"$table"
      fi
    done
  done
  stop_server "$streamer_pid"
  stop_server "$bare_pid"
  local client ratio
  for client in streamer-bench wrk; do
    ratio=$(awk -F'\t' -v c="$client" '
      $2 == c && $3 == "streamer" { s[$1] = $4 }
      $2 == c && $3 == "bare" { b[$1] = $4 }
      END { for (r in s) if (b[r] > 0) print s[r] / b[r] }' "$table" | sort -g | awk '{ v[NR] = $1 } END { if (NR) print v[int((NR + 1) / 2)] }')
    [[ -n $ratio ]] || continue
    # 20k against the ~50k of a bare handler on a quiet 2-core machine.
    row E "streamer / bare, same client ($client), median of $ROUNDS" "$(printf '%.3f' "$ratio")" "≥ 0.40" "$ratio / 0.40"
  done
  awk -F'\t' 'NR > 1 && $5 != "" { sum[$3] += $5; n[$3]++ }
    END { for (k in sum) printf "E: server CPU per request, %s: %.1f us\n", k, sum[k] / n[k] }' "$table" >>"$OUT/notes.txt"
}

# seconds DURATION converts 10s, 1500ms or 2m to seconds.
seconds() {
  case $1 in
    *ms) calc "${1%ms} / 1000" ;;
    *s) echo "${1%s}" ;;
    *m) calc "${1%m} * 60" ;;
    *) echo "$1" ;;
  esac
}

# F: the supervisor's memory under scenario E's load for MEMORY_SECONDS.
scenario_f() {
  local url pid bench_pid samples=$OUT/F-rss.tsv t
  start_server "$OUT/F-serve.log" "$STREAMER" serve --model echo --workers 2 --listen 127.0.0.1:0
  url=$server_url pid=$server_pid
  echo "streamer serve --model echo --workers 2; streamer bench --target URL --concurrency 128 --duration ${MEMORY_SECONDS}s --warmup 0 --json; VmRSS of the serve process every 5s" >>"$COMMANDS"
  log "F: ${MEMORY_SECONDS}s of load, RSS of pid $pid every 5s"
  printf 'seconds\tvmrss_kib\n' >"$samples"
  printf '0\t%s\n' "$(rss_kib "$pid")" >>"$samples"
  "$STREAMER" bench --target "$url" --concurrency 128 --duration "${MEMORY_SECONDS}s" --warmup 0 --json >"$OUT/F-load.json" 2>/dev/null &
  bench_pid=$!
  for ((t = 5; t <= MEMORY_SECONDS; t += 5)); do
    sleep 5
    printf '%s\t%s\n' "$t" "$(rss_kib "$pid")" >>"$samples"
  done
  wait "$bench_pid"
  stop_server "$pid"
  # Growth: the largest RSS of the second half of the load against the
  # largest of the first half; the idle sample before the load is left out.
  local verdict
  verdict=$(awk -F'\t' -v total="$MEMORY_SECONDS" '
    NR == 2 { idle = $2 }
    NR > 2 && $1 <= total / 2 && $2 > first { first = $2 }
    NR > 2 && $1 > total / 2 && $2 > second { second = $2 }
    NR > 2 { last = $2; if ($2 > most) most = $2; if (!start) start = $2 }
    END { printf "%d %d %d %d %d %d", idle, start, last, most, first, second }' "$samples")
  read -r idle start last most first second <<<"$verdict"
  echo "F: RSS idle ${idle} KiB, at 5s ${start} KiB, at end ${last} KiB, max ${most} KiB; max of the first half ${first} KiB, of the second ${second} KiB; $(jnum "$OUT/F-load.json" requests_per_s | xargs printf '%.0f') requests/s" >>"$OUT/notes.txt"
  row F "supervisor RSS, second half max / first half max (KiB)" "$second / $first" "≤ 1.10" "1.10 * $first / $second"
}

# G: the Go benchmarks (the lead's A, C and D through the Go API, and the
# ipc, batcher and httpapi micro-benchmarks).
scenario_g() {
  echo "go test -run '^\$' -bench 'BenchmarkSleepLimit|BenchmarkLoneUser|BenchmarkEchoOverhead|BenchmarkQueue|BenchmarkFuture' -benchmem ./supervisor" >>"$COMMANDS"
  echo "go test -run '^\$' -bench . -benchmem ./ipc ./supervisor/httpapi" >>"$COMMANDS"
  log "G: go test -bench (supervisor, ipc, httpapi)"
  go test -run '^$' -bench 'BenchmarkSleepLimit|BenchmarkLoneUser|BenchmarkEchoOverhead|BenchmarkQueue|BenchmarkFuture' -benchmem ./supervisor >"$OUT/G-supervisor.txt" 2>&1 || log "supervisor benchmarks failed: see $OUT/G-supervisor.txt"
  go test -run '^$' -bench . -benchmem ./ipc ./supervisor/httpapi >"$OUT/G-micro.txt" 2>&1 || log "micro-benchmarks failed: see $OUT/G-micro.txt"
}

# P: CPU profiles of the HTTP path (handler, supervisor, net/http under
# parallel load, from the in-process benchmark) and of scenario D's path
# (the supervisor with real worker processes, from the lead's benchmark).
scenario_p() {
  log "P: CPU profiles of the HTTP path and of the Go API path"
  profile httpapi ./supervisor/httpapi BenchmarkSupervisorHTTP
  profile supervisor ./supervisor 'BenchmarkEchoOverhead/workers=2'
  profile_serve
}

# profile_serve keeps a CPU profile of a real `streamer serve`, taken from
# its --pprof address while streamer bench loads it as in scenario E.
profile_serve() {
  local pprof_url load
  start_server "$OUT/P-serve.log" "$STREAMER" serve --model echo --workers 2 --listen 127.0.0.1:0 --pprof 127.0.0.1:0
  pprof_url=$(sed -n 's/.*pprof=\(http:[^ ]*\).*/\1/p' "$OUT/P-serve.log" | head -n 1)
  echo "streamer serve --model echo --workers 2 --pprof ADDR; streamer bench --target URL --concurrency 128 --duration 14s --warmup 2s; curl ADDR/debug/pprof/profile?seconds=10 from the 3rd second" >>"$COMMANDS"
  "$STREAMER" bench --target "$server_url" --concurrency 128 --duration 14s --warmup 2s --json >"$OUT/P-serve-load.json" 2>/dev/null &
  load=$!
  sleep 3
  curl -sf -o "$OUT/P-serve.prof" "${pprof_url}profile?seconds=10" || log "no profile from $pprof_url"
  wait "$load" || true
  stop_server "$server_pid"
  go tool pprof -top -cum -nodecount 40 "$STREAMER" "$OUT/P-serve.prof" >"$OUT/P-serve-top-cum.txt" 2>/dev/null || true
  go tool pprof -top -nodecount 25 "$STREAMER" "$OUT/P-serve.prof" >"$OUT/P-serve-top-flat.txt" 2>/dev/null || true
}

# profile NAME PACKAGE BENCHMARK runs one benchmark for 5s under the CPU
# profiler and keeps the profile and its top functions as P-NAME-*.
profile() {
  local name=$1 pkg=$2 bench=$3
  echo "go test -run '^\$' -bench '$bench' -benchtime 5s -cpuprofile P-$name.prof $pkg" >>"$COMMANDS"
  go test -c -o "$OUT/$name.test" "$pkg"
  (cd "$pkg" && "$OUT/$name.test" -test.run '^$' -test.bench "$bench" -test.benchtime 5s -test.cpuprofile "$OUT/P-$name.prof") >"$OUT/P-$name-bench.txt" 2>&1
  go tool pprof -top -cum -nodecount 40 "$OUT/$name.test" "$OUT/P-$name.prof" >"$OUT/P-$name-top-cum.txt" 2>/dev/null
  go tool pprof -top -nodecount 25 "$OUT/$name.test" "$OUT/P-$name.prof" >"$OUT/P-$name-top-flat.txt" 2>/dev/null
}

main() {
  log "results in $OUT"
  machine
  go build -o "$STREAMER" ./cmd/streamer
  # The plotter of `streamer bench --plot`, found next to streamer.
  go build -o "$OUT/streamer-bench" ./cmd/streamer-bench
  go build -o "$BARE" ./examples/wrk/bare
  : >"$COMMANDS"
  : >"$OUT/notes.txt"
  {
    echo "| scenario | what | measured | target | margin (≥ 1 meets it) | verdict |"
    echo "|---|---|---|---|---|---|"
  } >"$SUMMARY"
  { wants A || wants B; } && calibrate
  wants A && scenario_a
  wants B && scenario_b
  wants C && scenario_c
  wants D && scenario_d
  wants M && scenario_m
  wants E && scenario_e
  wants F && scenario_f
  wants G && scenario_g
  wants P && scenario_p
  echo "load at end:  $(cut -d' ' -f1-3 /proc/loadavg)" >>"$OUT/machine.txt"
  echo
  cat "$OUT/machine.txt"
  echo
  cat "$SUMMARY"
  echo
  cat "$OUT/notes.txt"
  echo
  echo "commands: $COMMANDS"
  echo "everything: $OUT"
}

main
