#!/usr/bin/env bash
# hack/local-prometheus.sh: a real Prometheus and a real VictoriaMetrics on loopback, scraping
# DCGM-exporter-style GPU metrics, for developing and testing Trainguard's GPU evidence
# (signals/gpu_metrics.py) and `trainguard doctor`. No system service is touched: Debian's
# `prometheus` binary and VictoriaMetrics (compiled from the Go module registry into a cache
# outside the repository) run from state directories of our own.
#
#   hack/local-prometheus.sh install        install/build both binaries if missing (cached)
#   hack/local-prometheus.sh path           install if needed, then print NAME=PATH lines
#                                            (prometheus=..., victoria-metrics=...)
#   hack/local-prometheus.sh up [TARGET...] start both, scraping every TARGET (host:port of a
#                                            DCGM-style exporter; default $TG_PROM_TARGETS) every
#                                            second; idempotent (a running pair is restarted when
#                                            the targets change); writes $TG_PROM_DIR/env
#   hack/local-prometheus.sh status         print state; exit 1 when either is not running
#   hack/local-prometheus.sh down [--wipe]  stop both; --wipe also deletes their data
#
# Settings (environment):
#   TG_PROM_DIR         <repo>/.local/prometheus   state: config, data, logs, pids, env
#   TG_PROM_PORT        19090                       Prometheus HTTP port on 127.0.0.1
#   TG_VM_PORT          18428                       VictoriaMetrics HTTP port on 127.0.0.1
#   TG_PROM_TARGETS     (none)                      comma-separated scrape targets for `up`
#   TG_VM_CACHE         ${XDG_CACHE_HOME:-$HOME/.cache}/trainguard/victoriametrics
#
# After `up`:  source .local/prometheus/env   (TG_PROMETHEUS_URL, TG_VICTORIAMETRICS_URL)
set -euo pipefail
TG_SCRIPT_NAME=local-prometheus
# shellcheck source=hack/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"

usage() { sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; }

VM_VERSION=v1.151.0
PROM_DIR=${TG_PROM_DIR:-$TG_REPO_ROOT/.local/prometheus}
PROM_PORT=${TG_PROM_PORT:-19090}
VM_PORT=${TG_VM_PORT:-18428}
VM_CACHE=${TG_VM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/trainguard/victoriametrics}
VM_BIN=$VM_CACHE/$VM_VERSION/victoria-metrics
PROM_BIN=/usr/bin/prometheus
ENV_FILE=$PROM_DIR/env
for v in PROM_PORT VM_PORT; do
  [[ "${!v}" =~ ^[0-9]+$ ]] || tg_die "TG_$v must be a number, got '${!v}'"
done
[ "$PROM_PORT" != "$VM_PORT" ] || tg_die "TG_PROM_PORT and TG_VM_PORT must differ"

cmd_install() {
  if [ ! -x "$PROM_BIN" ]; then
    tg_need_root
    tg_apt_install prometheus
  fi
  [ -x "$PROM_BIN" ] || tg_die "the prometheus package did not provide $PROM_BIN"
  if [ ! -x "$VM_BIN" ]; then
    command -v go >/dev/null || [ -x /usr/local/go/bin/go ] || tg_die "go is needed to build VictoriaMetrics"
    local go=go log
    command -v go >/dev/null || go=/usr/local/go/bin/go
    mkdir -p "$VM_CACHE/$VM_VERSION"
    log=$VM_CACHE/build-$VM_VERSION.log
    tg_log "building victoria-metrics $VM_VERSION into $VM_CACHE/$VM_VERSION (about a minute, cached afterwards)"
    GOBIN=$VM_CACHE/$VM_VERSION.tmp "$go" install \
      "github.com/VictoriaMetrics/VictoriaMetrics/app/victoria-metrics@$VM_VERSION" >"$log" 2>&1 ||
      tg_die "go install victoria-metrics@$VM_VERSION failed" "$log"
    mv -f "$VM_CACHE/$VM_VERSION.tmp/victoria-metrics" "$VM_BIN"
    rmdir "$VM_CACHE/$VM_VERSION.tmp" 2>/dev/null || true
  fi
}

cmd_path() {
  cmd_install
  echo "prometheus=$PROM_BIN"
  echo "victoria-metrics=$VM_BIN"
}

# write_config TARGET...: the scrape configuration both servers read (VictoriaMetrics with
# -promscrape.config.strictParse=false, so the Prometheus-only keys do not stop it).
write_config() {
  local t list=""
  for t in "$@"; do
    [[ "$t" =~ ^[A-Za-z0-9.:_-]+$ ]] || tg_die "scrape target '$t' is not host:port"
    list+="'$t', "
  done
  {
    echo "# written by hack/local-prometheus.sh"
    echo "global: {scrape_interval: 1s, scrape_timeout: 1s, evaluation_interval: 1s}"
    echo "scrape_configs:"
    echo "  - job_name: dcgm"
    echo "    honor_labels: true"
    echo "    static_configs:"
    echo "      - targets: [${list%, }]"
  } | tg_write_atomic "$PROM_DIR/scrape.yml"
}

ready() { curl -fsS -m 2 "$1" >/dev/null 2>&1; }

wait_ready() {   # wait_ready URL LOG NAME
  for _ in $(seq 300); do
    ready "$1" && return 0
    sleep 0.1
  done
  tg_die "$3 did not become ready at $1" "$2"
}

cmd_up() {
  local targets=("$@") old=""
  if [ ${#targets[@]} -eq 0 ] && [ -n "${TG_PROM_TARGETS:-}" ]; then
    IFS=, read -r -a targets <<<"$TG_PROM_TARGETS"
  fi
  cmd_install
  mkdir -p "$PROM_DIR/prometheus-data" "$PROM_DIR/vm-data"
  [ -s "$PROM_DIR/scrape.yml" ] && old=$(cat "$PROM_DIR/scrape.yml")
  write_config "${targets[@]}"
  if [ "$old" != "$(cat "$PROM_DIR/scrape.yml")" ]; then
    tg_stop_pidfiles "$PROM_DIR/prometheus.pid" "$PROM_DIR/vm.pid"
  fi
  if ! tg_alive "$PROM_DIR/prometheus.pid"; then
    ready "http://127.0.0.1:$PROM_PORT/-/ready" && tg_die "port $PROM_PORT is used by another server: set TG_PROM_PORT"
    (cd / && exec setsid "$PROM_BIN" --config.file="$PROM_DIR/scrape.yml" \
      --storage.tsdb.path="$PROM_DIR/prometheus-data" --web.listen-address="127.0.0.1:$PROM_PORT" \
      --log.level=warn </dev/null >"$PROM_DIR/prometheus.log" 2>&1 9>&-) &
    echo $! > "$PROM_DIR/prometheus.pid"
  fi
  if ! tg_alive "$PROM_DIR/vm.pid"; then
    ready "http://127.0.0.1:$VM_PORT/health" && tg_die "port $VM_PORT is used by another server: set TG_VM_PORT"
    # -search.latencyOffset: fresh samples are queryable at once (the default hides the last 30 s)
    (cd / && exec setsid "$VM_BIN" -storageDataPath="$PROM_DIR/vm-data" -httpListenAddr="127.0.0.1:$VM_PORT" \
      -promscrape.config="$PROM_DIR/scrape.yml" -promscrape.config.strictParse=false \
      -search.latencyOffset=1s -loggerLevel=WARN </dev/null >"$PROM_DIR/vm.log" 2>&1 9>&-) &
    echo $! > "$PROM_DIR/vm.pid"
  fi
  wait_ready "http://127.0.0.1:$PROM_PORT/-/ready" "$PROM_DIR/prometheus.log" prometheus
  wait_ready "http://127.0.0.1:$VM_PORT/health" "$PROM_DIR/vm.log" victoria-metrics
  {
    echo "# written by hack/local-prometheus.sh; source it"
    echo "export TG_PROMETHEUS_URL=http://127.0.0.1:$PROM_PORT"
    echo "export TG_VICTORIAMETRICS_URL=http://127.0.0.1:$VM_PORT"
  } | tg_write_atomic "$ENV_FILE"
  tg_log "prometheus on 127.0.0.1:$PROM_PORT, victoria-metrics on 127.0.0.1:$VM_PORT (source $ENV_FILE)"
}

cmd_status() {
  local rc=0
  if tg_alive "$PROM_DIR/prometheus.pid" && ready "http://127.0.0.1:$PROM_PORT/-/ready"; then
    echo "prometheus: running on 127.0.0.1:$PROM_PORT"
  else
    echo "prometheus: not running (port $PROM_PORT)"; rc=1
  fi
  if tg_alive "$PROM_DIR/vm.pid" && ready "http://127.0.0.1:$VM_PORT/health"; then
    echo "victoria-metrics: running on 127.0.0.1:$VM_PORT"
  else
    echo "victoria-metrics: not running (port $VM_PORT)"; rc=1
  fi
  return $rc
}

cmd_down() {
  tg_stop_pidfiles "$PROM_DIR/prometheus.pid" "$PROM_DIR/vm.pid"
  rm -f "$PROM_DIR/.started-by-pytest"
  if [ "${1:-}" = --wipe ]; then
    rm -rf "$PROM_DIR/prometheus-data" "$PROM_DIR/vm-data" "$PROM_DIR/scrape.yml" "$ENV_FILE" \
      "$PROM_DIR"/*.log
    tg_log "wiped $PROM_DIR"
  fi
  tg_log "stopped"
}

# one command at a time per state directory
tg_lock() { mkdir -p "$PROM_DIR"; exec 9>"$PROM_DIR/.lock"; flock 9; }

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
