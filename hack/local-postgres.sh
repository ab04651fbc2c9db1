#!/usr/bin/env bash
# hack/local-postgres.sh: a private PostgreSQL on loopback for development and for the
# integration tests of the audit store (SQLAlchemy + asyncpg). No system service is touched:
# the Debian `postgresql` binaries run from a data directory of our own, as user postgres
# (PostgreSQL refuses root), with trust authentication and fsync=off (throw-away data).
#
#   hack/local-postgres.sh up              start (installs postgresql if missing); idempotent
#   hack/local-postgres.sh status          print state; exit 1 when it is not running
#   hack/local-postgres.sh down [--wipe]   stop; --wipe also deletes the data
#
# Settings (environment):
#   TG_PG_DIR   <repo>/.local/postgres   env file, and the data unless user postgres cannot
#                                         reach it (then /var/tmp/trainguard-pg-<port>)
#   TG_PG_PORT  15432                     TCP port on 127.0.0.1 (also the socket's number)
#
# After `up`:  source .local/postgres/env   (TG_PG_URL=postgresql+asyncpg://..., PGHOST, PGPORT, PGUSER)
set -euo pipefail
TG_SCRIPT_NAME=local-postgres
# shellcheck source=hack/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"

usage() { sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; }

PG_DIR=${TG_PG_DIR:-$TG_REPO_ROOT/.local/postgres}
PORT=${TG_PG_PORT:-15432}
ENV_FILE=$PG_DIR/env
[[ "$PORT" =~ ^[0-9]+$ ]] || tg_die "TG_PG_PORT must be a number, got '$PORT'"

# shellcheck disable=SC2012  # the paths are Debian's /usr/lib/postgresql/<major>/bin
pg_bin() { ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1; }

# fd 9 is our lock (tg_lock): the server must not inherit it
as_postgres() { (cd / && runuser -u postgres -- "$@" 9>&-); }

# Where the postgres-owned files live: under PG_DIR when user postgres can traverse to it,
# otherwise a postgres-owned directory in /var/tmp (e.g. repo under a 0700 home directory).
pg_root() {
  if [ -s "$ENV_FILE" ] && grep -q '^export TG_PG_ROOT=' "$ENV_FILE"; then
    sed -n 's/^export TG_PG_ROOT=//p' "$ENV_FILE" | tail -1
  elif [ -d "$PG_DIR" ] && id postgres >/dev/null 2>&1 && as_postgres test -x "$PG_DIR"; then
    echo "$PG_DIR/pg"
  else
    echo "/var/tmp/trainguard-pg-$PORT"
  fi
}

running() {   # running ROOT BIN: our server answers on its data dir and port
  [ -n "$2" ] && [ -s "$1/data/PG_VERSION" ] &&
    as_postgres "$2/pg_ctl" -D "$1/data" status >/dev/null 2>&1 &&
    pg_isready -q -h 127.0.0.1 -p "$PORT" >/dev/null 2>&1
}

cmd_up() {
  tg_need_root
  tg_apt_install postgresql
  local bin root
  bin=$(pg_bin)
  [ -n "$bin" ] || tg_die "postgresql is installed but no /usr/lib/postgresql/*/bin was found"
  mkdir -p "$PG_DIR"
  root=$(
    if as_postgres test -x "$PG_DIR"; then echo "$PG_DIR/pg"; else echo "/var/tmp/trainguard-pg-$PORT"; fi
  )
  mkdir -p "$root"
  chown postgres:postgres "$root"
  chmod 700 "$root"
  if [ -s "$root/data/PG_VERSION" ]; then
    local have want
    have=$(cat "$root/data/PG_VERSION")
    want=$(basename "$(dirname "$bin")")
    [ "$have" = "$want" ] ||
      tg_die "data in $root/data is from PostgreSQL $have but $want is installed: run '$0 down --wipe' first"
  else
    tg_log "initdb into $root/data"
    as_postgres "$bin/initdb" -D "$root/data" -U postgres --auth=trust -E UTF8 --no-locale \
      >"$root/initdb.log" 2>&1 || tg_die "initdb failed" "$root/initdb.log"
  fi
  if running "$root" "$bin"; then
    tg_log "already running on 127.0.0.1:$PORT (data $root/data)"
  else
    if pg_isready -q -h 127.0.0.1 -p "$PORT" >/dev/null 2>&1; then
      tg_die "port $PORT on 127.0.0.1 is used by another server: set TG_PG_PORT"
    fi
    as_postgres "$bin/pg_ctl" -D "$root/data" -l "$root/postgres.log" -w -t 30 \
      -o "-p $PORT -c listen_addresses=127.0.0.1 -k $root -c fsync=off -c full_page_writes=off" \
      start >/dev/null 2>&1 || tg_die "postgres did not start" "$root/postgres.log"
    running "$root" "$bin" || tg_die "postgres started but does not answer on 127.0.0.1:$PORT" "$root/postgres.log"
    tg_log "started on 127.0.0.1:$PORT (data $root/data)"
  fi
  {
    echo "# written by hack/local-postgres.sh; source it"
    [ "$root" = "$PG_DIR/pg" ] ||
      echo "# data is in $root because user postgres cannot traverse to $PG_DIR"
    echo "export TG_PG_URL=postgresql+asyncpg://postgres@127.0.0.1:$PORT/postgres"
    echo "export TG_PG_PORT=$PORT"
    echo "export TG_PG_ROOT=$root"
    echo "export TG_PG_SOCKET_DIR=$root"
    echo "export PGHOST=127.0.0.1"
    echo "export PGPORT=$PORT"
    echo "export PGUSER=postgres"
  } | tg_write_atomic "$ENV_FILE"
  tg_log "ready (source $ENV_FILE)"
}

cmd_status() {
  local bin root
  bin=$(pg_bin)
  root=$(pg_root)
  if running "$root" "$bin"; then
    echo "postgres: running on 127.0.0.1:$PORT, data $root/data"
    [ -s "$ENV_FILE" ] && sed -n 's/^export TG_PG_URL=/TG_PG_URL=/p' "$ENV_FILE"
    return 0
  fi
  echo "postgres: not running (port $PORT, data $root/data)"
  return 1
}

cmd_down() {
  local wipe=0 bin root
  [ "${1:-}" = --wipe ] && wipe=1
  tg_need_root
  bin=$(pg_bin)
  root=$(pg_root)
  if [ -n "$bin" ] && [ -s "$root/data/PG_VERSION" ]; then
    if as_postgres "$bin/pg_ctl" -D "$root/data" status >/dev/null 2>&1; then
      as_postgres "$bin/pg_ctl" -D "$root/data" -m fast -w -t 30 stop >/dev/null 2>&1 ||
        tg_die "pg_ctl stop failed" "$root/postgres.log"
      tg_log "stopped"
    else
      tg_log "not running"
    fi
  fi
  # pytest's fixtures mark a server they started (tests/support/services.py); it is gone now
  rm -f "$PG_DIR/.started-by-pytest"
  if [ $wipe = 1 ]; then
    case "$root" in
      "$PG_DIR"/pg | /var/tmp/trainguard-pg-*) rm -rf "$root" ;;
      *) tg_die "refusing to wipe unexpected data root $root" ;;
    esac
    rm -f "$ENV_FILE"
    tg_log "wiped $root"
  fi
}

# one `up`/`down` at a time per data directory (several engineers and test sessions share it)
tg_lock() { mkdir -p "$PG_DIR"; exec 9>"$PG_DIR/.lock"; flock 9; }

cmd=${1:-}
[ $# -gt 0 ] && shift
case "$cmd" in
  up)
    [ $# = 0 ] || tg_die "unknown option for up: $1 (see --help)"
    tg_lock
    cmd_up ;;
  down)
    if [ $# -gt 1 ] || { [ $# = 1 ] && [ "$1" != --wipe ]; }; then tg_die "usage: $0 down [--wipe]"; fi
    tg_lock
    cmd_down "$@" ;;
  status) cmd_status ;;
  -h | --help | help) usage ;;
  *) usage >&2; [ -z "$cmd" ] || echo "unknown command: $cmd" >&2; exit 2 ;;
esac
