#!/usr/bin/env bash
# bench-resp.sh: tally's RESP front door side by side with Redis, both
# durable: `redis-benchmark` INCR (random counters) and SADD of random
# users to one like set (SADD likes:post <user>), against a `tallyd serve`
# replica (fsync on, its RESP port) and against redis-server with
# `appendonly yes` and `appendfsync always` (each write fsynced before its
# reply, as tally's are).
#
# Each run starts its server afresh in a temporary directory, on free
# loopback ports, and stops it after; every server this script starts is
# stopped on exit, however it exits. Runs are interleaved: in each round
# every target runs at every core setting and pipeline depth, in an order
# rotated from round to round, so that whatever else the machine does
# weighs on both alike. With CORES 1 the server and redis-benchmark are
# pinned to core 0 (`taskset -c 0`) and share it; with 2 they run
# unpinned on every core.
#
# redis-server and redis-benchmark (redis-tools) are installed with
# apt-get if missing (without starting the system-wide Redis).
#
# Settings (environment; `make bench-resp ROUNDS=1` works too):
#   ROUNDS     rounds; medians and the worst round are reported (5)
#   REQUESTS   requests per redis-benchmark run                 (100000)
#   CLIENTS    redis-benchmark connections                      (50)
#   PIPELINES  pipeline depths (-P), space-separated            ("1 16")
#   CORES      core settings, space-separated: 1 (core 0), 2    ("1 2")
#   KEYSPACE   random counters and users are drawn from 0..KEYSPACE-1 (1000000)
#   TALLYD     the tallyd binary                                (bin/tallyd)
#   LOGDIR     every run's output and server logs; rounds.csv and
#              summary.csv, the table printed                   (bin/bench-resp)
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/lib/bench-common.sh
source scripts/lib/bench-common.sh

ROUNDS=${ROUNDS:-5}
REQUESTS=${REQUESTS:-100000}
CLIENTS=${CLIENTS:-50}
PIPELINES=${PIPELINES:-1 16}
CORES=${CORES:-1 2}
KEYSPACE=${KEYSPACE:-1000000}
TALLYD=${TALLYD:-bin/tallyd}
LOGDIR=${LOGDIR:-bin/bench-resp}

die() {
	echo "bench-resp: $*" >&2
	exit 1
}
say() { echo "bench-resp: $(date +%T) $*" >&2; }

posint() { [[ $2 =~ ^[0-9]+$ && $2 -ge 1 ]] || die "$1: want a positive integer, got '$2'"; }
posint ROUNDS "$ROUNDS"
posint REQUESTS "$REQUESTS"
posint CLIENTS "$CLIENTS"
posint KEYSPACE "$KEYSPACE"
for p in $PIPELINES; do posint PIPELINES "$p"; done
for c in $CORES; do [[ $c == 1 || $c == 2 ]] || die "CORES: want 1 and/or 2, got '$c'"; done
[[ -x $TALLYD ]] || die "$TALLYD not found: run 'make build' (or 'make bench-resp', which builds it)"
[[ " $CORES " != *" 1 "* ]] || command -v taskset >/dev/null || die "taskset not found (util-linux): set CORES=2"

mkdir -p "$LOGDIR"
LOGDIR=$(cd "$LOGDIR" && pwd)
rm -f "$LOGDIR"/*.csv "$LOGDIR"/*.log "$LOGDIR"/*.err

pkgs=()
command -v redis-server >/dev/null || pkgs+=(redis-server)
{ command -v redis-benchmark && command -v redis-cli; } >/dev/null || pkgs+=(redis-tools)
apt_install "${pkgs[@]}"

# ---- servers, all stopped on exit ---------------------------------------

WORK=$(mktemp -d "${TMPDIR:-/tmp}/bench-resp.XXXXXX")
server_pid= # the server of the run in progress

stop_server() {
	if [[ -n $server_pid ]] && kill -0 "$server_pid" 2>/dev/null; then
		kill -TERM "$server_pid" 2>/dev/null || true
		wait "$server_pid" 2>/dev/null || true
	fi
	server_pid=
}

cleanup() {
	local rc=$?
	stop_server
	rm -rf "$WORK"
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# start_server TARGET CORES NAME: starts a fresh tally replica or Redis;
# sets server_pid and port (the RESP port).
start_server() {
	local target=$1 cores=$2 name=$3 pin=()
	local dir=$WORK/$name
	mkdir -p "$dir"
	[[ $cores == 1 ]] && pin=(taskset -c 0)
	port=$(free_port)
	case $target in
	tally)
		local http
		http=$(free_port)
		"${pin[@]}" "$TALLYD" serve --listen "127.0.0.1:$http" --resp-listen "127.0.0.1:$port" --data "$dir/data" \
			--durability fsync --log-level warn >"$LOGDIR/$name.server.log" 2>&1 &
		;;
	redis)
		"${pin[@]}" redis-server --bind 127.0.0.1 --port "$port" --dir "$dir" --daemonize no --save '' \
			--appendonly yes --appendfsync always >"$LOGDIR/$name.server.log" 2>&1 &
		;;
	esac
	server_pid=$!
	wait_for "$target on port $port (log: $LOGDIR/$name.server.log)" "$server_pid" redis-cli -p "$port" ping
}

# ---- runs ---------------------------------------------------------------

RAW=$LOGDIR/rounds.csv
echo "round,cores,target,test,pipeline,rps,p50_ms,p99_ms" >"$RAW"

# run ROUND CORES TARGET PIPELINE: one server, INCR then SADD against it.
run() {
	local round=$1 cores=$2 target=$3 pipe=$4
	local name=$target.c$cores.P$pipe.r$round pin=() test out
	[[ $cores == 1 ]] && pin=(taskset -c 0)
	start_server "$target" "$cores" "$name"
	for test in incr sadd; do
		out=$LOGDIR/$name.$test.csv
		local cmd=(-t incr)
		[[ $test == sadd ]] && cmd=(SADD likes:post __rand_int__)
		"${pin[@]}" redis-benchmark -h 127.0.0.1 -p "$port" -c "$CLIENTS" -n "$REQUESTS" -P "$pipe" -r "$KEYSPACE" \
			--csv "${cmd[@]}" >"$out" 2>"${out%.csv}.err" || die "redis-benchmark failed: see ${out%.csv}.err"
		# "test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms","p95_latency_ms","p99_latency_ms","max_latency_ms"
		awk -F'","' -v pre="$round,$cores,$target,$test,$pipe" 'NR == 2 { print pre "," $2 "," $5 "," $7 }' "$out" >>"$RAW"
		[[ $(wc -l <"$out") -ge 2 ]] || die "redis-benchmark printed no result: see $out"
	done
	stop_server
}

# The answers must be the commands': a server that answered errors would
# be fast for nothing. One check per target before the rounds.
check() {
	local target=$1 got
	start_server "$target" 2 "check-$target"
	got=$(redis-cli -p "$port" INCRBY views:check 2)$(redis-cli -p "$port" SADD likes:check alice)
	[[ $got == 21 ]] || die "$target answered '$got' to INCRBY views:check 2, SADD likes:check alice; want 2 and 1"
	stop_server
}

say "$(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg)"
say "$("$TALLYD" version), $(redis-server --version | cut -d' ' -f1-3), $(redis-benchmark --version)"
check tally
check redis
targets=(tally redis)
for ((round = 1; round <= ROUNDS; round++)); do
	say "round $round of $ROUNDS"
	for cores in $CORES; do
		for pipe in $PIPELINES; do
			for i in 0 1; do
				target=${targets[$(((i + round) % 2))]} # rotated: neither always runs first
				say "  $target, $cores core(s), -P $pipe"
				run "$round" "$cores" "$target" "$pipe"
			done
		done
	done
done

# ---- report -------------------------------------------------------------

# col CORES TARGET TEST PIPELINE FIELD: one field of the matching runs.
col() {
	awk -F, -v c="$1" -v t="$2" -v s="$3" -v p="$4" -v f="$5" \
		'$2 == c && $3 == t && $4 == s && $5 == p { print $f }' "$RAW"
}

SUMMARY=$LOGDIR/summary.csv
echo "cores,target,test,pipeline,rounds,rps_median,rps_worst,p50_ms_median,p99_ms_median,p99_ms_worst" >"$SUMMARY"
for cores in $CORES; do
	for pipe in $PIPELINES; do
		for test in incr sadd; do
			for target in tally redis; do
				k=("$cores" "$target" "$test" "$pipe")
				printf '%s,%s,%s,%s,%s,%s,%s,%s,%s,%s\n' "${k[@]}" "$(col "${k[@]}" 6 | wc -l)" \
					"$(col "${k[@]}" 6 | median)" "$(col "${k[@]}" 6 | sort -g | head -n 1)" \
					"$(col "${k[@]}" 7 | median)" "$(col "${k[@]}" 8 | median)" "$(col "${k[@]}" 8 | sort -g | tail -n 1)" >>"$SUMMARY"
			done
		done
	done
done
echo
column -t -s, "$SUMMARY"
echo
say "every run: $RAW; medians and the worst round (lowest rps, highest p99): $SUMMARY"
