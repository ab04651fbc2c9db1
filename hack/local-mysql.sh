#!/usr/bin/env bash
# hack/local-mysql.sh: a private MariaDB (MySQL-compatible) server on loopback for development
# and for the audit store's MySQL/MariaDB tests (SQLAlchemy + aiomysql). No system service is
# touched: Debian's `mariadb-server` binaries (MariaDB 10.11 on Debian 12, 11.8 on Debian 13)
# run as root (--user=root) from a data directory of our own, with no system option files
# (--no-defaults: the server's stock character set and collation, as a fresh install has them)
# and a relaxed flush (throw-away data).
#
#   hack/local-mysql.sh up              start (installs mariadb-server if missing); idempotent
#   hack/local-mysql.sh status          print state; exit 1 when it is not running
#   hack/local-mysql.sh down [--wipe]   stop; --wipe also deletes the data
#
# Settings (environment):
#   TG_MYSQL_DIR       <repo>/.local/mysql   data, socket, logs and the env file
#   TG_MYSQL_PORT      13306                  TCP port on 127.0.0.1
#   TG_MYSQL_PASSWORD  trainguard             password of the application user `trainguard`
#
# `up` creates the database `trainguard` and the user `trainguard` (password above), which may
# use that database and any database named `tg_...` (the tests' scratch databases); root has
# no password and is reachable on 127.0.0.1 and on the socket only.
#
# After `up`:  source .local/mysql/env   (TG_MYSQL_URL=mysql+aiomysql://trainguard:...@127.0.0.1:PORT/trainguard,
#                                        TG_MYSQL_ADMIN_URL for root, TG_MYSQL_PORT, TG_MYSQL_SOCKET)
set -euo pipefail
TG_SCRIPT_NAME=local-mysql
# shellcheck source=hack/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"

usage() { sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; }

MY_DIR=${TG_MYSQL_DIR:-$TG_REPO_ROOT/.local/mysql}
PORT=${TG_MYSQL_PORT:-13306}
PASSWORD=${TG_MYSQL_PASSWORD:-trainguard}
ENV_FILE=$MY_DIR/env
DATA=$MY_DIR/data
SOCKET=$MY_DIR/mysqld.sock
PIDFILE=$MY_DIR/mariadbd.pid
LOG=$MY_DIR/error.log
[[ "$PORT" =~ ^[0-9]+$ ]] || tg_die "TG_MYSQL_PORT must be a number, got '$PORT'"
# The password goes into SQL and a URL: keep it to characters that need no quoting in either.
[[ "$PASSWORD" =~ ^[A-Za-z0-9_.-]+$ ]] || tg_die "TG_MYSQL_PASSWORD may hold only letters, digits, '_', '.', '-'"

# The MariaDB client tools: `mariadb-admin`/`mariadb` on every supported release (the `mysql*`
# names are compatibility links that Debian 13 no longer installs by default).
admin() { mariadb-admin --no-defaults --protocol=socket --socket="$SOCKET" -u root "$@"; }
sql() { mariadb --no-defaults --protocol=socket --socket="$SOCKET" -u root --batch -e "$1"; }

running() {   # our server answers on its socket and on the TCP port
  tg_alive "$PIDFILE" && admin ping >/dev/null 2>&1 &&
    mariadb-admin --no-defaults --protocol=tcp -h 127.0.0.1 -P "$PORT" -u root ping >/dev/null 2>&1
}

cmd_up() {
  tg_need_root
  command -v mariadbd >/dev/null && command -v mariadb-install-db >/dev/null || tg_apt_install mariadb-server
  command -v mariadb >/dev/null || tg_apt_install mariadb-client
  mkdir -p "$MY_DIR"
  if [ ! -d "$DATA/mysql" ]; then
    tg_log "mariadb-install-db into $DATA"
    rm -rf "$DATA"
    mariadb-install-db --no-defaults --force --user=root --datadir="$DATA" --auth-root-authentication-method=normal \
      --skip-test-db >"$MY_DIR/install.log" 2>&1 || tg_die "mariadb-install-db failed" "$MY_DIR/install.log"
  fi
  if running; then
    tg_log "already running on 127.0.0.1:$PORT (data $DATA)"
  else
    if mariadb-admin --no-defaults --protocol=tcp -h 127.0.0.1 -P "$PORT" -u root ping >/dev/null 2>&1 ||
      (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null; then
      tg_die "port $PORT on 127.0.0.1 is used by another server: set TG_MYSQL_PORT"
    fi
    rm -f "$SOCKET" "$PIDFILE"
    # fd 9 is our lock (tg_lock): the server must not inherit it. setsid: the server outlives
    # this script and the terminal or test session that ran it.
    setsid mariadbd --no-defaults --user=root --datadir="$DATA" --socket="$SOCKET" --port="$PORT" \
      --bind-address=127.0.0.1 --pid-file="$PIDFILE" --log-error="$LOG" --skip-log-bin \
      --innodb-flush-log-at-trx-commit=2 --max-connections=300 </dev/null >/dev/null 2>&1 9>&- &
    local server=$! i
    for i in $(seq 300); do
      running && break
      kill -0 "$server" 2>/dev/null || tg_die "mariadbd exited at start" "$LOG"
      sleep 0.2
    done
    running || tg_die "mariadbd did not answer on 127.0.0.1:$PORT within 60 s" "$LOG"
    tg_log "started on 127.0.0.1:$PORT (data $DATA)"
  fi
  # The application user, for 127.0.0.1 (TCP) and localhost (socket); idempotent.
  sql "CREATE DATABASE IF NOT EXISTS trainguard;
       CREATE USER IF NOT EXISTS 'trainguard'@'127.0.0.1' IDENTIFIED BY '$PASSWORD';
       CREATE USER IF NOT EXISTS 'trainguard'@'localhost' IDENTIFIED BY '$PASSWORD';
       ALTER USER 'trainguard'@'127.0.0.1' IDENTIFIED BY '$PASSWORD';
       ALTER USER 'trainguard'@'localhost' IDENTIFIED BY '$PASSWORD';
       GRANT ALL PRIVILEGES ON trainguard.* TO 'trainguard'@'127.0.0.1', 'trainguard'@'localhost';
       GRANT ALL PRIVILEGES ON \`tg\\_%\`.* TO 'trainguard'@'127.0.0.1', 'trainguard'@'localhost';" \
    >"$MY_DIR/setup.log" 2>&1 || tg_die "creating the database and user failed" "$MY_DIR/setup.log" "$LOG"
  {
    echo "# written by hack/local-mysql.sh; source it"
    echo "export TG_MYSQL_URL=mysql+aiomysql://trainguard:$PASSWORD@127.0.0.1:$PORT/trainguard"
    echo "export TG_MYSQL_ADMIN_URL=mysql+aiomysql://root@127.0.0.1:$PORT/"
    echo "export TG_MYSQL_PORT=$PORT"
    echo "export TG_MYSQL_SOCKET=$SOCKET"
    echo "export TG_MYSQL_VERSION=$(sql 'SELECT VERSION()' 2>/dev/null | tail -1)"
  } | tg_write_atomic "$ENV_FILE" 600
  tg_log "ready (source $ENV_FILE)"
}

cmd_status() {
  if running; then
    echo "mysql: running on 127.0.0.1:$PORT, data $DATA ($(sql 'SELECT VERSION()' 2>/dev/null | tail -1))"
    [ -s "$ENV_FILE" ] && sed -n 's/^export TG_MYSQL_URL=\(.*\):[^:@]*@/TG_MYSQL_URL=\1:***@/p' "$ENV_FILE"
    return 0
  fi
  echo "mysql: not running (port $PORT, data $DATA)"
  return 1
}

cmd_down() {
  local wipe=0
  [ "${1:-}" = --wipe ] && wipe=1
  tg_need_root
  if tg_alive "$PIDFILE"; then
    # A clean shutdown through the server itself; the pid file is the fallback.
    admin shutdown >/dev/null 2>&1 || true
    tg_stop_pidfiles "$PIDFILE"
    tg_log "stopped"
  else
    rm -f "$PIDFILE"
    tg_log "not running"
  fi
  # pytest's fixtures mark a server they started (tests/support/services.py); it is gone now
  rm -f "$MY_DIR/.started-by-pytest"
  if [ $wipe = 1 ]; then
    rm -rf "$DATA" "$ENV_FILE" "$SOCKET" "$MY_DIR"/*.log
    tg_log "wiped $DATA"
  fi
}

# one `up`/`down` at a time per data directory (several engineers and test sessions share it)
tg_lock() { mkdir -p "$MY_DIR"; exec 9>"$MY_DIR/.lock"; flock 9; }

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
