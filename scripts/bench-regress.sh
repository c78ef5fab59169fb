#!/usr/bin/env bash
# bench-regress.sh: the single-like write path of this working tree against
# older commits, and against Redis, in one interleaved run. Run it before
# and after every change to the write path.
#
# Every contestant serves single `PUT /v1/likes/hot/<new user>` requests
# from wrk (50 connections), one at a time, on a fresh data directory with
# fsync on. The server is pinned to SERVER_CPUS, wrk to CLIENT_CPUS. The
# contestants take turns within a round, starting one later in every
# round, so that a machine that slows down mid-run slows all of them. Each
# round's figures are printed as they come, then per contestant the
# median, the worst round, the worst round against the median and the
# ratio to the working tree: a run that collapses shows as a collapse,
# not as an average.
#
# Contestants:
#   head         this working tree, built now; HEAD_FLAGS are passed to
#                tallyd serve (e.g. --windows "" to turn a feature off)
#   <commit>     each commit of BASE, built in a temporary worktree
#   head-off     (VARIANTS=off) the working tree with every per-like
#                feature off: windows, event log, like lists, uniques
#                windows (what the defaults cost)
#   head-p1      (VARIANTS=p1) the working tree with --min-procs 1: one
#                Go scheduler when pinned to one core (what min_procs buys)
#   head-lists   (VARIANTS=lists) the working tree with --like-lists=false
#   head-log     (VARIANTS=log) the working tree with --event-log=false
#   head-nats    (VARIANTS=nats) the working tree as every deployment runs
#                it: `tallyd local --regions us`, one replica attached to
#                its embedded NATS server (deltas, the event log's
#                JetStream stream), the whole process on SERVER_CPUS
#   head-one     (VARIANTS=forwarded) `tallyd local --regions us`, one
#                replica attached to NATS, likes of 1,000 items (not one
#                hot item), the baseline of head-sharded
#   head-sharded (VARIANTS=forwarded) `tallyd local --regions us
#                --replicas 3 --copies 2`, every like sent to us-1, likes
#                of 1,000 items: a third of them forwarded to a holder
#                (two copies: 0.5x head-one is the ideal)
#   head-reads   (VARIANTS=reads) `tallyd local --regions us` (attached
#                to NATS) answering `GET /v1/likes/item<0..999>` (each
#                item liked once before the round): reads, not likes;
#                its figures are reads/s and CPU per read
#   redis-get    (VARIANTS=reads, PEER=redis) Redis's GET of 1,000
#                counters (redis-benchmark -r 1000), the read beside it
#   redis        (PEER=redis) Redis with appendfsync always running the
#                like-with-dedup Lua script (SADD, then INCR if added), by
#                redis-benchmark with the same connection count
#
# Settings (environment; `make bench-regress BASE=abc123` works too):
#   BASE          commits to compare with, space-separated   (693822d)
#   ROUNDS        rounds                                     (5)
#   DURATION      seconds per contestant and round           (10)
#   CONNS         connections (wrk) or clients (Redis)       (50)
#   SERVER_CPUS   CPUs the servers are pinned to             (0)
#   CLIENT_CPUS   CPUs the load generators are pinned to     (1)
#   VARIANTS      any of off, p1, lists, log, nats, forwarded,
#                 reads                                      ()
#   PEER          "redis" adds Redis                         (redis)
#   HEAD_FLAGS    extra flags for the working tree's server  ()
#   SERVE         "local" runs the working tree and every BASE
#                 commit as head-nats does (attached to NATS), for
#                 an old/new comparison of that path; "sharded"
#                 runs them all as head-sharded does (a third of
#                 the likes forwarded); not with VARIANTS or
#                 HEAD_FLAGS                                 (serve)
#   CSV           every round's figures                      (bin/bench-regress/rounds.csv)
# GOMAXPROCS, if set, reaches every tallyd. Installs wrk, redis-server and
# redis-tools with apt-get if missing.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/lib/bench-common.sh
source scripts/lib/bench-common.sh

BASE=${BASE-693822d}
ROUNDS=${ROUNDS:-5}
DURATION=${DURATION:-10}
CONNS=${CONNS:-50}
SERVER_CPUS=${SERVER_CPUS:-0}
CLIENT_CPUS=${CLIENT_CPUS:-1}
VARIANTS=${VARIANTS:-}
PEER=${PEER-redis}
HEAD_FLAGS=${HEAD_FLAGS:-}
SERVE=${SERVE:-serve}
LOGDIR=bin/bench-regress
CSV=${CSV:-$LOGDIR/rounds.csv}

die() {
	echo "bench-regress: $*" >&2
	exit 1
}
say() { echo "bench-regress: $(date +%T) $*" >&2; }

[[ $ROUNDS =~ ^[0-9]+$ && $ROUNDS -ge 1 ]] || die "ROUNDS: want a positive integer, got $ROUNDS"
[[ $DURATION =~ ^[0-9]+$ && $DURATION -ge 1 ]] || die "DURATION: want whole seconds, got $DURATION"
[[ $CONNS =~ ^[0-9]+$ && $CONNS -ge 1 ]] || die "CONNS: want a positive integer, got $CONNS"
[[ $SERVE == serve || $SERVE == local || $SERVE == sharded ]] || die "SERVE: want serve, local or sharded, got $SERVE"
[[ $SERVE == serve || -z $VARIANTS$HEAD_FLAGS ]] || die "SERVE=local takes neither VARIANTS nor HEAD_FLAGS"
# SERVE=local: every tally contestant starts as `tallyd local` (run_tally).
base_flags=
[[ $SERVE == local ]] && base_flags=@local
# SERVE=sharded: every tally contestant starts as head-sharded does.
[[ $SERVE == sharded ]] && base_flags="@local3 @items"

mkdir -p "$LOGDIR"
LOGDIR=$(cd "$LOGDIR" && pwd)
WORK=$(mktemp -d "${TMPDIR:-/tmp}/bench-regress.XXXXXX")
server_pid=
cleanup() {
	[[ -n $server_pid ]] && kill "$server_pid" 2>/dev/null && wait "$server_pid" 2>/dev/null
	git worktree prune 2>/dev/null || true
	rm -rf "$WORK"
}
trap cleanup EXIT

pkgs=()
command -v wrk >/dev/null || pkgs+=(wrk)
if [[ $PEER == redis ]]; then
	command -v redis-server >/dev/null || pkgs+=(redis-server)
	{ command -v redis-benchmark && command -v redis-cli; } >/dev/null || pkgs+=(redis-tools)
fi
apt_install "${pkgs[@]}"

# ---- builds -------------------------------------------------------------

declare -A bin flags
contestants=()
say "building the working tree"
go build -o "$WORK/head/tallyd" ./cmd/tallyd
contestants+=(head)
bin[head]=$WORK/head/tallyd
flags[head]=${HEAD_FLAGS:-$base_flags}
# The working tree's variants: VARIANTS word, contestant, extra flags.
while read -r word name extra; do
	[[ " $VARIANTS " == *" $word "* ]] || continue
	contestants+=("$name")
	bin[$name]=$WORK/head/tallyd
	flags[$name]="$HEAD_FLAGS $extra"
done <<-'VARIANTS'
	off head-off --windows= --event-log=false --like-lists=false --uniques-windows=
	p1 head-p1 --min-procs 1
	lists head-lists --like-lists=false
	log head-log --event-log=false
	nats head-nats @local
	forwarded head-one @local @items
	forwarded head-sharded @local3 @items
	reads head-reads @local @reads
VARIANTS
for c in $BASE; do
	sha=$(git rev-parse --short "$c^{commit}") || die "BASE: $c is not a commit"
	say "building $sha"
	git worktree add --quiet --detach "$WORK/src-$sha" "$sha"
	(cd "$WORK/src-$sha" && go build -o "$WORK/$sha/tallyd" ./cmd/tallyd) || die "building $sha failed"
	git worktree remove --force "$WORK/src-$sha"
	contestants+=("$sha")
	bin[$sha]=$WORK/$sha/tallyd
	flags[$sha]=$base_flags
done
[[ $PEER == redis ]] && contestants+=(redis)
[[ $PEER == redis && " $VARIANTS " == *" reads "* ]] && contestants+=(redis-get)

# ---- one round of one contestant ----------------------------------------

stop_server() {
	kill "$server_pid" 2>/dev/null || true
	wait "$server_pid" 2>/dev/null || true
	server_pid=
}

# cpu_ticks: the CPU time the server has used so far (user and system, in
# clock ticks, from /proc/PID/stat).
cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$server_pid/stat"; }

# run_tally NAME ROUND: writes "likes_per_sec p99_ms server_cpu_us_per_like"
# to $WORK/result.
run_tally() {
	local name=$1 round=$2 port dir=$WORK/data-$1-$2 out=$LOGDIR/$1.r$2.wrk lua=$WORK/like.lua
	port=$(free_port)
	if [[ ${flags[$name]} == *@local3* ]]; then
		# One region of three replicas, each shard on two; us-1 takes
		# the load, its peers' ports follow it.
		taskset -c "$SERVER_CPUS" "${bin[$name]}" local --regions us --replicas 3 --copies 2 --port "$port" --nats-port 0 \
			--resp-port 0 --dashboard "" --data "$dir" --durability fsync --log-level warn >"$LOGDIR/$name.r$round.log" 2>&1 &
		server_pid=$!
		for p in "$port" $((port + 1)) $((port + 2)); do
			wait_for "$name" "$server_pid" curl -fsS "http://127.0.0.1:$p/readyz"
		done
	elif [[ ${flags[$name]} == *@local* ]]; then
		# One region of one replica with its embedded NATS server; ready
		# once it recovered and accepts writes.
		taskset -c "$SERVER_CPUS" "${bin[$name]}" local --regions us --port "$port" --nats-port 0 --resp-port 0 \
			--dashboard "" --data "$dir" --durability fsync --log-level warn >"$LOGDIR/$name.r$round.log" 2>&1 &
		server_pid=$!
		wait_for "$name" "$server_pid" curl -fsS "http://127.0.0.1:$port/readyz"
	else
		# shellcheck disable=SC2086 # flags[] holds words to split
		taskset -c "$SERVER_CPUS" "${bin[$name]}" serve --listen "127.0.0.1:$port" --data "$dir" \
			--durability fsync --log-level warn ${flags[$name]} >"$LOGDIR/$name.r$round.log" 2>&1 &
		server_pid=$!
		wait_for "$name" "$server_pid" curl -fsS "http://127.0.0.1:$port/healthz"
	fi
	# New users only: a prefix of this contestant and round, then uniform
	# over 10^9 (a repeat is a like that changes nothing, about 1 in 10^4).
	# One hot item, or (@items) one of 1,000.
	local item=hot
	[[ ${flags[$name]} == *@items* ]] && item='item" .. math.random(0, 999) .. "'
	cat >"$lua" <<-EOF
		local n = 0
		function setup(thread) n = n + 1; thread:set("id", n) end
		function init(args) math.randomseed(os.time() * 1000 + id) end
		function request()
		  return wrk.format("PUT", "/v1/likes/$item/$name.r$round." .. math.random(0, 999999999))
		end
	EOF
	if [[ ${flags[$name]} == *@reads* ]]; then
		# Each of the 1,000 items liked once (ten at a time), then reads.
		seq 0 999 | xargs -P 10 -I{} curl -fsS -o /dev/null -X PUT "http://127.0.0.1:$port/v1/likes/item{}/seed" ||
			die "$name: seeding the items failed"
		cat >"$lua" <<-'EOF'
			function request() return wrk.format("GET", "/v1/likes/item" .. math.random(0, 999)) end
		EOF
	fi
	local cpu0 cpu1
	cpu0=$(cpu_ticks)
	taskset -c "$CLIENT_CPUS" wrk -t 1 -c "$CONNS" -d "${DURATION}s" --latency -s "$lua" \
		"http://127.0.0.1:$port" >"$out" 2>&1 || die "wrk failed: see $out"
	cpu1=$(cpu_ticks)
	stop_server
	rm -rf "$dir"
	grep -q 'Non-2xx\|Socket errors' "$out" && say "$name: some requests failed, see $out"
	awk -v ticks=$((cpu1 - cpu0)) -v hz="$(getconf CLK_TCK)" '$1 == "Requests/sec:" { rps = $2 }
		/requests in/ { n = $1 }
		$1 == "99%" { v = $2; u = v; sub(/[0-9.]+/, "", u); sub(/[a-z]+$/, "", v)
			p99 = (u == "us") ? v / 1000 : (u == "s") ? v * 1000 : v }
		END { if (rps == "" || p99 == "" || n == 0) exit 1; printf "%.0f %.2f %.1f\n", rps, p99, ticks / hz * 1e6 / n }' "$out" >"$WORK/result" ||
		die "no figures in $out"
}

# The like with dedup as a Redis user writes it: count the user only if
# SADD added them.
LIKE_LUA="if redis.call('SADD', KEYS[1], ARGV[1]) == 1 then return redis.call('INCR', KEYS[2]) end return tonumber(redis.call('GET', KEYS[2]))"

# run_redis NAME ROUND: Redis with appendfsync always, loaded by
# redis-benchmark: the like script (NAME redis) or GET of 1,000 counters
# (NAME redis-get). Writes "per_sec p99_ms" to $WORK/result.
# redis-benchmark takes a request count, not a time: a short probe sizes
# the run to about DURATION.
run_redis() {
	local name=$1 round=$2 port dir=$WORK/$1-$2 out=$LOGDIR/$1.r$2.csv n rps args
	port=$(free_port)
	mkdir -p "$dir"
	printf '%s\n' "port $port" "bind 127.0.0.1" "dir $dir" "save \"\"" "appendonly yes" \
		"appendfsync always" "logfile $LOGDIR/$name.r$round.log" >"$dir/redis.conf"
	taskset -c "$SERVER_CPUS" redis-server "$dir/redis.conf" &
	server_pid=$!
	wait_for redis "$server_pid" redis-cli -p "$port" ping
	if [[ $name == redis ]]; then
		args=(-r 1000000000 EVALSHA "$(redis-cli -p "$port" SCRIPT LOAD "$LIKE_LUA")" 2 likes:hot count:hot __rand_int__)
	else
		for i in $(seq 0 999); do printf 'INCR key:%012d\n' "$i"; done | redis-cli -p "$port" >/dev/null
		args=(-r 1000 GET key:__rand_int__)
	fi
	bench() {
		taskset -c "$CLIENT_CPUS" redis-benchmark -h 127.0.0.1 -p "$port" -c "$CONNS" -n "$1" --csv "${args[@]}"
	}
	# "test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms","p95_latency_ms","p99_latency_ms",...
	rps=$(bench 40000 | awk -F'"' 'NR == 2 { print int($4) }')
	[[ $rps =~ ^[0-9]+$ && $rps -gt 0 ]] || die "$name probe failed"
	n=$((rps * DURATION))
	bench "$n" >"$out" || die "redis-benchmark failed: see $out"
	redis-cli -p "$port" shutdown nosave >/dev/null 2>&1 || true
	stop_server
	rm -rf "$dir"
	awk -F'"' 'NR == 2 { printf "%.0f %.2f -\n", $4, $14 }' "$out" >"$WORK/result"
}

# ---- the run ------------------------------------------------------------

say "contestants: ${contestants[*]} (tallyd $SERVE); $ROUNDS rounds of $DURATION s; server on CPU $SERVER_CPUS, load on CPU $CLIENT_CPUS; GOMAXPROCS=${GOMAXPROCS:-unset}"
echo "round,contestant,likes_per_sec,p99_ms,server_cpu_us_per_like" >"$CSV"
n=${#contestants[@]}
for round in $(seq "$ROUNDS"); do
	for i in $(seq 0 $((n - 1))); do
		name=${contestants[$(((i + round - 1) % n))]}
		if [[ $name == redis || $name == redis-get ]]; then
			run_redis "$name" "$round"
		else
			run_tally "$name" "$round"
		fi
		read -r rps p99 cpu <"$WORK/result"
		say "round $round $name: $rps likes/s, p99 $p99 ms, server CPU $cpu µs a like"
		echo "$round,$name,$rps,$p99,$cpu" >>"$CSV"
	done
done

# ---- summary ------------------------------------------------------------

echo
printf '%-10s %-40s %9s %9s %7s %10s %8s %10s\n' contestant "likes/s per round" median worst "w/med" "max p99" "x head" "µs CPU/like"
# median FILE: the median of the numbers in FILE, one a line.
median() { sort -n "$1" | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }
awk -F, '$2 == "head" { print $3 }' "$CSV" >"$WORK/head.rps"
head_median=$(median "$WORK/head.rps")
for name in "${contestants[@]}"; do
	awk -F, -v c="$name" '$2 == c { print $3 }' "$CSV" >"$WORK/c.rps"
	rounds=$(paste -sd' ' "$WORK/c.rps")
	med=$(median "$WORK/c.rps")
	worst=$(sort -n "$WORK/c.rps" | head -n 1)
	p99=$(awk -F, -v c="$name" '$2 == c && $4 > p { p = $4 } END { print p + 0 }' "$CSV")
	awk -F, -v c="$name" '$2 == c { print $5 }' "$CSV" >"$WORK/c.cpu"
	cpu=$(median "$WORK/c.cpu") # server CPU per like, median of the rounds ("-" for Redis)
	awk -v c="$name" -v rounds="$rounds" -v med="$med" -v worst="$worst" -v p99="$p99" -v hm="$head_median" -v cpu="$cpu" \
		'BEGIN { printf "%-10s %-40s %9d %9d %6.0f%% %8.2fms %7.2fx %10s\n", c, rounds, med, worst, 100 * worst / med, p99, med / hm, cpu }'
done
echo
[[ " $VARIANTS " == *" reads "* ]] && echo "head-reads and redis-get: reads/s and server CPU per read, not likes"
echo "rounds: $CSV; wrk and redis-benchmark outputs and server logs: $LOGDIR"
