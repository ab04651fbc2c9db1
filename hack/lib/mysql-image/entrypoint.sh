#!/bin/sh
# The entrypoint of the MariaDB image (hack/build-mysql-image.sh), for the chart's MySQL subchart.
# Environment (the subchart's StatefulSet): MYSQL_ROOT_PASSWORD (required), MYSQL_DATABASE,
# MYSQL_USER and MYSQL_PASSWORD (optional: a database and a user with every right on it).
# /var/lib/mysql is the data directory (the claim), /var/run/mysqld the socket directory.
# Initialised once: the marker .trainguard-initialised is written after the last statement; a data
# directory without it (an initialisation cut short) is emptied and initialised again. Later starts
# keep the data as it is (the passwords of an initialised directory are not changed here).
# Extra arguments are passed to mariadbd.
set -eu
DATADIR=/var/lib/mysql
RUNDIR=/var/run/mysqld
MARKER=$DATADIR/.trainguard-initialised

log() { echo "tg-mariadb-entrypoint: $*" >&2; }
sql_string() { printf "'%s'" "$(printf '%s' "$1" | sed "s/\\\\/\\\\\\\\/g; s/'/''/g")"; }
sql_name() { printf '`%s`' "$(printf '%s' "$1" | sed 's/`/``/g')"; }

initialise() {
  [ -n "${MYSQL_ROOT_PASSWORD:-}" ] || { log "MYSQL_ROOT_PASSWORD is not set: cannot initialise $DATADIR"; exit 1; }
  log "initialising $DATADIR"
  find "$DATADIR" -mindepth 1 -delete
  mariadb-install-db --datadir="$DATADIR" --auth-root-authentication-method=normal \
    --skip-test-db --skip-name-resolve >/dev/null
  sock=$RUNDIR/init.sock
  mariadbd --datadir="$DATADIR" --skip-networking --socket="$sock" --pid-file="$RUNDIR/init.pid" &
  pid=$!
  i=0
  until mariadb-admin --socket="$sock" -uroot status >/dev/null 2>&1; do
    kill -0 "$pid" 2>/dev/null || { log "the server exited while initialising"; exit 1; }
    i=$((i + 1)); [ "$i" -lt 600 ] || { log "the server did not start in 60 s"; exit 1; }
    sleep 0.1
  done
  {
    echo "DELETE FROM mysql.global_priv WHERE User = '' OR (User = 'root' AND Host <> 'localhost');"
    echo "FLUSH PRIVILEGES;"
    echo "ALTER USER 'root'@'localhost' IDENTIFIED BY $(sql_string "$MYSQL_ROOT_PASSWORD");"
    echo "CREATE USER 'root'@'%' IDENTIFIED BY $(sql_string "$MYSQL_ROOT_PASSWORD");"
    echo "GRANT ALL ON *.* TO 'root'@'%' WITH GRANT OPTION;"
    if [ -n "${MYSQL_DATABASE:-}" ]; then
      echo "CREATE DATABASE IF NOT EXISTS $(sql_name "$MYSQL_DATABASE");"
    fi
    if [ -n "${MYSQL_USER:-}" ] && [ -n "${MYSQL_PASSWORD:-}" ]; then
      echo "CREATE USER $(sql_string "$MYSQL_USER")@'%' IDENTIFIED BY $(sql_string "$MYSQL_PASSWORD");"
      [ -z "${MYSQL_DATABASE:-}" ] ||
        echo "GRANT ALL ON $(sql_name "$MYSQL_DATABASE").* TO $(sql_string "$MYSQL_USER")@'%';"
    fi
    echo "FLUSH PRIVILEGES;"
  } | mariadb --socket="$sock" -uroot
  mariadb-admin --socket="$sock" -uroot --password="$MYSQL_ROOT_PASSWORD" shutdown
  wait "$pid" || true
  : > "$MARKER"
  log "initialised $DATADIR (database ${MYSQL_DATABASE:-none}, user ${MYSQL_USER:-none})"
}

[ -e "$MARKER" ] || initialise
log "starting mariadbd on port 3306 (data kept in $DATADIR)"
exec mariadbd --datadir="$DATADIR" --socket="$RUNDIR/mysqld.sock" --pid-file="$RUNDIR/mysqld.pid" \
  --bind-address=0.0.0.0 --port=3306 --skip-name-resolve "$@"
