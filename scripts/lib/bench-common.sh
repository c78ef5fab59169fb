# shellcheck shell=bash
# bench-common.sh: what the peer benchmarks (bench-peers.sh,
# bench-budget.sh, bench-regress.sh) share: installing Debian packages
# without starting their services, free loopback ports, waiting for a
# server to come up, and a throwaway PostgreSQL cluster in a temporary
# directory. Sourced, not run. The caller defines die and
# say, and sets LOGDIR (where logs go), WORK (a temporary directory) and,
# before pg_start, PGBIN (pg_bin's answer).

# pg_bin is the newest PostgreSQL's server bin directory (initdb, pg_ctl
# and pgbench live there, not on PATH).
pg_bin() {
	local d
	d=$(find /usr/lib/postgresql -mindepth 2 -maxdepth 2 -name bin -type d 2>/dev/null | sort -V | tail -n 1)
	[[ -n $d && -x $d/initdb && -x $d/pg_ctl && -x $d/pgbench ]] && echo "$d"
}

# apt_install PKG...: installs Debian packages with apt-get (with sudo if
# not root). Only the binaries are wanted: a policy-rc.d that says "no"
# keeps the packages from starting their system-wide services (Redis on
# 6379, a PostgreSQL cluster on 5432). It is removed again right after,
# and only if this function put it there.
apt_install() {
	(($# == 0)) && return
	local sudo=()
	if [[ $(id -u) != 0 ]]; then
		command -v sudo >/dev/null || die "missing $* and not root: install them, or run as root"
		sudo=(sudo)
	fi
	say "installing $* with apt-get"
	local policy=/usr/sbin/policy-rc.d ours=
	if [[ ! -e $policy ]]; then
		printf '#!/bin/sh\nexit 101\n' | "${sudo[@]}" tee "$policy" >/dev/null
		"${sudo[@]}" chmod 755 "$policy"
		ours=1
	fi
	local rc=0
	"${sudo[@]}" apt-get update -qq && DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq \
		--no-install-recommends "$@" >"$LOGDIR/apt-get.log" 2>&1 || rc=$?
	[[ -n $ours ]] && "${sudo[@]}" rm -f "$policy"
	((rc == 0)) || die "apt-get install $* failed (exit $rc): see $LOGDIR/apt-get.log"
}

# free_port prints a loopback port nothing listens on, below the kernel's
# ephemeral range: a port above it may be the local end of some client's
# connection, and then a server cannot bind it although nothing listens.
free_port() {
	local p lo
	lo=$(cut -f1 /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || echo 32768)
	((lo > 21000)) || lo=32768
	for _ in $(seq 200); do
		p=$((20000 + RANDOM % (lo - 20000)))
		if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
			echo "$p"
			return
		fi
	done
	die "no free loopback port found"
}

# as_pg runs a PostgreSQL server command as a non-root user: initdb and
# postgres refuse to run as root.
as_pg() {
	if [[ $(id -u) == 0 ]]; then
		runuser -u postgres -- "$@"
	else
		"$@"
	fi
}

ensure_pg_user() {
	[[ $(id -u) == 0 ]] || return 0
	id postgres >/dev/null 2>&1 && return 0
	say "creating system user postgres to run the throwaway PostgreSQL"
	useradd --system --no-create-home --shell /usr/sbin/nologin postgres
}

pg_data= # set once pg_start has started a cluster
pg_log=
pg_port=

# pg_start starts a throwaway cluster in $WORK/pg on a free loopback
# port: defaults but for where it listens and room for 290 clients;
# fsync and synchronous_commit stay on (a write is acknowledged once
# durable, as tally's are). Read committed, the default isolation.
pg_start() {
	ensure_pg_user
	local dir=$WORK/pg
	mkdir -p "$dir"
	[[ $(id -u) == 0 ]] && chown postgres: "$dir"
	pg_port=$(free_port)
	as_pg "$PGBIN/initdb" -D "$dir/data" -U postgres -A trust -E UTF8 >"$LOGDIR/initdb.log" 2>&1 ||
		die "initdb failed: see $LOGDIR/initdb.log"
	as_pg tee -a "$dir/data/postgresql.conf" >/dev/null <<-EOF
		listen_addresses = '127.0.0.1'
		port = $pg_port
		unix_socket_directories = '$dir'
		max_connections = 300
		shared_buffers = 256MB
		fsync = on
		synchronous_commit = on
	EOF
	as_pg "$PGBIN/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 start >/dev/null ||
		die "pg_ctl start failed: $(tail -n 5 "$dir/server.log")"
	pg_data=$dir/data
	pg_log=$dir/server.log
}

# pg_stop stops the cluster pg_start started, if any, and keeps its log
# in LOGDIR (for the caller's exit trap).
pg_stop() {
	if [[ -n $pg_data ]]; then
		as_pg "$PGBIN/pg_ctl" -D "$pg_data" -m fast -w stop >/dev/null 2>&1 ||
			say "could not stop PostgreSQL in $pg_data"
	fi
	[[ -n $pg_log && -f $pg_log ]] && cp "$pg_log" "$LOGDIR/postgres.log"
}

psql_q() { psql -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$pg_port" -U postgres -d postgres "$@"; }

# median reads numbers, one per line, and prints their median; "-" if any
# line is "-" (a figure a run did not have).
median() {
	sort -g | awk '$1 == "-" { none = 1 } { v[NR] = $1 }
		END { if (none) print "-"; else if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

# wait_for WHAT PID CMD...: runs CMD every 0.1 s until it succeeds, for up
# to 30 s, giving up at once if the server PID has exited.
wait_for() {
	local what=$1 pid=$2
	shift 2
	for _ in $(seq 300); do
		"$@" >/dev/null 2>&1 && return 0
		kill -0 "$pid" 2>/dev/null || die "$what exited while starting"
		sleep 0.1
	done
	die "$what did not come up in 30 s"
}
