#!/usr/bin/env bash
# bench-budget.sh: spending one bounded budget, side by side in one run.
# Three ways of doing it in PostgreSQL, the flavors of the concurrent-
# counter case, against tally's budget on one replica and across three
# regions, at the same numbers of clients and for the same time a level:
#
#   pg-naive       BEGIN; SELECT budget; if budget >= 1: UPDATE budget to
#                  the value read minus 1, INSERT a spend; COMMIT. Read
#                  committed lets two clients read the same value, so
#                  updates are lost and the budget is overspent.
#   pg-for-update  the same with SELECT ... FOR UPDATE: the row is locked
#                  from the read to the commit.
#   pg-lock-free   one statement: UPDATE ... WHERE budget >= 1 RETURNING,
#                  INSERT the spend from what it returned.
#   tally-1        `tallyd bench budget --regions 1`: one replica in process.
#   tally-3        `tallyd bench budget --regions 3`: us, eu, ap in process
#                  as `tallyd local` runs them, clients round-robin over
#                  the regions, the budget granted at us.
#   tally-1-1core  tally-1 under `taskset -c 0`: server and clients on one
#                  core.
#
# Every system acknowledges a spend after an fsync (PostgreSQL with
# synchronous_commit on, tally with durability fsync). Each level reports
# spends/s (successful ones), p50 and p99 latency, and the overspend: the
# spends acknowledged minus what the budget went down by, which a budget
# must keep at 0. docs/benchmarks.md ("Budgets") records the figures and
# docs/performance.md explains them.
#
# PostgreSQL and gnuplot are installed with apt-get if missing. PostgreSQL
# runs as a throwaway instance on loopback, on a free port, in a temporary
# directory, and is stopped on exit, however the script exits.
#
# Settings (environment):
#   LEVELS     numbers of clients, comma-separated             (1,16,64)
#   DURATION   seconds per level and flavor                     (10)
#   ROUNDS     times every level is run; medians are reported   (1)
#   BUDGET     what each level's budget starts at               (1000000000)
#   TALLYD     the tallyd binary                                (bin/tallyd)
#   CSV, PLOT  where the results go     (docs/bench-budget.csv, .png;
#              with ROUNDS > 1 every round also in docs/bench-budget-rounds.csv)
#   LOGDIR     raw outputs of every run                         (bin/bench-budget)
#   FLAVORS    a subset to run, space-separated                 (all)
#   REPLOT=1   only redraw PLOT from an existing CSV
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/lib/bench-common.sh
source scripts/lib/bench-common.sh

LEVELS=${LEVELS:-1,16,64}
DURATION=${DURATION:-10}
ROUNDS=${ROUNDS:-1}
BUDGET=${BUDGET:-1000000000}
TALLYD=${TALLYD:-bin/tallyd}
CSV=${CSV:-docs/bench-budget.csv}
PLOT=${PLOT:-docs/bench-budget.png}
LOGDIR=${LOGDIR:-bin/bench-budget}
ALL_FLAVORS="pg-naive pg-for-update pg-lock-free tally-1 tally-3 tally-1-1core"
FLAVORS=${FLAVORS:-$ALL_FLAVORS}

IFS=, read -r -a levels <<<"$LEVELS"

die() {
	echo "bench-budget: $*" >&2
	exit 1
}
say() { echo "bench-budget: $(date +%T) $*" >&2; }

for f in $FLAVORS; do
	[[ " $ALL_FLAVORS " == *" $f "* ]] || die "unknown flavor $f (want some of: $ALL_FLAVORS)"
done
for c in "${levels[@]}"; do
	[[ $c =~ ^[0-9]+$ && $c -ge 1 && $c -le 290 ]] || die "LEVELS: $c is not a level in 1..290 (PostgreSQL gets max_connections = 300)"
done
[[ $DURATION =~ ^[0-9]+$ && $DURATION -ge 1 ]] || die "DURATION: want whole seconds, got $DURATION"
[[ $ROUNDS =~ ^[0-9]+$ && $ROUNDS -ge 1 ]] || die "ROUNDS: want a positive integer, got $ROUNDS"
[[ $BUDGET =~ ^[0-9]+$ && $BUDGET -ge 1 ]] || die "BUDGET: want a positive integer, got $BUDGET"
[[ -n ${REPLOT:-} || -x $TALLYD ]] || die "$TALLYD not found: run 'make build'"

# The csv's system and flavor columns, and the labels of the table and plot.
declare -A system_of=(
	[pg-naive]=postgresql [pg-for-update]=postgresql [pg-lock-free]=postgresql
	[tally-1]=tally [tally-3]=tally [tally-1-1core]=tally
)
declare -A flavor_of=(
	[pg-naive]=naive [pg-for-update]=for-update [pg-lock-free]=lock-free
	[tally-1]=1-replica [tally-3]=3-regions [tally-1-1core]=1-replica-1core
)
declare -A label=(
	[pg-naive]="PostgreSQL naive read-then-update (overspends)"
	[pg-for-update]="PostgreSQL SELECT ... FOR UPDATE"
	[pg-lock-free]="PostgreSQL UPDATE ... WHERE budget >= 1"
	[tally-1]="tally, one replica"
	[tally-3]="tally, three regions"
	[tally-1-1core]="tally, one replica, 1 core"
)

# ---- plot ---------------------------------------------------------------

# plot draws spends/s and p99 of each flavor in $CSV against clients.
plot() {
	local dir tput=() p99=() f term xtics lo hi
	dir=$(mktemp -d "${TMPDIR:-/tmp}/bench-budget-plot.XXXXXX")
	for f in $ALL_FLAVORS; do
		# clients, spends/s, p99 ms
		awk -F, -v s="${system_of[$f]}" -v fl="${flavor_of[$f]}" '$1 == s && $2 == fl { print $3, $4, $6 }' "$CSV" >"$dir/$f.dat"
		[[ -s $dir/$f.dat ]] || continue
		tput+=("'$dir/$f.dat' using 1:2 with linespoints lw 2 title '${label[$f]}'")
		p99+=("'$dir/$f.dat' using 1:3 with linespoints lw 2 title '${label[$f]}'")
	done
	((${#tput[@]} > 0)) || die "nothing to plot in $CSV"
	xtics=$(cut -d, -f3 "$CSV" | tail -n +2 | sort -un | paste -sd, -)
	lo=${xtics%%,*}
	hi=${xtics##*,}
	term="pngcairo size 1200,900 font 'sans,10'"
	gnuplot -e "set terminal $term" 2>/dev/null </dev/null || term="png size 1200,900"
	gnuplot <<-EOF
		set terminal $term
		set output '$PLOT'
		set multiplot layout 2,1 title "Spending one budget by 1, durable commits, $(nproc) cores shared with the clients"
		set logscale xy
		set xlabel 'clients'
		set xtics ($xtics)
		set xrange [$lo / 1.4 : $hi * 1.4]
		set format y '%.0s%c'
		set grid
		set key outside right top Left reverse
		set title 'successful spends per second'
		set ylabel 'spends/s'
		plot $(
		IFS=,
		echo "${tput[*]}"
	)
		set title 'p99 latency of a successful spend'
		set ylabel 'ms'
		set format y '%g'
		plot $(
		IFS=,
		echo "${p99[*]}"
	)
		unset multiplot
	EOF
	rm -rf "$dir"
	say "plot: $PLOT"
}

# ---- packages -----------------------------------------------------------


install_missing() {
	local pkgs=()
	[[ " $FLAVORS " == *" pg-"* ]] && { pg_bin >/dev/null || pkgs+=(postgresql); }
	command -v gnuplot >/dev/null || pkgs+=(gnuplot-nox)
	apt_install "${pkgs[@]}"
}

mkdir -p "$LOGDIR" "$(dirname "$CSV")" "$(dirname "$PLOT")"
if [[ -n ${REPLOT:-} ]]; then
	plot
	exit 0
fi
LOGDIR=$(cd "$LOGDIR" && pwd)
rm -f "$LOGDIR"/*.out "$LOGDIR"/*.csv "$LOGDIR"/*.err "$LOGDIR"/*.log
install_missing
PGBIN=
if [[ " $FLAVORS " == *" pg-"* ]]; then
	PGBIN=$(pg_bin) || die "PostgreSQL server binaries not found under /usr/lib/postgresql/*/bin"
fi
if [[ " $FLAVORS " == *" tally-1-1core "* ]]; then
	command -v taskset >/dev/null || die "taskset not found (util-linux): leave tally-1-1core out of FLAVORS"
fi

# ---- the throwaway PostgreSQL, stopped on exit --------------------------

WORK=$(mktemp -d "${TMPDIR:-/tmp}/bench-budget.XXXXXX")
chmod 711 "$WORK" # the postgres user must reach its data directory

cleanup() {
	local rc=$?
	pg_stop
	rm -rf "$WORK"
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM





start_pg() {
	pg_start
	# The budget is one row; every successful spend also records itself,
	# so that what clients were told can be counted against the budget.
	psql_q <<-'EOF'
		CREATE TABLE budgets (id int PRIMARY KEY, budget bigint NOT NULL);
		CREATE TABLE spends (client int NOT NULL, at timestamptz NOT NULL DEFAULT now());
	EOF
	# Naive: read, decide in the client, write the value it computed.
	cat >"$WORK/pg-naive.sql" <<-'EOF'
		BEGIN;
		SELECT budget FROM budgets WHERE id = 1 \gset
		\if :budget >= 1
		\set left :budget - 1
		UPDATE budgets SET budget = :left WHERE id = 1;
		INSERT INTO spends (client) VALUES (:client_id);
		\endif
		COMMIT;
	EOF
	# The same, holding the row's lock from the read on.
	cat >"$WORK/pg-for-update.sql" <<-'EOF'
		BEGIN;
		SELECT budget FROM budgets WHERE id = 1 FOR UPDATE \gset
		\if :budget >= 1
		UPDATE budgets SET budget = budget - 1 WHERE id = 1;
		INSERT INTO spends (client) VALUES (:client_id);
		\endif
		COMMIT;
	EOF
	# One statement, one round trip: the condition is checked on the row
	# version the UPDATE locks.
	cat >"$WORK/pg-lock-free.sql" <<-'EOF'
		WITH s AS (UPDATE budgets SET budget = budget - 1 WHERE id = 1 AND budget >= 1 RETURNING 1)
		INSERT INTO spends (client) SELECT :client_id FROM s;
	EOF
	say "pg-*: PostgreSQL on :$pg_port ($PGBIN)"
}

# ---- results ------------------------------------------------------------

RAW=$WORK/rounds.csv # round,flavor,clients,spends_per_s,p50_ms,p99_ms,overspend,refused
: >"$RAW"

# pg_level FLAVOR CLIENTS ROUND: one pgbench run on a fresh budget; p50
# and p99 from its per-transaction log (pgbench prints only the mean).
pg_level() {
	local flavor=$1 conc=$2 round=$3
	local out=$LOGDIR/$flavor.c$conc.r$round.out logs=$WORK/pglog.$flavor.$conc.$round
	mkdir -p "$logs"
	# Every level starts alike: a full budget, no spends, and no checkpoint
	# left to land in the middle of the run.
	psql_q -c "DELETE FROM budgets" -c "INSERT INTO budgets VALUES (1, $BUDGET)" -c "TRUNCATE spends" -c "CHECKPOINT"
	pgbench -h 127.0.0.1 -p "$pg_port" -U postgres -n -M prepared -c "$conc" -j $((conc < 2 ? conc : 2)) \
		-T "$DURATION" -f "$WORK/$flavor.sql" -l --log-prefix="$logs/tx" postgres >"$out" 2>&1 ||
		die "pgbench failed: see $out"
	local tps txs failed spends left
	tps=$(sed -n 's/^tps = \([0-9.]*\) (without initial connection time)$/\1/p' "$out")
	txs=$(sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p' "$out")
	failed=$(sed -n 's/^number of failed transactions: \([0-9]*\).*/\1/p' "$out")
	[[ -n $tps && -n $txs ]] || die "no tps or transaction count in $out"
	[[ ${failed:-0} == 0 ]] || say "$flavor: $failed transactions failed, see $out"
	spends=$(psql_q -At -c "SELECT count(*) FROM spends")
	left=$(psql_q -At -c "SELECT budget FROM budgets WHERE id = 1")
	echo "spends $spends, budget left $left of $BUDGET" >>"$out"
	# Log lines: client_id transaction_no latency_us script_no epoch epoch_us.
	cat "$logs"/tx.* | awk '{ print $3 }' | sort -n | awk -v r="$round" -v f="$flavor" -v c="$conc" -v tps="$tps" \
		-v txs="$txs" -v spends="$spends" -v left="$left" -v budget="$BUDGET" '
		{ v[NR] = $1 }
		END {
			if (NR == 0 || txs == 0) exit 1
			i50 = int(NR * 0.50); if (i50 < NR * 0.50) i50++
			i99 = int(NR * 0.99); if (i99 < NR * 0.99) i99++
			# Spends acknowledged minus what the budget went down by;
			# transactions that spent nothing were refused.
			printf "%s,%s,%s,%.1f,%.3f,%.3f,%d,%d\n", r, f, c, tps * spends / txs, v[i50] / 1000, v[i99] / 1000,
				spends - (budget - left), txs - spends
		}' >>"$RAW" || die "no transactions logged by pgbench: see $out"
	rm -rf "$logs"
}

# tally_level FLAVOR CLIENTS ROUND: one level of `tallyd bench budget`,
# which starts its own replica or regions each time, so every level
# starts from an empty store as PostgreSQL's starts from a fresh budget.
tally_level() {
	local flavor=$1 conc=$2 round=$3
	local out=$LOGDIR/$flavor.c$conc.r$round.csv cmd=("$TALLYD")
	local args=(bench budget --clients "$conc" --duration "${DURATION}s" --budget "$BUDGET"
		--flavor "${flavor_of[$flavor]}" --csv "$out")
	case $flavor in
	tally-1) args+=(--regions 1) ;;
	tally-3) args+=(--regions 3) ;;
	tally-1-1core)
		cmd=(taskset -c 0 "$TALLYD")
		args+=(--regions 1)
		;;
	esac
	# bench budget exits 1 when it finds an overspend, after writing the
	# row: that is a result to record, not a failure to stop at.
	if ! "${cmd[@]}" "${args[@]}" >"${out%.csv}.out" 2>"${out%.csv}.err"; then
		if [[ ! -s $out ]] || (($(wc -l <"$out") < 2)); then
			die "tallyd bench budget failed: see ${out%.csv}.err"
		fi
		say "$flavor: tallyd bench budget reported a problem: $(tail -n 1 "${out%.csv}.err")"
	fi
	# system,flavor,clients,spends_per_s,p50_ms,p99_ms,overspend,refused
	awk -F, -v r="$round" -v f="$flavor" 'NR > 1 { print r "," f "," $3 "," $4 "," $5 "," $6 "," $7 "," $8 }' "$out" >>"$RAW"
}

# ---- run ----------------------------------------------------------------

load_start=$(cut -d' ' -f1-3 /proc/loadavg)
say "$(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), load average $load_start"
versions="$("$TALLYD" version)"
[[ -n $PGBIN ]] && versions+=", $("$PGBIN/postgres" --version)"
say "$versions"
[[ " $FLAVORS " == *" pg-"* ]] && start_pg
# Levels outside, flavors inside: on a machine that others share, the
# flavors compared at one level run within the same few minutes.
for ((round = 1; round <= ROUNDS; round++)); do
	for c in "${levels[@]}"; do
		say "round $round of $ROUNDS, $c clients"
		for f in $FLAVORS; do
			say "  $f"
			case $f in
			pg-*) pg_level "$f" "$c" "$round" ;;
			tally-*) tally_level "$f" "$c" "$round" ;;
			esac
		done
	done
done
if [[ -n $pg_data ]]; then
	as_pg "$PGBIN/pg_ctl" -D "$pg_data" -m fast -w stop >/dev/null
	pg_data=
fi
load_end=$(cut -d' ' -f1-3 /proc/loadavg)

# ---- report -------------------------------------------------------------


# Per flavor and level, the median over the rounds of every column on
# its own.
{
	echo "system,flavor,clients,spends_per_s,p50_ms,p99_ms,overspend,refused"
	for f in $FLAVORS; do
		for c in "${levels[@]}"; do
			rows=$(awk -F, -v f="$f" -v c="$c" '$2 == f && $3 == c' "$RAW")
			[[ -n $rows ]] || continue
			printf '%s,%s,%s,%.1f,%.3f,%.3f,%.0f,%.0f\n' "${system_of[$f]}" "${flavor_of[$f]}" "$c" \
				"$(cut -d, -f4 <<<"$rows" | median)" "$(cut -d, -f5 <<<"$rows" | median)" \
				"$(cut -d, -f6 <<<"$rows" | median)" "$(cut -d, -f7 <<<"$rows" | median)" \
				"$(cut -d, -f8 <<<"$rows" | median)"
		done
	done
} >"$CSV"
if ((ROUNDS > 1)); then
	{
		echo "round,system,flavor,clients,spends_per_s,p50_ms,p99_ms,overspend,refused"
		while IFS=, read -r round f rest; do
			echo "$round,${system_of[$f]},${flavor_of[$f]},$rest"
		done <"$RAW"
	} >"${CSV%.csv}-rounds.csv"
fi

echo
printf '%-48s %7s %10s %8s %8s %10s %10s %8s\n' "flavor (median of $ROUNDS)" clients "spends/s" "p50 ms" "p99 ms" overspend "of spends" refused
tail -n +2 "$CSV" | while IFS=, read -r s fl c sps p50 p99 over refused; do
	for f in $ALL_FLAVORS; do
		[[ ${system_of[$f]} == "$s" && ${flavor_of[$f]} == "$fl" ]] && break
	done
	pct=$(awk -v o="$over" -v s="$sps" -v d="$DURATION" 'BEGIN { n = s * d; if (n > 0) printf "%.1f%%", 100 * o / n; else print "-" }')
	printf '%-48s %7s %10s %8s %8s %10s %10s %8s\n' "${label[$f]}" "$c" "$sps" "$p50" "$p99" "$over" "$pct" "$refused"
done
cat <<EOF

Overspend: spends acknowledged minus what the budget went down by; a budget must keep it at 0.
"of spends" relates it to the spends acknowledged (spends/s x $DURATION s).
Load average (1, 5, 15 min) at the start: $load_start; at the end: $load_end.
pgbench is a C client; tally's clients are Go (net/http) in the same process as the replicas. Both
share the same $(nproc) cores with what they load.
CSV: $CSV   raw outputs: $LOGDIR/
EOF

plot
