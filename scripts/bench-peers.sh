#!/usr/bin/env bash
# bench-peers.sh: tally's durable like path side by side with Redis and
# PostgreSQL on this machine, at the same concurrency levels and for the
# same time per level. It prints one table and writes a CSV and a PNG plot;
# docs/benchmarks.md ("Side by side with Redis and PostgreSQL") records the
# figures and docs/performance.md explains them.
#
# Redis, PostgreSQL, wrk and gnuplot are installed with apt-get if missing.
# The servers run as throwaway instances on loopback, on free ports, in a
# temporary directory; every server this script starts is stopped on exit,
# however it exits. Nothing here touches a system-wide Redis or PostgreSQL.
#
# Settings (environment; `make bench-peers LEVELS=1,16` works too):
#   LEVELS     concurrency levels, comma-separated          (1,16,64,256)
#   DURATION   seconds per level and workload                (10)
#   ROUNDS     times every level is run; medians are reported (3)
#   USERS      random users are drawn from 0..USERS-1        (100000000)
#   TALLYD     the tallyd binary                             (bin/tallyd)
#   CSV, PLOT  where the results go      (docs/bench-peers.csv, .png)
#   LOGDIR     raw outputs of every run                      (bin/bench-peers)
#   WORKLOADS  a subset to run, space-separated              (all)
#   REPLOT=1   only redraw PLOT from an existing CSV
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/lib/bench-common.sh
source scripts/lib/bench-common.sh

LEVELS=${LEVELS:-1,16,64,256}
DURATION=${DURATION:-10}
ROUNDS=${ROUNDS:-3}
USERS=${USERS:-100000000}
TALLYD=${TALLYD:-bin/tallyd}
CSV=${CSV:-docs/bench-peers.csv}
PLOT=${PLOT:-docs/bench-peers.png}
LOGDIR=${LOGDIR:-bin/bench-peers}
ALL_WORKLOADS="tally-like tally-like-serve tally-like-wrk redis-incr redis-lua redis-lua-aof pg-update pg-like"
WORKLOADS=${WORKLOADS:-$ALL_WORKLOADS}

IFS=, read -r -a levels <<<"$LEVELS"

die() {
	echo "bench-peers: $*" >&2
	exit 1
}
say() { echo "bench-peers: $(date +%T) $*" >&2; }

for w in $WORKLOADS; do
	[[ " $ALL_WORKLOADS " == *" $w "* ]] || die "unknown workload $w (want some of: $ALL_WORKLOADS)"
done
for c in "${levels[@]}"; do
	[[ $c =~ ^[0-9]+$ && $c -ge 1 && $c -le 290 ]] || die "LEVELS: $c is not a level in 1..290 (PostgreSQL gets max_connections = 300)"
done
[[ $DURATION =~ ^[0-9]+$ && $DURATION -ge 1 ]] || die "DURATION: want whole seconds, got $DURATION"
[[ $ROUNDS =~ ^[0-9]+$ && $ROUNDS -ge 1 ]] || die "ROUNDS: want a positive integer, got $ROUNDS"
[[ $USERS =~ ^[0-9]+$ && $USERS -ge 1 ]] || die "USERS: want a positive integer, got $USERS"
[[ -n ${REPLOT:-} || -x $TALLYD ]] || die "$TALLYD not found: run 'make build' (or 'make bench-peers', which builds it)"

declare -A label=(
	[tally-like]="tally PUT like, fsync (in-process generator)"
	[tally-like-serve]="tally PUT like, fsync (tallyd serve process)"
	[tally-like-wrk]="tally PUT like, fsync (tallyd serve, wrk C client)"
	[redis-incr]="Redis INCR hot, no persistence"
	[redis-lua]="Redis like Lua SADD+INCR, no persistence"
	[redis-lua-aof]="Redis like Lua, AOF fsync always"
	[pg-update]="PostgreSQL hot-row UPDATE, sync commit"
	[pg-like]="PostgreSQL like INSERT ON CONFLICT + UPDATE, sync commit"
)

# ---- plot ---------------------------------------------------------------

# plot draws the throughput of each workload in $CSV against concurrency.
plot() {
	local dir plots=() w term xtics lo hi rounds seconds
	dir=$(mktemp -d "${TMPDIR:-/tmp}/bench-peers-plot.XXXXXX")
	for w in $ALL_WORKLOADS; do
		# concurrency, median, min, max
		awk -F, -v w="$w" '$1 == w { print $2, $3, $4, $5 }' "$CSV" >"$dir/$w.dat"
		[[ -s $dir/$w.dat ]] || continue
		plots+=("'$dir/$w.dat' using 1:2:3:4 with yerrorlines lw 2 title '${label[$w]}'")
	done
	((${#plots[@]} > 0)) || die "nothing to plot in $CSV"
	IFS=, read -r _ _ _ _ _ _ _ _ rounds seconds < <(sed -n 2p "$CSV")
	xtics=$(cut -d, -f2 "$CSV" | tail -n +2 | sort -un | paste -sd, -)
	lo=${xtics%%,*}
	hi=${xtics##*,}
	term="pngcairo size 1200,560 font 'sans,10'"
	gnuplot -e "set terminal $term" 2>/dev/null </dev/null || term="png size 1200,560"
	gnuplot <<-EOF
		set terminal $term
		set output '$PLOT'
		set title "Throughput, $(nproc) cores shared with the load generator: median of $rounds x ${seconds}s, bars min-max"
		set logscale xy
		set xlabel 'concurrent connections (clients)'
		set ylabel 'operations per second'
		set xtics ($xtics)
		set xrange [$lo / 1.4 : $hi * 1.4]
		set format y '%.0s%c'
		set grid
		set key outside right top Left reverse
		plot $(
		IFS=,
		echo "${plots[*]}"
	)
	EOF
	rm -rf "$dir"
	say "plot: $PLOT"
}

# ---- packages -----------------------------------------------------------


install_missing() {
	local pkgs=()
	command -v redis-server >/dev/null || pkgs+=(redis-server)
	{ command -v redis-benchmark && command -v redis-cli; } >/dev/null || pkgs+=(redis-tools)
	pg_bin >/dev/null || pkgs+=(postgresql)
	command -v gnuplot >/dev/null || pkgs+=(gnuplot-nox)
	command -v wrk >/dev/null || pkgs+=(wrk)
	apt_install "${pkgs[@]}"
}

mkdir -p "$LOGDIR" "$(dirname "$CSV")" "$(dirname "$PLOT")"
if [[ -n ${REPLOT:-} ]]; then
	plot
	exit 0
fi
LOGDIR=$(cd "$LOGDIR" && pwd) # servers started elsewhere write their logs here
rm -f "$LOGDIR"/*.out "$LOGDIR"/*.csv "$LOGDIR"/*.err "$LOGDIR"/*.log
install_missing
PGBIN=$(pg_bin) || die "PostgreSQL server binaries not found under /usr/lib/postgresql/*/bin"

# ---- throwaway servers, all stopped on exit -----------------------------

WORK=$(mktemp -d "${TMPDIR:-/tmp}/bench-peers.XXXXXX")
chmod 711 "$WORK" # the postgres user must reach its data directory
server_pids=()    # Redis and tallyd serve: stopped by pid
tally_port= # of tallyd serve, once started

cleanup() {
	local rc=$?
	local pid
	for pid in "${server_pids[@]}"; do
		if kill -0 "$pid" 2>/dev/null; then
			kill -TERM "$pid" 2>/dev/null || true
			wait "$pid" 2>/dev/null || true
		fi
	done
	pg_stop
	rm -rf "$WORK"
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# stop_server stops one server started in the background and forgets it.
stop_server() {
	local pid=$1 keep=() p
	kill -TERM "$pid" 2>/dev/null || true
	wait "$pid" 2>/dev/null || true
	for p in "${server_pids[@]}"; do [[ $p == "$pid" ]] || keep+=("$p"); done
	server_pids=("${keep[@]}")
}




# ---- results ------------------------------------------------------------

RAW=$WORK/rounds.csv # round,workload,concurrency,ops_per_sec,p50_ms,p99_ms
: >"$RAW"


# ---- tally --------------------------------------------------------------

# start_tally_serve starts a separate `tallyd serve` process, loaded over
# --url as Redis and PostgreSQL are loaded: the server's and the generator's
# heaps and schedulers are apart (they still share the cores).
start_tally_serve() {
	local pid
	tally_port=$(free_port)
	"$TALLYD" serve --listen "127.0.0.1:$tally_port" --data "$WORK/tally" --durability fsync --log-level warn \
		>"$LOGDIR/tallyd-serve.log" 2>&1 &
	pid=$!
	server_pids+=("$pid")
	wait_for "tallyd serve on port $tally_port (log: $LOGDIR/tallyd-serve.log)" "$pid" \
		curl -fsS "http://127.0.0.1:$tally_port/readyz"
	say "tally-like-serve, tally-like-wrk: tallyd serve on :$tally_port"
}

# tally_level WORKLOAD CONC ROUND: one level of `tallyd bench likes`. The
# in-process workload starts a fresh replica each time, as Redis keys and
# PostgreSQL tables are emptied before each level.
tally_level() {
	local workload=$1 conc=$2 round=$3
	local out=$LOGDIR/$workload.c$conc.r$round.csv url=()
	[[ $workload == tally-like-serve ]] && url=(--url "http://127.0.0.1:$tally_port")
	"$TALLYD" bench likes "${url[@]}" --concurrency "$conc" --duration "${DURATION}s" --users "$USERS" \
		--format csv >"$out" 2>"${out%.csv}.err" || die "tallyd bench likes failed: see ${out%.csv}.err"
	# concurrency,requests,errors,counted,seconds,ok_per_sec,p50_ms,p99_ms,...
	awk -F, -v r="$round" -v w="$workload" 'NR > 1 { if ($3 != 0) bad = 1; print r "," w "," $1 "," $6 "," $7 "," $8 }
		END { exit bad }' "$out" >>"$RAW" ||
		say "$workload: some requests failed, see $out"
}

# wrk_level WORKLOAD CONC ROUND: the same likes against tallyd serve, sent
# by wrk, a C load generator like redis-benchmark and pgbench, so that the
# client's cost is comparable; the difference from tally-like-serve is
# what the Go load generator costs. Throughput only: wrk 4.1's latency
# figures here contradict its own counts (with one connection, a mean of
# 5.5 ms over 5,234 requests in 3.0 s), so they are recorded as "-".
wrk_level() {
	local workload=$1 conc=$2 round=$3
	local out=$LOGDIR/$workload.c$conc.r$round.out lua=$WORK/wrk.c$conc.r$round.lua
	# Users like tallyd bench likes --users: uniform over USERS, under a
	# prefix of this level so levels do not share users.
	cat >"$lua" <<-EOF
		local n = 0
		function setup(thread) n = n + 1; thread:set("id", n) end
		function init(args) math.randomseed(os.time() * 1000 + id) end
		function request()
		  return wrk.format("PUT", "/v1/likes/hot/wrk.c$conc.r$round." .. math.random(0, $((USERS - 1))))
		end
	EOF
	wrk -t $((conc < 2 ? conc : 2)) -c "$conc" -d "${DURATION}s" --latency -s "$lua" \
		"http://127.0.0.1:$tally_port" >"$out" 2>&1 || die "wrk failed: see $out"
	grep -q 'Non-2xx\|Socket errors' "$out" && say "$workload: some requests failed, see $out"
	awk -v r="$round" -v w="$workload" -v c="$conc" '
		$1 == "Requests/sec:" { rps = $2 }
		END {
			if (rps == "") exit 1
			printf "%s,%s,%s,%s,-,-\n", r, w, c, rps
		}' "$out" >>"$RAW" || die "no Requests/sec in $out"
}

# ---- Redis --------------------------------------------------------------

# The like with dedup: count the user only if SADD added them. The script
# is loaded once and called by sha, as a client library would.
LIKE_LUA="if redis.call('SADD', KEYS[1], ARGV[1]) == 1 then return redis.call('INCR', KEYS[2]) end return tonumber(redis.call('GET', KEYS[2]))"

declare -A redis_port_of redis_sha_of

# start_redis WORKLOAD [config lines...]: a throwaway redis-server for one
# workload, with the like script loaded.
start_redis() {
	local name=$1 pid port sha
	shift
	local dir=$WORK/$name
	mkdir -p "$dir"
	port=$(free_port)
	{
		echo "bind 127.0.0.1"
		echo "port $port"
		echo "dir $dir"
		echo "daemonize no"
		echo "logfile $LOGDIR/$name.redis.log"
		echo 'save ""'
		printf '%s\n' "$@"
	} >"$dir/redis.conf"
	redis-server "$dir/redis.conf" &
	pid=$!
	server_pids+=("$pid")
	wait_for "redis-server $name on port $port (log: $LOGDIR/$name.redis.log)" "$pid" \
		redis-cli -p "$port" ping
	sha=$(redis-cli -p "$port" script load "$LIKE_LUA")
	[[ $sha =~ ^[0-9a-f]{40}$ ]] || die "SCRIPT LOAD answered $sha"
	redis_port_of[$name]=$port
	redis_sha_of[$name]=$sha
	say "$name: redis-server on :$port"
}

# redis_bench PORT CONC N COMMAND...: one redis-benchmark run from empty
# keys, its csv on stdout.
redis_bench() {
	local port=$1 conc=$2 n=$3
	shift 3
	redis-cli -p "$port" del likes:hot count:hot hot >/dev/null
	redis-benchmark -h 127.0.0.1 -p "$port" -c "$conc" -n "$n" -r "$USERS" --csv "$@"
}

# redis_level WORKLOAD CONC ROUND: one level of about DURATION seconds.
# redis-benchmark takes a request count, not a time, so probes of growing
# size find the rate first; a probe shorter than a second mostly measures
# connection set-up and warm-up.
redis_level() {
	local workload=$1 conc=$2 round=$3
	local port=${redis_port_of[$workload]} cmd
	local out=$LOGDIR/$workload.c$conc.r$round.out n=$((conc * 20 + 2000)) t0 t1 rps
	if [[ $workload == redis-incr ]]; then
		cmd=(INCR hot)
	else
		cmd=(EVALSHA "${redis_sha_of[$workload]}" 2 likes:hot count:hot __rand_int__)
	fi
	while :; do
		t0=$(date +%s%N)
		rps=$(redis_bench "$port" "$conc" "$n" "${cmd[@]}" | tail -n 1 | tr -d '"' | awk -F, '{ print int($(NF-6)) }')
		t1=$(date +%s%N)
		[[ $rps =~ ^[0-9]+$ && $rps -gt 0 ]] || die "$workload: redis-benchmark probe failed"
		(((t1 - t0) >= 1000000000)) && break
		n=$((n * 4))
	done
	n=$((rps * DURATION))
	t0=$(date +%s%N)
	redis_bench "$port" "$conc" "$n" "${cmd[@]}" >"$out" || die "redis-benchmark failed: see $out"
	t1=$(date +%s%N)
	echo "requests $n in $(((t1 - t0) / 1000000)) ms" >>"$out"
	# "test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms","p95_latency_ms","p99_latency_ms","max_latency_ms"
	grep '^"' "$out" | tail -n 1 | tr -d '"' | awk -F, -v r="$round" -v w="$workload" -v c="$conc" \
		'{ printf "%s,%s,%s,%s,%s,%s\n", r, w, c, $(NF-6), $(NF-3), $(NF-1) }' >>"$RAW"
}

# ---- PostgreSQL ---------------------------------------------------------

start_pg() {
	pg_start
	psql_q <<-'EOF'
		CREATE TABLE counters (id text PRIMARY KEY, n bigint NOT NULL);
		INSERT INTO counters VALUES ('hot', 0);
		CREATE TABLE likes (item text, usr text, PRIMARY KEY (item, usr));
	EOF
	cat >"$WORK/pg-update.sql" <<-'EOF'
		UPDATE counters SET n = n + 1 WHERE id = 'hot';
	EOF
	# One statement, so one transaction and one commit: the counter moves
	# only if the like was new.
	cat >"$WORK/pg-like.sql" <<-EOF
		\\set u random(0, $((USERS - 1)))
		WITH ins AS (INSERT INTO likes (item, usr) VALUES ('hot', :u) ON CONFLICT DO NOTHING RETURNING 1)
		UPDATE counters SET n = n + 1 WHERE id = 'hot' AND EXISTS (SELECT FROM ins);
	EOF
	say "pg-*: PostgreSQL on :$pg_port ($PGBIN)"
}


# pg_level WORKLOAD CONC ROUND: one pgbench run; p50/p99 from its
# per-transaction log (pgbench itself prints only mean and stddev).
pg_level() {
	local workload=$1 conc=$2 round=$3
	local out=$LOGDIR/$workload.c$conc.r$round.out logs=$WORK/pglog.$workload.$conc.$round
	mkdir -p "$logs"
	# Every level starts alike: empty likes, and no checkpoint left to land
	# in the middle of the run.
	psql_q -c "TRUNCATE likes" -c "UPDATE counters SET n = 0" -c "CHECKPOINT"
	pgbench -h 127.0.0.1 -p "$pg_port" -U postgres -n -M prepared -c "$conc" -j $((conc < 2 ? conc : 2)) \
		-T "$DURATION" -f "$WORK/$workload.sql" -l --log-prefix="$logs/tx" postgres >"$out" 2>&1 ||
		die "pgbench failed: see $out"
	local tps
	tps=$(sed -n 's/^tps = \([0-9.]*\) (without initial connection time)$/\1/p' "$out")
	[[ -n $tps ]] || die "no tps in $out"
	# Log lines: client_id transaction_no latency_us script_no epoch epoch_us.
	cat "$logs"/tx.* | awk '{ print $3 }' | sort -n | awk -v r="$round" -v w="$workload" -v c="$conc" -v tps="$tps" '
		{ v[NR] = $1 }
		END {
			if (NR == 0) exit 1
			i50 = int(NR * 0.50); if (i50 < NR * 0.50) i50++
			i99 = int(NR * 0.99); if (i99 < NR * 0.99) i99++
			printf "%s,%s,%s,%.3f,%.3f,%.3f\n", r, w, c, tps, v[i50] / 1000, v[i99] / 1000
		}' >>"$RAW" || die "no transactions logged by pgbench: see $out"
	rm -rf "$logs"
}

# ---- run ----------------------------------------------------------------

load_start=$(cut -d' ' -f1-3 /proc/loadavg)
say "$(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), load average $load_start"
say "$(redis-server --version | cut -d' ' -f1-3), $("$PGBIN/postgres" --version), $("$TALLYD" version)"
for w in $WORKLOADS; do
	case $w in
	tally-like-serve | tally-like-wrk) [[ -n $tally_port ]] || start_tally_serve ;;
	redis-lua-aof) start_redis "$w" "appendonly yes" "appendfsync always" ;;
	redis-*) start_redis "$w" "appendonly no" ;;
	pg-*) [[ -n $pg_data ]] || start_pg ;;
	esac
done
# Levels outside, workloads inside: on a machine that others share, the
# systems compared at one level then run within the same minute or two,
# so a burst of someone else's work lands on one level of every system
# rather than on every level of one system.
for ((round = 1; round <= ROUNDS; round++)); do
	for c in "${levels[@]}"; do
		say "round $round of $ROUNDS, concurrency $c"
		for w in $WORKLOADS; do
			case $w in
			tally-like-wrk) wrk_level "$w" "$c" "$round" ;;
			tally-*) tally_level "$w" "$c" "$round" ;;
			redis-*) redis_level "$w" "$c" "$round" ;;
			pg-*) pg_level "$w" "$c" "$round" ;;
			esac
		done
	done
done
for pid in "${server_pids[@]}"; do stop_server "$pid"; done
if [[ -n $pg_data ]]; then
	as_pg "$PGBIN/pg_ctl" -D "$pg_data" -m fast -w stop >/dev/null
	pg_data=
fi
load_end=$(cut -d' ' -f1-3 /proc/loadavg)

# ---- report -------------------------------------------------------------


# Per workload and level: the medians over the rounds of ops/s, p50 and p99
# (each on its own), and the range of ops/s. The ratio is tally's
# in-process median over the row's median at the same level: above 1,
# tally did more.
SUMMARY=$WORK/summary.csv
for w in $WORKLOADS; do
	for c in "${levels[@]}"; do
		rows=$(awk -F, -v w="$w" -v c="$c" '$2 == w && $3 == c' "$RAW")
		[[ -n $rows ]] || continue
		printf '%s,%s,%s,%s,%s,%s,%s\n' "$w" "$c" \
			"$(cut -d, -f4 <<<"$rows" | median)" "$(cut -d, -f4 <<<"$rows" | sort -g | head -n 1)" \
			"$(cut -d, -f4 <<<"$rows" | sort -g | tail -n 1)" \
			"$(cut -d, -f5 <<<"$rows" | median)" "$(cut -d, -f6 <<<"$rows" | median)"
	done
done >"$SUMMARY"
{
	echo "workload,concurrency,ops_per_sec,ops_min,ops_max,p50_ms,p99_ms,tally_over_peer,rounds,seconds"
	awk -F, -v rounds="$ROUNDS" -v secs="$DURATION" '
		NR == FNR { if ($1 == "tally-like") t[$2] = $3; next }
		{
			r = "-"
			if ($1 !~ /^tally-/ && ($2 in t) && $3 > 0) r = sprintf("%.2f", t[$2] / $3)
			p50 = $6 == "-" ? "-" : sprintf("%.2f", $6)
			p99 = $7 == "-" ? "-" : sprintf("%.2f", $7)
			printf "%s,%s,%.0f,%.0f,%.0f,%s,%s,%s,%s,%s\n", $1, $2, $3, $4, $5, p50, p99, r, rounds, secs
		}' "$SUMMARY" "$SUMMARY"
} >"$CSV"
{
	echo "round,workload,concurrency,ops_per_sec,p50_ms,p99_ms"
	cat "$RAW"
} >"${CSV%.csv}-rounds.csv"

echo
printf '%-58s %5s %8s %15s %8s %8s %10s\n' "workload (median of $ROUNDS rounds)" conc "ops/s" "ops/s range" "p50 ms" "p99 ms" "tally/peer"
tail -n +2 "$CSV" | while IFS=, read -r w c ops lo hi p50 p99 ratio _; do
	printf '%-58s %5s %8s %15s %8s %8s %10s\n' "${label[$w]}" "$c" "$ops" "$lo-$hi" "$p50" "$p99" "$ratio"
done
cat <<EOF

Load average (1, 5, 15 min) at the start: $load_start; at the end: $load_end. Other work on the
machine shows there; on a shared machine single runs move by 2x or more, hence the rounds and medians.
Fairness: redis-benchmark and pgbench are C clients; tally's load generator is Go (net/http) and,
like them, shares the same $(nproc) cores with the server it loads. In-process, generator and server
also share one Go heap and scheduler.
CSV: $CSV (every round: ${CSV%.csv}-rounds.csv)   raw outputs: $LOGDIR/
EOF

plot
