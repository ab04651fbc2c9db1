#!/usr/bin/env bash
# hack/local-alertmanager.sh: a real Alertmanager on loopback routing every alert to one webhook
# receiver, and promtool, for testing Trainguard's alerting rules (deploy/prometheus/). No system
# service is touched: Debian's `prometheus-alertmanager` (0.25) and `prometheus` (for promtool)
# packages are installed if missing, and the daemon runs from a state directory of our own.
#
#   hack/local-alertmanager.sh install          install both packages if missing
#   hack/local-alertmanager.sh path             install if needed, then print NAME=PATH lines
#                                               (alertmanager=..., promtool=...)
#   hack/local-alertmanager.sh up WEBHOOK_URL   start it, routing every alert to WEBHOOK_URL at once
#                                               (group_wait 0s); restarted when the URL changes;
#                                               writes $TG_AM_DIR/env
#   hack/local-alertmanager.sh status           print state; exit 1 when it is not running
#   hack/local-alertmanager.sh down [--wipe]    stop it; --wipe also deletes its data
#
# Settings (environment; tests/support/workers.py shifts them per test slot):
#   TG_AM_DIR    <repo>/.local/alertmanager   state: config, data, log, pid, env
#   TG_AM_PORT   19093                        HTTP port on 127.0.0.1 (clustering is off)
#
# After `up`:  source .local/alertmanager/env   (TG_ALERTMANAGER_URL)
set -euo pipefail
TG_SCRIPT_NAME=local-alertmanager
# shellcheck source=hack/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"

usage() { sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; }

AM_DIR=${TG_AM_DIR:-$TG_REPO_ROOT/.local/alertmanager}
AM_PORT=${TG_AM_PORT:-19093}
AM_BIN=/usr/bin/prometheus-alertmanager
PROMTOOL=/usr/bin/promtool
ENV_FILE=$AM_DIR/env
[[ "$AM_PORT" =~ ^[0-9]+$ ]] || tg_die "TG_AM_PORT must be a number, got '$AM_PORT'"

cmd_install() {
  if [ ! -x "$AM_BIN" ] || [ ! -x "$PROMTOOL" ]; then
    tg_need_root
    tg_apt_install prometheus-alertmanager prometheus
  fi
  [ -x "$AM_BIN" ] || tg_die "the prometheus-alertmanager package did not provide $AM_BIN"
  [ -x "$PROMTOOL" ] || tg_die "the prometheus package did not provide $PROMTOOL"
}

cmd_path() {
  cmd_install
  echo "alertmanager=$AM_BIN"
  echo "promtool=$PROMTOOL"
}

write_config() {   # write_config WEBHOOK_URL
  [[ "$1" =~ ^https?://[A-Za-z0-9.:_/-]+$ ]] || tg_die "webhook URL '$1' is not http(s)://host:port/path"
  {
    echo "# written by hack/local-alertmanager.sh"
    echo "route: {receiver: hook, group_by: [alertname], group_wait: 0s, group_interval: 1s, repeat_interval: 1h}"
    echo "receivers:"
    echo "  - name: hook"
    echo "    webhook_configs: [{url: '$1', send_resolved: true}]"
  } | tg_write_atomic "$AM_DIR/alertmanager.yml"
}

ready() { curl -fsS -m 2 "http://127.0.0.1:$AM_PORT/-/ready" >/dev/null 2>&1; }

cmd_up() {
  [ $# -eq 1 ] || tg_die "usage: up WEBHOOK_URL"
  local old=""
  cmd_install
  mkdir -p "$AM_DIR/data"
  [ -s "$AM_DIR/alertmanager.yml" ] && old=$(cat "$AM_DIR/alertmanager.yml")
  write_config "$1"
  [ "$old" != "$(cat "$AM_DIR/alertmanager.yml")" ] && tg_stop_pidfiles "$AM_DIR/alertmanager.pid"
  if ! tg_alive "$AM_DIR/alertmanager.pid"; then
    ready && tg_die "port $AM_PORT is used by another server: set TG_AM_PORT"
    (cd / && exec setsid "$AM_BIN" --config.file="$AM_DIR/alertmanager.yml" --storage.path="$AM_DIR/data" \
      --web.listen-address="127.0.0.1:$AM_PORT" --cluster.listen-address= --log.level=warn \
      </dev/null >"$AM_DIR/alertmanager.log" 2>&1 9>&-) &
    echo $! > "$AM_DIR/alertmanager.pid"
  fi
  for _ in $(seq 300); do
    ready && break
    sleep 0.1
  done
  ready || tg_die "alertmanager did not become ready on 127.0.0.1:$AM_PORT" "$AM_DIR/alertmanager.log"
  {
    echo "# written by hack/local-alertmanager.sh; source it"
    echo "export TG_ALERTMANAGER_URL=http://127.0.0.1:$AM_PORT"
  } | tg_write_atomic "$ENV_FILE"
  tg_log "alertmanager on 127.0.0.1:$AM_PORT (source $ENV_FILE)"
}

cmd_status() {
  if tg_alive "$AM_DIR/alertmanager.pid" && ready; then
    echo "alertmanager: running on 127.0.0.1:$AM_PORT"
  else
    echo "alertmanager: not running (port $AM_PORT)"
    return 1
  fi
}

cmd_down() {
  tg_stop_pidfiles "$AM_DIR/alertmanager.pid"
  rm -f "$AM_DIR/.started-by-pytest"
  if [ "${1:-}" = --wipe ]; then
    rm -rf "$AM_DIR/data" "$AM_DIR/alertmanager.yml" "$ENV_FILE" "$AM_DIR"/*.log
    tg_log "wiped $AM_DIR"
  fi
  tg_log "stopped"
}

# one command at a time per state directory
tg_lock() { mkdir -p "$AM_DIR"; exec 9>"$AM_DIR/.lock"; flock 9; }

cmd=${1:-}
[ $# -gt 0 ] && shift
case "$cmd" in
  install) tg_lock; cmd_install ;;
  path) tg_lock; cmd_path ;;
  up) tg_lock; cmd_up "$@" ;;
  status) cmd_status ;;
  down) tg_lock; cmd_down "$@" ;;
  -h | --help | help) usage ;;
  *) usage >&2; exit 2 ;;
esac
