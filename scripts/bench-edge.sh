#!/usr/bin/env bash
# bench-edge.sh: what the HTTP edge costs, side by side in one run. Every
# case is `tallyd bench likes` or `tallyd bench events` on its own
# in-process replica (fsync on), run with and without what is measured:
#
#   likes   plain   PUT /v1/likes/hot/{new user}, keep-alive, at LEVELS
#           tls     the same over HTTPS (--tls: HTTP/1.1 over TLS, one
#                   kept connection per worker, so steady-state TLS)
#           limit   the same with --limit $LIMIT: the limiter takes a
#                   token on every request and refuses none
#   likes-newconn plain, tls   --keep-alive=false at HS_LEVELS: a new TCP
#                   connection (with --tls, a full handshake) per request
#   events  plain, tls   POST /v1/events, bench events' default: 4
#                   workers x 10,000-event NDJSON batches, mixes incr (one
#                   hot counter) and like (one hot item, new users)
#
# on every core (CORES "2") and pinned to core 0 (CORES "1", `taskset -c
# 0`): load client and replica share the cores. Rounds interleave: in each
# round every case runs once per core setting, in an order rotated from
# round to round, so that whatever else the machine does weighs on the
# variants alike. Each case is compared with plain of the same round
# (change_pct: the median over rounds of variant/plain - 1).
#
# Throughput moves with whatever else runs on the machine; CPU time per
# request much less so. Every run also records cpu_us: the user+system
# time of the whole tallyd process (load client and replica, startup
# included) per request (likes) or per event (events), over all its
# levels or mixes, and cpu_change_pct compares it with plain as above.
#
# The machine may be shared: the load average is logged every 5 s to
# LOGDIR/load.log, and every run records the CPU that other processes
# used while it ran (other_cores: the machine's busy time from /proc/stat
# minus the run's own user+system time, per second of the run).
#
# Settings (environment):
#   LEVELS     likes concurrency levels                   (1,16,64)
#   HS_LEVELS  levels of likes-newconn                    (1,16)
#   DURATION   seconds per level and mix                  (5)
#   ROUNDS     rounds; medians are reported               (3)
#   CORES      core settings, space-separated: 2 (all), 1 (core 0)  ("2 1")
#   LIMIT      the limit of the limit variant             (write=client:1e9)
#   TALLYD     the tallyd binary                          (bin/tallyd)
#   CSV        medians        (docs/bench-edge.csv; every run in
#              docs/bench-edge-rounds.csv)
#   LOGDIR     raw outputs and load.log                   (bin/bench-edge)
set -euo pipefail
cd "$(dirname "$0")/.."

LEVELS=${LEVELS:-1,16,64}
HS_LEVELS=${HS_LEVELS:-1,16}
DURATION=${DURATION:-5}
ROUNDS=${ROUNDS:-3}
CORES=${CORES:-2 1}
LIMIT=${LIMIT:-write=client:1e9}
TALLYD=${TALLYD:-bin/tallyd}
CSV=${CSV:-docs/bench-edge.csv}
LOGDIR=${LOGDIR:-bin/bench-edge}

die() {
	echo "bench-edge: $*" >&2
	exit 1
}
say() { echo "bench-edge: $(date +%T) $*" >&2; }

for l in ${LEVELS//,/ } ${HS_LEVELS//,/ }; do
	[[ $l =~ ^[0-9]+$ && $l -ge 1 ]] || die "LEVELS, HS_LEVELS: $l is not a positive integer"
done
[[ $DURATION =~ ^[0-9]+$ && $DURATION -ge 1 ]] || die "DURATION: want whole seconds, got $DURATION"
[[ $ROUNDS =~ ^[0-9]+$ && $ROUNDS -ge 1 ]] || die "ROUNDS: want a positive integer, got $ROUNDS"
for c in $CORES; do
	[[ $c == 1 || $c == 2 ]] || die "CORES: want 2 and/or 1, got $c"
done
[[ " $CORES " != *" 1 "* ]] || command -v taskset >/dev/null || die "taskset not found (util-linux): set CORES=2"
[[ -x $TALLYD ]] || die "$TALLYD not found: run 'make build'"

# The cases: bench, variant. Every variant of a bench is compared with
# that bench's plain.
CASES=("likes plain" "likes tls" "likes limit" "likes-newconn plain" "likes-newconn tls" "events plain" "events tls")

mkdir -p "$LOGDIR" "$(dirname "$CSV")"
LOGDIR=$(cd "$LOGDIR" && pwd)
rm -f "$LOGDIR"/*.out "$LOGDIR"/*.err "$LOGDIR"/*.time "$LOGDIR"/load.log
RAW=$LOGDIR/rounds.raw # round,cores,bench,variant,level,per_s,p50_ms,p99_ms,other_cores,load1,cpu_us
: >"$RAW"

# ---- the load log, stopped on exit ---------------------------------------

loadlog_pid=
cleanup() {
	local rc=$?
	[[ -n $loadlog_pid ]] && kill "$loadlog_pid" 2>/dev/null
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
while :; do
	echo "$(date +%T) $(cut -d' ' -f1-4 /proc/loadavg)"
	sleep 5
done >"$LOGDIR/load.log" &
loadlog_pid=$!

# busy_ticks prints the machine's busy CPU time so far, in clock ticks
# (every state of /proc/stat's cpu line but idle and iowait).
busy_ticks() { awk '$1 == "cpu" { print $2 + $3 + $4 + $7 + $8 + $9; exit }' /proc/stat; }
HZ=$(getconf CLK_TCK)

# ---- one case -----------------------------------------------------------

# run_case CORES BENCH VARIANT ROUND: one tallyd run; appends its rows.
run_case() {
	local cores=$1 bench=$2 variant=$3 round=$4
	local base=$LOGDIR/$bench.$variant.c$cores.r$round cmd=("$TALLYD") args=()
	[[ $cores == 1 ]] && cmd=(taskset -c 0 "$TALLYD")
	case $bench in
	likes) args=(bench likes --concurrency "$LEVELS" --duration "${DURATION}s" --format csv) ;;
	likes-newconn) args=(bench likes --concurrency "$HS_LEVELS" --duration "${DURATION}s" --format csv --keep-alive=false) ;;
	events) args=(bench events --duration "${DURATION}s") ;;
	esac
	case $variant in
	tls) args+=(--tls) ;;
	limit) args+=(--limit "$LIMIT") ;;
	esac
	local b0 b1 load1 real user sys
	load1=$(cut -d' ' -f1 /proc/loadavg)
	b0=$(busy_ticks)
	local TIMEFORMAT='%3R %3U %3S'
	{ time "${cmd[@]}" "${args[@]}" >"$base.out" 2>"$base.err"; } 2>"$base.time" ||
		die "tallyd ${args[*]} failed: see $base.err"
	b1=$(busy_ticks)
	read -r real user sys <"$base.time"
	local other
	other=$(awk -v b="$((b1 - b0))" -v hz="$HZ" -v r="$real" -v u="$user" -v s="$sys" \
		'BEGIN { o = (b / hz - u - s) / r; printf "%.2f", o < 0 ? 0 : o }')
	local pre="$round,$cores,$bench,$variant" ops cpu
	if [[ $bench == events ]]; then
		# mix requests events errors events/s counted/s p50 p99 max
		ops=$(awk '($1 == "incr" || $1 == "like") && NF == 9 { n += $3 } END { print n + 0 }' "$base.out")
		cpu=$(awk -v u="$user" -v s="$sys" -v n="$ops" 'BEGIN { if (n > 0) printf "%.4f", 1e6 * (u + s) / n; else print 0 }')
		awk -v r="$round" -v c="$cores" -v v="$variant" -v o="$other" -v l="$load1" -v cpu="$cpu" '($1 == "incr" || $1 == "like") && NF == 9 {
			if ($4 != 0) { print "bench-edge: events " v " " $1 ": " $4 " errors" > "/dev/stderr" }
			sub(/ms$/, "", $7); sub(/ms$/, "", $8)
			print r "," c ",events-" $1 "," v ",4," $5 "," $7 "," $8 "," o "," l "," cpu }' "$base.out" >>"$RAW"
	else
		# concurrency,requests,errors,counted,seconds,ok_per_sec,p50_ms,p99_ms,...
		ops=$(awk -F, 'NR > 1 { n += $2 } END { print n + 0 }' "$base.out")
		cpu=$(awk -v u="$user" -v s="$sys" -v n="$ops" 'BEGIN { if (n > 0) printf "%.1f", 1e6 * (u + s) / n; else print 0 }')
		awk -F, -v pre="$pre" -v o="$other" -v l="$load1" -v cpu="$cpu" 'NR > 1 {
			if ($3 != 0) { print "bench-edge: " pre " c" $1 ": " $3 " errors" > "/dev/stderr" }
			print pre "," $1 "," $6 "," $7 "," $8 "," o "," l "," cpu }' "$base.out" >>"$RAW"
	fi
}

# ---- run ----------------------------------------------------------------

commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
[[ -z $(git status --porcelain --untracked-files=no 2>/dev/null) ]] || commit+="+changes"
load_start=$(cut -d' ' -f1-3 /proc/loadavg)
say "$(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), load average $load_start"
say "$("$TALLYD" version), commit $commit"
n=${#CASES[@]}
for ((round = 1; round <= ROUNDS; round++)); do
	for cores in $CORES; do
		say "round $round of $ROUNDS, $cores core(s)"
		for ((i = 0; i < n; i++)); do
			# Rotated by round (and by core setting), so that no variant
			# always runs first or right after another.
			read -r bench variant <<<"${CASES[$(((i + round * 3 + cores) % n))]}"
			say "  $bench $variant"
			run_case "$cores" "$bench" "$variant" "$round"
		done
	done
done
load_end=$(cut -d' ' -f1-3 /proc/loadavg)

# ---- report -------------------------------------------------------------

# median reads numbers, one per line, and prints their median.
median() {
	sort -g | awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

{
	echo "round,cores,bench,variant,level,per_s,p50_ms,p99_ms,other_cores,load1,cpu_us"
	cat "$RAW"
} >"${CSV%.csv}-rounds.csv"

# change COLUMN CORES BENCH VARIANT LEVEL: the median over rounds of the
# change of COLUMN from plain in the same round, in %.
change() {
	awk -F, -v f="$1" -v c="$2" -v b="$3" -v v="$4" -v l="$5" '
		$2 == c && $3 == b && $5 == l && $4 == "plain" { plain[$1] = $f }
		$2 == c && $3 == b && $5 == l && $4 == v { got[$1] = $f }
		END { for (r in got) if (plain[r] > 0) print 100 * (got[r] / plain[r] - 1) }' "$RAW" | median
}

# Per cores, bench, variant and level: medians over the rounds, the range
# of per_s, and the changes from plain.
{
	echo "cores,bench,variant,level,rounds,per_s,per_s_min,per_s_max,change_pct,p50_ms,p99_ms,cpu_us,cpu_change_pct,other_cores_max"
	cut -d, -f2-5 "$RAW" | awk '!seen[$0]++' | while IFS=, read -r cores bench variant level; do
		rows=$(awk -F, -v c="$cores" -v b="$bench" -v v="$variant" -v l="$level" '$2 == c && $3 == b && $4 == v && $5 == l' "$RAW")
		printf '%s,%s,%s,%s,%d,%.0f,%.0f,%.0f,%.1f,%.3f,%.3f,%.4g,%.1f,%.2f\n' "$cores" "$bench" "$variant" "$level" \
			"$(wc -l <<<"$rows")" "$(cut -d, -f6 <<<"$rows" | median)" "$(cut -d, -f6 <<<"$rows" | sort -g | head -n 1)" \
			"$(cut -d, -f6 <<<"$rows" | sort -g | tail -n 1)" "$(change 6 "$cores" "$bench" "$variant" "$level")" \
			"$(cut -d, -f7 <<<"$rows" | median)" "$(cut -d, -f8 <<<"$rows" | median)" "$(cut -d, -f11 <<<"$rows" | median)" \
			"$(change 11 "$cores" "$bench" "$variant" "$level")" "$(cut -d, -f9 <<<"$rows" | sort -g | tail -n 1)"
	done | sort -t, -k1,1r -k2,2 -k4,4n -k3,3
} >"$CSV"

echo
row='%5s %-14s %-7s %6s %10s %21s %9s %9s %9s %9s %9s %7s\n'
# shellcheck disable=SC2059 # the format is the table's
printf "$row" cores bench variant level "per s" "[range]" "vs plain" "p50 ms" "p99 ms" "cpu µs" "vs plain" "others"
tail -n +2 "$CSV" | while IFS=, read -r cores bench variant level _ per lo hi change p50 p99 cpu cpu_change other; do
	[[ $variant == plain ]] && change=- cpu_change=-
	# shellcheck disable=SC2059
	printf "$row" "$cores" "$bench" "$variant" "$level" "$per" "[$lo-$hi]" "$change" "$p50" "$p99" "$cpu" "$cpu_change" "$other"
done
cat <<EOF

per s: likes/s (likes, likes-newconn) or events/s (events-incr, events-like; level = workers),
median of $ROUNDS rounds; "vs plain": median over rounds of the change from plain in the same
round, in %; cpu µs: user+system time of the whole tallyd process (client and replica, all
levels of the run) per request or event, median, and its change from plain in the same round;
others: the most CPU (cores) other processes used during any one run of the row.
tallyd at commit $commit; $DURATION s per level and mix; limit variant: --limit $LIMIT.
Load average (1, 5, 15 min) at the start: $load_start; at the end: $load_end (every 5 s: $LOGDIR/load.log).
CSV: $CSV, every run: ${CSV%.csv}-rounds.csv   raw outputs: $LOGDIR/
EOF
