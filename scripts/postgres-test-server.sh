#!/usr/bin/env bash
# A throwaway PostgreSQL server for Depot's tests.
#
#   scripts/postgres-test-server.sh start DIR   fresh cluster under DIR; prints its URL last
#   scripts/postgres-test-server.sh stop DIR    stops it (never fails when nothing runs)
#   scripts/postgres-test-server.sh url DIR     prints the URL of the running cluster
#   scripts/postgres-test-server.sh restart DIR restarts the running cluster (pg_ctl restart
#                                               -m fast: every client's session is ended,
#                                               as in a server restart or a failover)
#   scripts/postgres-test-server.sh standby DIR adds a streaming standby of the cluster
#                                               running in DIR (pg_basebackup -R, hot
#                                               standby, port + 1); prints its URL last
#   scripts/postgres-test-server.sh standby-url DIR  prints the standby's URL
#   scripts/postgres-test-server.sh cluster-url DIR  prints one URL naming both servers,
#                                               primary first (libpq's multi-host form:
#                                               host=PRIMARY,STANDBY&port=P,P+1)
#   scripts/postgres-test-server.sh crash DIR   stops the primary at once (pg_ctl stop -m
#                                               immediate), as a failed machine would
#   scripts/postgres-test-server.sh promote DIR promotes the standby to primary
#
# stop stops the standby too. The standby lives in DIR/standby (or beside the /tmp folder
# below) with data, socket and log of its own, replays the primary's write-ahead log as it
# streams in, and serves reads only.
#
# The server listens only on a Unix socket in DIR/socket (no TCP port is opened, so runs
# from different folders or users cannot collide and nothing is reachable from outside),
# trusts every local connection, runs with fsync off (the data is thrown away), and has
# database `depot_test` owned by superuser `depot`. The URL has the form
#
#   postgresql://depot@/depot_test?host=/abs/path/socket&port=54329
#
# which libpq accepts (an empty host part with host=... in the query names a socket
# folder). DEPOT_POSTGRES_PORT picks the port (default 54329); over a Unix socket it only
# names the socket file, .s.PGSQL.<port>.
#
# Layout: DIR/data (the cluster), DIR/socket, DIR/server.log (initdb's and the server's
# output), DIR/url. initdb and postgres refuse to run as root, so as root they run as the
# `postgres` user; when that user cannot reach DIR (a parent folder it may not traverse,
# e.g. a checkout under /root) or the socket path would be too long for a Unix socket,
# data, socket and log go to a fresh folder under /tmp instead, recorded in DIR/location
# so that stop and url find it. Parent folders' permissions are never changed.
#
# Progress goes to stderr; stdout carries only the URL, so `url=$(... start DIR)` works.
set -euo pipefail

readonly DEFAULT_PORT=54329
# sun_path holds 108 bytes with the terminating NUL; PostgreSQL rejects longer paths.
readonly MAX_SOCKET_PATH=107

die() { echo "postgres-test-server: $*" >&2; exit 1; }
say() { echo "postgres-test-server: $*" >&2; }

usage() {
	echo "usage: $0 start|stop|url|restart|standby|standby-url|cluster-url|crash|promote DIR" >&2
	exit 2
}

is_root() { [ "$(id -u)" = "0" ]; }

# The newest installed server's bin folder (Debian/Ubuntu keep one per major version under
# /usr/lib/postgresql; a client-only version has no `postgres` there, hence the check).
# Elsewhere, whatever initdb is on PATH.
server_bin() {
	local dir best=""
	# sort -V: version 10 is newer than 9.
	while IFS= read -r dir; do
		if [ -x "$dir/postgres" ] && [ -x "$dir/initdb" ] && [ -x "$dir/pg_ctl" ]; then best=$dir; fi
	done < <(printf '%s\n' /usr/lib/postgresql/*/bin | sort -V)
	if [ -z "$best" ] && command -v initdb >/dev/null 2>&1 && command -v pg_ctl >/dev/null 2>&1; then
		best=$(dirname "$(command -v initdb)")
	fi
	[ -n "$best" ] && echo "$best"
}

# Installs the server and libpq's headers when missing (a fresh CI machine has apt but may
# have neither). The `postgresql` package's own cluster, if its install starts one, listens
# on port 5432 and does not disturb ours.
ensure_installed() {
	local missing=""
	command -v pkg-config >/dev/null 2>&1 || missing="$missing pkg-config"
	pkg-config --exists libpq 2>/dev/null || missing="$missing libpq-dev"
	server_bin >/dev/null || missing="$missing postgresql"
	[ -z "$missing" ] && return 0
	command -v apt-get >/dev/null 2>&1 || die "missing:$missing (and no apt-get to install them)"
	local sudo=""
	is_root || sudo=sudo
	say "installing:$missing"
	$sudo apt-get update -qq >&2
	# The server package asks nothing, but tzdata and friends might on a bare image.
	$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing >&2
	server_bin >/dev/null || die "no PostgreSQL server binaries after installing$missing"
}

# Runs a server command as the user the server belongs to: postgres when we are root (the
# binaries refuse root), ourselves otherwise. From / because root's working folder may be
# closed to postgres, and pg_ctl and initdb look up the current folder.
as_server() {
	if is_root; then
		(cd / && runuser -u postgres -- "$@")
	else
		"$@"
	fi
}

# DIR made absolute (the URL and the server need absolute paths); created when asked.
absolute_dir() {
	local dir=$1 create=$2
	if [ "$create" = yes ]; then mkdir -p "$dir"; fi
	[ -d "$dir" ] || return 1
	(cd "$dir" && pwd)
}

# Where data/, socket/ and server.log live: DIR, or the /tmp folder named in DIR/location.
base_of() {
	local dir=$1
	if [ -f "$dir/location" ]; then cat "$dir/location"; else echo "$dir"; fi
}

port() {
	local port=${DEPOT_POSTGRES_PORT:-$DEFAULT_PORT}
	[[ "$port" =~ ^[0-9]+$ ]] && [ "$port" -ge 1 ] && [ "$port" -le 65535 ] ||
		die "DEPOT_POSTGRES_PORT must be a port number, not '$port'"
	echo "$port"
}

# Percent-encodes a path for the URL's query (a space or & in a folder name would
# otherwise break it); '/' and the unreserved characters stay as they are.
url_encode() {
	# Byte by byte, so that a non-ASCII name is encoded as its UTF-8 bytes.
	local LC_ALL=C
	local s=$1 out="" c i
	for ((i = 0; i < ${#s}; i++)); do
		c=${s:i:1}
		case "$c" in
			[A-Za-z0-9/._~-]) out+=$c ;;
			*) out+=$(printf '%%%02X' "'$c") ;;
		esac
	done
	echo "$out"
}

# Quotes a word for /bin/sh: pg_ctl hands its -o options to a shell.
sh_quote() { printf "'%s'" "${1//\'/\'\\\'\'}"; }

# True when a server is running on BASE/data.
running() {
	local base=$1 bin
	[ -f "$base/data/postmaster.pid" ] || return 1
	bin=$(server_bin) || return 1
	as_server "$bin/pg_ctl" status -D "$base/data" >/dev/null 2>&1
}

stop_base() {
	local base=$1 bin
	running "$base" || return 0
	bin=$(server_bin)
	say "stopping the server in $base"
	# -m fast: disconnect clients (a test that failed may have left some) and shut down.
	as_server "$bin/pg_ctl" stop -D "$base/data" -m fast -w >&2 || true
}

cmd_stop() {
	local dir base
	dir=$(absolute_dir "$1" no) || return 0
	base=$(base_of "$dir")
	stop_base "$base/standby"
	stop_base "$base"
}

cmd_url() {
	local dir base
	dir=$(absolute_dir "$1" no) || die "$1 does not exist"
	base=$(base_of "$dir")
	running "$base" && [ -f "$dir/url" ] || die "no server is running in $base"
	cat "$dir/url"
}

# Restarts the running server with the options it was started with (pg_ctl keeps them in
# postmaster.opts), ending every client's session; waits until it accepts connections.
cmd_restart() {
	local dir base bin
	dir=$(absolute_dir "$1" no) || die "$1 does not exist"
	base=$(base_of "$dir")
	running "$base" || die "no server is running in $base"
	bin=$(server_bin)
	say "restarting the server in $base"
	if ! as_server "$bin/pg_ctl" restart -D "$base/data" -l "$base/server.log" -m fast -w -t 60 >&2; then
		tail -n 30 "$base/server.log" >&2
		die "the server did not restart (log: $base/server.log)"
	fi
}

# Removes what a previous start left (stopping its server first): only the names this
# script creates, never DIR itself, which may hold other things. A /tmp fallback folder is
# removed only when its name is one this script made.
wipe() {
	local dir=$1 old
	old=$(base_of "$dir")
	stop_base "$old/standby"
	stop_base "$old"
	if [ "$old" != "$dir" ]; then
		case "$old" in
			/tmp/depot-postgres.*) rm -rf -- "$old" ;;
		esac
	fi
	stop_base "$dir/standby"
	stop_base "$dir"
	rm -rf -- "$dir/data" "$dir/socket" "$dir/server.log" "$dir/url" "$dir/location" "$dir/standby" "$dir/standby-url"
}

# Makes BASE's data/, socket/ and server.log, owned by the server's user.
prepare_base() {
	local base=$1
	mkdir -p "$base/data" "$base/socket"
	: >"$base/server.log"
	chmod 700 "$base/data"
	if is_root; then
		chown postgres: "$base/data" "$base/socket" "$base/server.log"
	fi
}

# True when the server's user can use BASE and the socket path fits in a Unix socket.
usable_base() {
	local base=$1 port=$2
	local LC_ALL=C # ${#...} in bytes
	local socket_file="$base/socket/.s.PGSQL.$port"
	[ "${#socket_file}" -le "$MAX_SOCKET_PATH" ] || return 1
	as_server test -w "$base/data" -a -x "$base/data" -a -w "$base/socket" -a -x "$base/socket" \
		-a -w "$base/server.log"
}

cmd_start() {
	local dir base bin port log url
	ensure_installed
	bin=$(server_bin)
	port=$(port)
	if is_root; then
		getent passwd postgres >/dev/null || die "no 'postgres' user to run the server as (initdb refuses root)"
		command -v runuser >/dev/null 2>&1 || die "runuser is needed to run the server as 'postgres'"
	fi

	dir=$(absolute_dir "$1" yes)
	wipe "$dir"

	base=$dir
	prepare_base "$base"
	if ! usable_base "$base" "$port"; then
		rm -rf -- "$dir/data" "$dir/socket" "$dir/server.log"
		base=$(mktemp -d /tmp/depot-postgres.XXXXXX)
		chmod 755 "$base"
		echo "$base" >"$dir/location"
		say "the server's user cannot use $dir (or its socket path is too long); using $base"
		prepare_base "$base"
		usable_base "$base" "$port" || die "cannot use $base either"
	fi
	log=$base/server.log

	say "creating a cluster in $base/data ($("$bin/postgres" --version))"
	# trust: local-only throwaway server. --no-sync: nothing here needs to survive a crash.
	# Locale C and UTF8: the same collation and encoding on every machine.
	if ! as_server "$bin/initdb" -D "$base/data" -A trust -U depot --no-sync -E UTF8 \
		--locale=C >>"$log" 2>&1; then
		tail -n 30 "$log" >&2
		die "initdb failed (log: $log)"
	fi

	# listen_addresses='': Unix socket only. fsync and full_page_writes off: throwaway data,
	# faster tests. max_connections=300: the tests open many stores at once, each with a
	# few connections (the default 100 runs out).
	local options
	options="-c listen_addresses='' -k $(sh_quote "$base/socket") -p $port"
	options+=" -c fsync=off -c full_page_writes=off -c max_connections=300"
	if ! as_server "$bin/pg_ctl" start -D "$base/data" -l "$log" -w -t 60 -o "$options" >&2; then
		tail -n 30 "$log" >&2
		die "the server did not start (log: $log)"
	fi

	# The client tools run as us: root may connect, and trust lets `depot` in.
	if ! "$bin/createdb" -h "$base/socket" -p "$port" -U depot depot_test >&2; then
		stop_base "$base"
		die "could not create database depot_test"
	fi

	url="postgresql://depot@/depot_test?host=$(url_encode "$base/socket")&port=$port"
	echo "$url" >"$dir/url"
	say "running; stop it with: $0 stop $(sh_quote "$1")"
	echo "$url"
}

# Adds a streaming standby of the primary running in DIR: a base backup taken over the
# primary's socket with its replication settings written in (-R), started as a hot standby
# on the next port, in BASE/standby. Waits until it accepts connections.
cmd_standby() {
	local dir base sbase bin port sport log url
	dir=$(absolute_dir "$1" no) || die "$1 does not exist"
	base=$(base_of "$dir")
	running "$base" || die "no server is running in $base"
	bin=$(server_bin)
	port=$(port)
	sport=$((port + 1))
	sbase=$base/standby
	stop_base "$sbase"
	rm -rf -- "$sbase"
	mkdir -p "$sbase"
	is_root && chown postgres: "$sbase"
	prepare_base "$sbase"
	usable_base "$sbase" "$sport" || die "the server's user cannot use $sbase (or its socket path is too long)"
	log=$sbase/server.log
	say "taking a base backup of the primary into $sbase/data"
	if ! as_server "$bin/pg_basebackup" -D "$sbase/data" -R -X stream -c fast -h "$base/socket" -p "$port" -U depot >>"$log" 2>&1; then
		tail -n 30 "$log" >&2
		die "pg_basebackup failed (log: $log)"
	fi
	local options
	options="-c listen_addresses='' -k $(sh_quote "$sbase/socket") -p $sport"
	options+=" -c fsync=off -c full_page_writes=off -c max_connections=300 -c hot_standby=on"
	if ! as_server "$bin/pg_ctl" start -D "$sbase/data" -l "$log" -w -t 60 -o "$options" >&2; then
		tail -n 30 "$log" >&2
		die "the standby did not start (log: $log)"
	fi
	url="postgresql://depot@/depot_test?host=$(url_encode "$sbase/socket")&port=$sport"
	echo "$url" >"$dir/standby-url"
	say "standby running; it stops with: $0 stop $(sh_quote "$1")"
	echo "$url"
}

cmd_standby_url() {
	local dir base
	dir=$(absolute_dir "$1" no) || die "$1 does not exist"
	base=$(base_of "$dir")
	running "$base/standby" && [ -f "$dir/standby-url" ] || die "no standby is running in $base/standby"
	cat "$dir/standby-url"
}

cmd_cluster_url() {
	local dir base port
	dir=$(absolute_dir "$1" no) || die "$1 does not exist"
	base=$(base_of "$dir")
	running "$base" && running "$base/standby" || die "the primary and the standby must both run in $base"
	port=$(port)
	echo "postgresql://depot@/depot_test?host=$(url_encode "$base/socket"),$(url_encode "$base/standby/socket")&port=$port,$((port + 1))"
}

# Stops the primary without a shutdown checkpoint or a farewell to its clients, as a
# machine that fails would.
cmd_crash() {
	local dir base bin
	dir=$(absolute_dir "$1" no) || die "$1 does not exist"
	base=$(base_of "$dir")
	running "$base" || die "no server is running in $base"
	bin=$(server_bin)
	say "stopping the primary in $base at once"
	as_server "$bin/pg_ctl" stop -D "$base/data" -m immediate -w >&2
}

cmd_promote() {
	local dir base bin
	dir=$(absolute_dir "$1" no) || die "$1 does not exist"
	base=$(base_of "$dir")
	running "$base/standby" || die "no standby is running in $base/standby"
	bin=$(server_bin)
	say "promoting the standby in $base/standby"
	as_server "$bin/pg_ctl" promote -D "$base/standby/data" -w -t 60 >&2
}

[ $# -eq 2 ] || usage
case "$1" in
	start) cmd_start "$2" ;;
	stop) cmd_stop "$2" ;;
	url) cmd_url "$2" ;;
	restart) cmd_restart "$2" ;;
	standby) cmd_standby "$2" ;;
	standby-url) cmd_standby_url "$2" ;;
	cluster-url) cmd_cluster_url "$2" ;;
	crash) cmd_crash "$2" ;;
	promote) cmd_promote "$2" ;;
	*) usage ;;
esac
