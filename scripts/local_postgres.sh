#!/usr/bin/env bash
# local_postgres.sh - a real PostgreSQL server on this machine for the study-database tests, and for CI.
#
#   bash scripts/local_postgres.sh start    # install (apt, once), initialise (once), start; writes env.sh
#   source "$ISTAR_POSTGRES_DIR/env.sh"     # exports ISTAR_TEST_POSTGRES_URL (tests/test_postgres*.py read it)
#   bash scripts/local_postgres.sh status
#   bash scripts/local_postgres.sh stop     # stops the server it started (its data stay for the next start)
#
# Debian's PostgreSQL, run by the unprivileged user "postgres" (the server refuses root) on 127.0.0.1 and a socket
# in the state folder, trusting local connections (a test server: never expose it). Starting a running server does
# nothing; a stopped one starts again on its data, so a study outlives a stop.
#
# Environment:
#   ISTAR_POSTGRES_DIR    state folder (default /tmp/istar-plugin-postgres); env.sh and server.log are written there
#   ISTAR_POSTGRES_PORT   port on 127.0.0.1 (default 6930)
#   ISTAR_POSTGRES_WAIT   seconds to wait for the server (default 60)
set -euo pipefail

ACTION="${1:-start}"
STATE="${ISTAR_POSTGRES_DIR:-/tmp/istar-plugin-postgres}"
STATE="${STATE%/}"
case "$STATE" in /?*/?*) ;; *) echo "ISTAR_POSTGRES_DIR must be an absolute path two levels deep, got '$STATE'" >&2; exit 2 ;; esac
PORT="${ISTAR_POSTGRES_PORT:-6930}"
WAIT_S="${ISTAR_POSTGRES_WAIT:-60}"
DATA="$STATE/data"
USER_NAME=postgres
DATABASE=istar_test

say() { echo "[local_postgres] $*" >&2; }

bin_dir() {  # the newest installed server's binaries
  ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1
}

as_server() { runuser -u "$USER_NAME" -- "$@"; }

install() {
  [ -n "$(bin_dir)" ] && return 0
  say "installing Debian's postgresql (once)"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null \
    || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null; }
  # Debian's package starts a cluster of its own as a service; this script runs its own and leaves that one alone
}

running() { [ -s "$DATA/postmaster.pid" ] && as_server "$(bin_dir)/pg_ctl" -D "$DATA" status >/dev/null 2>&1; }

write_env() {
  printf 'export ISTAR_TEST_POSTGRES_URL=%q\nexport ISTAR_POSTGRES_DIR=%q\n' \
    "postgresql://$USER_NAME@127.0.0.1:$PORT/$DATABASE" "$STATE" >"$STATE/env.sh"
}

start() {
  install
  local bin
  bin=$(bin_dir)
  mkdir -p "$STATE"
  chown "$USER_NAME:" "$STATE"
  chmod 0755 "$STATE"
  if ! [ -s "$DATA/PG_VERSION" ]; then
    as_server "$bin/initdb" -D "$DATA" -U "$USER_NAME" --auth=trust --encoding=UTF8 --no-locale >"$STATE/initdb.log" 2>&1 \
      || { tail -n 15 "$STATE/initdb.log" >&2; say "ERROR: initdb failed"; exit 1; }
  fi
  if running; then
    say "already running on 127.0.0.1:$PORT"
  else
    as_server "$bin/pg_ctl" -D "$DATA" -l "$STATE/server.log" -w -t "$WAIT_S" \
      -o "-p $PORT -k $STATE -c listen_addresses=127.0.0.1 -c fsync=off" start >/dev/null \
      || { tail -n 15 "$STATE/server.log" >&2; say "ERROR: the server did not start"; exit 1; }
  fi
  as_server "$bin/psql" -h "$STATE" -p "$PORT" -d postgres -tAc "SELECT 1 FROM pg_database WHERE datname='$DATABASE'" \
    | grep -q 1 || as_server "$bin/createdb" -h "$STATE" -p "$PORT" "$DATABASE"
  write_env
  say "ready: $(as_server "$bin/psql" -h "$STATE" -p "$PORT" -d "$DATABASE" -tAc 'SHOW server_version'); now: source $STATE/env.sh"
}

stop() {
  if [ -n "$(bin_dir)" ] && running; then
    as_server "$(bin_dir)/pg_ctl" -D "$DATA" -m fast -w -t "$WAIT_S" stop >/dev/null
    say "stopped"
  else
    say "not running"
  fi
}

status() {
  if [ -n "$(bin_dir)" ] && running; then echo "postgres: running on 127.0.0.1:$PORT ($STATE)"; else echo "postgres: stopped"; return 1; fi
}

case "$ACTION" in
  start) start ;;
  stop) stop ;;
  status) status ;;
  *) echo "usage: $0 start|stop|status (got '$ACTION')" >&2; exit 2 ;;
esac
