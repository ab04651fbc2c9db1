#!/usr/bin/env bash
# hack/local-victorialogs.sh: a private VictoriaLogs server on loopback, the log store that job
# output is read from when Trainguard's victorialogs_url is set (tests, demos, development).
# The binary is compiled once from the Go module registry (go install) and cached outside the
# repository; the server runs from a data directory of our own.
#
#   hack/local-victorialogs.sh build     build (or reuse) the cached binary
#   hack/local-victorialogs.sh path      build if needed, print the binary's path
#   hack/local-victorialogs.sh up        build if needed, start the server, wait for /health
#   hack/local-victorialogs.sh status    print state; exit 1 when it is not running
#   hack/local-victorialogs.sh down [--wipe]   stop; --wipe also deletes the data
#
# Settings (environment):
#   TG_VLOGS_PORT    9428                                  HTTP port on 127.0.0.1
#   TG_VLOGS_DIR     <repo>/.local/victorialogs            data, log, pid and env file
#   TG_VLOGS_CACHE   ${XDG_CACHE_HOME:-$HOME/.cache}/trainguard/victorialogs   compiled binaries
#
# After `up`:  source .local/victorialogs/env   (TRAINGUARD_VICTORIALOGS_URL=http://127.0.0.1:PORT)
set -euo pipefail
TG_SCRIPT_NAME=local-victorialogs
# shellcheck source=hack/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"

usage() { sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; }

VERSION=v1.52.1
MODULE=github.com/VictoriaMetrics/VictoriaLogs/app/victoria-logs
PORT=${TG_VLOGS_PORT:-9428}
DIR=${TG_VLOGS_DIR:-$TG_REPO_ROOT/.local/victorialogs}
CACHE_ROOT=${TG_VLOGS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/trainguard/victorialogs}
BIN=$CACHE_ROOT/$VERSION/victoria-logs
PIDFILE=$DIR/victoria-logs.pid
[[ "$PORT" =~ ^[0-9]+$ ]] || tg_die "TG_VLOGS_PORT must be a number, got '$PORT'"

cmd_build() {
  [ -x "$BIN" ] && return 0
  command -v go >/dev/null || tg_die "the Go toolchain is needed to build VictoriaLogs (go on PATH)"
  mkdir -p "$CACHE_ROOT"
  # One build at a time per machine; the binary appears only when the build succeeded.
  exec 8>"$CACHE_ROOT/.build.lock"
  flock 8
  if [ ! -x "$BIN" ]; then
    local tmp log=$CACHE_ROOT/build-$VERSION.log start
    tmp=$(mktemp -d "$CACHE_ROOT/.build.XXXXXX")
    start=$(date +%s)
    tg_log "building VictoriaLogs $VERSION (go install, about a minute cold; log: $log)"
    if ! (cd "$tmp" && GOBIN=$tmp GOTOOLCHAIN=local GOFLAGS="-buildvcs=false -p=2" \
        nice -n 10 go install "$MODULE@$VERSION") >"$log" 2>&1; then
      rm -rf "$tmp"
      tg_die "go install $MODULE@$VERSION failed" "$log"
    fi
    mkdir -p "${BIN%/*}"
    mv "$tmp/victoria-logs" "$BIN"
    rm -rf "$tmp"
    tg_log "built in $(($(date +%s) - start)) s: $BIN"
  fi
  exec 8>&-
}

healthy() { curl -fsS --max-time 2 "http://127.0.0.1:$PORT/health" 2>/dev/null | grep -q OK; }

cmd_up() {
  cmd_build
  mkdir -p "$DIR/data"
  if tg_alive "$PIDFILE" && healthy; then
    tg_log "already running on 127.0.0.1:$PORT"
  else
    # fd 8/9 are locks of ours: the server must not inherit them
    "$BIN" -storageDataPath="$DIR/data" -httpListenAddr="127.0.0.1:$PORT" -loggerLevel=WARN \
      >"$DIR/victoria-logs.log" 2>&1 8>&- 9>&- &
    echo $! > "$PIDFILE"
    local i
    for i in $(seq 1 100); do
      healthy && break
      tg_alive "$PIDFILE" || tg_die "victoria-logs exited at start" "$DIR/victoria-logs.log"
      sleep 0.1
      [ "$i" = 100 ] && tg_die "victoria-logs did not answer /health within 10 s" "$DIR/victoria-logs.log"
    done
  fi
  echo "export TRAINGUARD_VICTORIALOGS_URL=http://127.0.0.1:$PORT" | tg_write_atomic "$DIR/env"
  tg_log "VictoriaLogs $VERSION on http://127.0.0.1:$PORT (source $DIR/env)"
}

cmd_down() {
  tg_stop_pidfiles "$PIDFILE"
  rm -f "$PIDFILE" "$DIR/env"
  if [ "${1:-}" = --wipe ]; then rm -rf "$DIR/data"; fi
  tg_log "stopped"
}

cmd_status() {
  echo "binary:  $([ -x "$BIN" ] && echo "$BIN" || echo "not built (run: $0 build)")"
  if tg_alive "$PIDFILE" && healthy; then
    echo "server:  running on http://127.0.0.1:$PORT (pid $(cat "$PIDFILE"))"
  else
    echo "server:  not running"
    return 1
  fi
}

case "${1:-}" in
  build) cmd_build ;;
  path) cmd_build; echo "$BIN" ;;
  up) cmd_up ;;
  down) shift; cmd_down "$@" ;;
  status) cmd_status ;;
  -h|--help|help) usage ;;
  *) usage >&2; exit 2 ;;
esac
