#!/usr/bin/env bash
# hack/local-kube.sh: a real Kubernetes API (etcd + kube-apiserver; no kubelet and no
# controllers unless `--cluster`) on loopback, for developing and testing the kopf operator shell (k8s/)
# against the real API machinery: CRD validation, printer columns, RBAC, ServiceAccount
# tokens, watches. The binaries are compiled from the Go module proxy with the local Go
# toolchain (no container, no download of release binaries), into a cache outside the
# repository so a fresh clone on the same machine reuses them.
#
#   hack/local-kube.sh build            build (or reuse) kube-apiserver, kubectl, etcd; link them
#                                        into $TG_KUBE_DIR/bin
#   hack/local-kube.sh up               build if needed, start etcd + kube-apiserver, wait for
#                                        /readyz, write $TG_KUBE_DIR/kubeconfig; idempotent
#   hack/local-kube.sh up --cluster     also the simulated cluster (hack/lib/sim-cluster.sh):
#                                        controller-manager, scheduler, kwok with fake GPU nodes
#                                        kwok-node-1..4, JobSet and training-operator controllers
#   hack/local-kube.sh build --cluster  build (or reuse) the simulated cluster's binaries too
#   hack/local-kube.sh up --cluster --real-node
#                                        also a real kubelet node real-node-1 (containerd + runc,
#                                        pods really run; kube-proxy routes Services, CoreDNS
#                                        answers cluster.local; hack/lib/real-node.sh); needs root
#   hack/local-kube.sh build --real-node  build (or reuse) the real node's kubelet, kube-proxy,
#                                        CoreDNS (tools/coredns) and pause binary, install its
#                                        Debian packages (for a background build in CI)
#   hack/local-kube.sh up --cluster --slinky   also SchedMD's slurm-operator with a real Slurm 26.05
#                                        (hack/lib/slinky.sh); writes .local/slinky/env
#   hack/local-kube.sh build --slinky   build (or reuse) slurm-operator (pinned; Go module registry)
#   hack/local-kube.sh status [--cluster]  print state; exit 0 only when the API answers (and,
#                                        with --cluster, every simulated-cluster component)
#   hack/local-kube.sh down [--wipe]    stop everything (no process left); --wipe also deletes the
#                                        etcd data, the keys and the logs
#   hack/local-kube.sh pin VERSION      maintainers: regenerate tools/kube/go.mod + go.sum for
#                                        another Kubernetes version (e.g. v1.36.3)
#
# Settings (environment):
#   TG_KUBE_DIR        <repo>/.local/kube   state: bin/, kubeconfig, pki/, etcd/, logs/, pids
#   TG_KUBE_API_PORT   16443                kube-apiserver HTTPS port on 127.0.0.1
#   TG_ETCD_PORT       12379                etcd client port on 127.0.0.1
#   TG_ETCD_PEER_PORT  12380                etcd peer port on 127.0.0.1
#   TG_KUBE_TIMEOUT    180                  seconds to wait for /readyz
#   TG_KUBE_CACHE      ${XDG_CACHE_HOME:-$HOME/.cache}/trainguard/kube   compiled binaries
#   TG_SIM_PORT_BASE   20250                first port of the simulated cluster (see hack/lib/sim-cluster.sh)
#
# The version is pinned ONCE, by the k8s.io/kubernetes requirement in tools/kube/go.mod.
# After `up`:  export KUBECONFIG=$TG_KUBE_DIR/kubeconfig; $TG_KUBE_DIR/bin/kubectl get ns
set -euo pipefail
TG_SCRIPT_NAME=local-kube
# shellcheck source=hack/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"

usage() { sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; }

MOD_DIR=$TG_REPO_ROOT/tools/kube
KUBE_DIR=${TG_KUBE_DIR:-$TG_REPO_ROOT/.local/kube}
API_PORT=${TG_KUBE_API_PORT:-16443}
ETCD_PORT=${TG_ETCD_PORT:-12379}
ETCD_PEER_PORT=${TG_ETCD_PEER_PORT:-12380}
TIMEOUT=${TG_KUBE_TIMEOUT:-180}
CACHE_ROOT=${TG_KUBE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/trainguard/kube}
need_number() { [[ "$2" =~ ^[0-9]+$ ]] || tg_die "$1 must be a number, got '$2'"; }
need_number TG_KUBE_API_PORT "$API_PORT"
need_number TG_ETCD_PORT "$ETCD_PORT"
need_number TG_ETCD_PEER_PORT "$ETCD_PEER_PORT"
need_number TG_KUBE_TIMEOUT "$TIMEOUT"
if [ "$API_PORT" = "$ETCD_PORT" ] || [ "$API_PORT" = "$ETCD_PEER_PORT" ] || [ "$ETCD_PORT" = "$ETCD_PEER_PORT" ]; then
  tg_die "TG_KUBE_API_PORT, TG_ETCD_PORT and TG_ETCD_PEER_PORT must differ ($API_PORT, $ETCD_PORT, $ETCD_PEER_PORT)"
fi

BIN=$KUBE_DIR/bin
PKI=$KUBE_DIR/pki
LOGS=$KUBE_DIR/logs
KUBECONFIG_FILE=$KUBE_DIR/kubeconfig
ETCD_PID=$KUBE_DIR/etcd.pid
API_PID=$KUBE_DIR/kube-apiserver.pid
SERVER=https://127.0.0.1:$API_PORT
CLUSTER=0

# --- versions: read from the committed scratch module, the single pin -------------------

mod_version() {   # mod_version MODULE: the version tools/kube/go.mod requires
  [ -s "$MOD_DIR/go.mod" ] || tg_die "$MOD_DIR/go.mod is missing (run: $0 pin v1.36.3)"
  local v
  v=$(sed -n "s#^[[:space:]]*$1 \(v[^ ]*\).*#\1#p" "$MOD_DIR/go.mod" | head -1)
  [ -n "$v" ] || tg_die "$MOD_DIR/go.mod does not require $1"
  echo "$v"
}
K8S_VERSION=$(mod_version k8s.io/kubernetes)
ETCD_VERSION=$(mod_version go.etcd.io/etcd/server/v3)
CACHE_BIN=$CACHE_ROOT/$K8S_VERSION/bin

# --- build -----------------------------------------------------------------------------

# cached_ok DIR: the three binaries in DIR exist and report the pinned versions.
cached_ok() {
  local d=$1
  [ -x "$d/kube-apiserver" ] && [ -x "$d/kubectl" ] && [ -x "$d/etcd" ] || return 1
  # Output captured first: `cmd | grep -q` can fail under pipefail when grep exits early.
  local out
  out=$("$d/kube-apiserver" --version 2>/dev/null) && grep -qx "Kubernetes $K8S_VERSION" <<<"$out" || return 1
  out=$("$d/kubectl" version --client 2>/dev/null) && grep -qx "Client Version: $K8S_VERSION" <<<"$out" || return 1
  out=$("$d/etcd" --version 2>/dev/null) && grep -qx "etcd Version: ${ETCD_VERSION#v}" <<<"$out" || return 1
}

need_go() {
  command -v go >/dev/null || tg_die "the Go toolchain is needed to build kube-apiserver (go >= 1.26 on PATH)"
  local want have
  want=$(sed -n 's/^go \([0-9.]*\)$/\1/p' "$MOD_DIR/go.mod")
  have=$(go env GOVERSION | sed 's/^go//')
  [ "$(printf '%s\n%s\n' "$want" "$have" | sort -V | head -1)" = "$want" ] ||
    tg_die "tools/kube/go.mod needs Go >= $want, found go$have"
}

cmd_build() {
  mkdir -p "$CACHE_ROOT" "$BIN"
  local b
  # Cached already: no lock needed (a build moves its binaries into place in one rename), so a plain
  # apiserver test does not wait for the simulated cluster's builds, which hold the lock for long.
  if cached_ok "$CACHE_BIN"; then
    tg_log "cached binaries for $K8S_VERSION (etcd $ETCD_VERSION) in $CACHE_BIN"
    for b in kube-apiserver kubectl etcd; do ln -sfn "$CACHE_BIN/$b" "$BIN/$b"; done
    return 0
  fi
  # One build at a time per machine (two engineers, or CI next to a developer).
  exec 8>"$CACHE_ROOT/.build.lock"
  if ! flock -n 8; then
    tg_log "another build holds $CACHE_ROOT/.build.lock: waiting"
    flock 8
  fi
  if cached_ok "$CACHE_BIN"; then
    tg_log "cached binaries for $K8S_VERSION (etcd $ETCD_VERSION) in $CACHE_BIN"
  else
    need_go
    local tmp log start ld ver
    tmp=$(mktemp -d "$CACHE_ROOT/.build.XXXXXX")
    log=$CACHE_ROOT/build-$K8S_VERSION.log
    ver=${K8S_VERSION#v}
    ld="-s -w -X k8s.io/component-base/version.gitVersion=$K8S_VERSION"
    ld+=" -X k8s.io/component-base/version.gitMajor=${ver%%.*}"
    ver=${ver#*.}
    ld+=" -X k8s.io/component-base/version.gitMinor=${ver%%.*} -X k8s.io/component-base/version.gitTreeState=clean"
    tg_log "building kube-apiserver + kubectl $K8S_VERSION and etcd $ETCD_VERSION (cold: about 5 min on 2 cores; log $log)"
    start=$(date +%s)
    # -mod=readonly: the committed go.sum is the whole truth, the build never edits it.
    if ! (
      cd "$MOD_DIR" &&
        export CGO_ENABLED=0 GOTOOLCHAIN=local GOFLAGS="-mod=readonly -buildvcs=false -p=2" &&
        nice -n 10 go build -trimpath -ldflags "$ld" -o "$tmp/" \
          k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kubectl &&
        nice -n 10 go build -trimpath -ldflags "-s -w" -o "$tmp/etcd" go.etcd.io/etcd/server/v3
    ) >"$log" 2>&1; then
      rm -rf "$tmp"
      tg_die "go build failed" "$log"
    fi
    cached_ok "$tmp" || { rm -rf "$tmp"; tg_die "the built binaries do not report $K8S_VERSION / etcd $ETCD_VERSION" "$log"; }
    mkdir -p "${CACHE_BIN%/*}"
    rm -rf "$CACHE_BIN"
    mv "$tmp" "$CACHE_BIN"
    tg_log "built in $(($(date +%s) - start)) s: $(du -sh "$CACHE_BIN" | cut -f1) in $CACHE_BIN"
  fi
  flock -u 8
  exec 8>&-
  for b in kube-apiserver kubectl etcd; do ln -sfn "$CACHE_BIN/$b" "$BIN/$b"; done
}

# --- pin (maintainers) -----------------------------------------------------------------

# Regenerate the scratch module for another release: require k8s.io/kubernetes at VERSION
# and replace every staging module (which k8s requires at the unpublished v0.0.0) with its
# published v0.X.Y; etcd server at the version k8s.io/apiserver itself requires.
# mod_file MODULE@VERSION: path of its go.mod in the module cache (downloaded if needed).
mod_file() {
  go mod download -json "$1" 2>/dev/null | python3 -c '
import json, sys
info = json.load(sys.stdin)
if not info.get("GoMod"):
    sys.exit("go mod download: " + info.get("Error", "no go.mod"))
print(info["GoMod"])'
}

cmd_pin() {
  local k8s=${1:-} stg gomod m etcd
  [[ "$k8s" =~ ^v1\.[0-9]+\.[0-9]+$ ]] || tg_die "pin needs a release version like v1.36.3, got '${k8s}'"
  need_go
  stg=v0.${k8s#v1.}
  export GOTOOLCHAIN=local GOFLAGS="-mod=mod -buildvcs=false -p=2"
  # Work in a scratch directory: the committed go.mod/go.sum change only when all went well.
  PIN_WORK=$(mktemp -d)
  trap 'rm -rf "$PIN_WORK"' EXIT
  cd "$PIN_WORK"
  go mod init trainguard.invalid/kubebins 2>/dev/null
  gomod=$(mod_file "k8s.io/kubernetes@$k8s") || tg_die "cannot download k8s.io/kubernetes@$k8s"
  go mod edit -go="$(sed -n 's/^go //p' "$gomod")"
  if grep -q '^godebug default=' "$gomod"; then go mod edit -godebug="$(sed -n 's/^godebug //p' "$gomod")"; fi
  for m in $(sed -n 's#^[[:space:]]*\(k8s\.io/[^ ]*\) => \./staging/src/.*#\1#p' "$gomod"); do
    go mod edit -replace="$m=$m@$stg"
  done
  gomod=$(mod_file "k8s.io/apiserver@$stg") || tg_die "cannot download k8s.io/apiserver@$stg"
  etcd=$(sed -n 's#^[[:space:]]*go.etcd.io/etcd/server/v3 \(v[^ ]*\).*#\1#p' "$gomod")
  [ -n "$etcd" ] || tg_die "cannot find the etcd server version k8s.io/apiserver@$stg requires"
  nice -n 10 go get -tool "k8s.io/kubernetes/cmd/kube-apiserver@$k8s" "k8s.io/kubernetes/cmd/kubectl@$k8s" \
    "k8s.io/kubernetes/cmd/kube-controller-manager@$k8s" "k8s.io/kubernetes/cmd/kube-scheduler@$k8s" \
    "k8s.io/kubernetes/cmd/kubelet@$k8s" \
    "go.etcd.io/etcd/server/v3@$etcd" || tg_die "go get failed for Kubernetes $k8s"
  nice -n 10 go mod tidy || tg_die "go mod tidy failed for Kubernetes $k8s"
  mkdir -p "$MOD_DIR"
  cp go.mod go.sum "$MOD_DIR/"
  tg_log "pinned Kubernetes $k8s (staging $stg), etcd $etcd in $MOD_DIR; now run: $0 build"
}

# --- run -------------------------------------------------------------------------------

# ours PIDFILE NAME: the pid file names a live process started as $BIN/NAME, i.e. by this
# state dir (guards against a recycled pid, someone else's etcd, or another TG_KUBE_DIR).
ours() {
  tg_alive "$1" || return 1
  local argv0
  IFS= read -r -d '' argv0 < "/proc/$(cat "$1")/cmdline" 2>/dev/null || return 1
  [ "$argv0" = "$BIN/$2" ]
}

admin_token() { [ -s "$PKI/tokens.csv" ] && cut -d, -f1 "$PKI/tokens.csv"; }

api_ready() {   # the API answers /readyz for our admin token, with our CA
  local tok
  tok=$(admin_token) || return 1
  [ -s "$PKI/ca.crt" ] || return 1
  [ "$(curl -sS --max-time 5 --cacert "$PKI/ca.crt" -H "Authorization: Bearer $tok" "$SERVER/readyz" 2>/dev/null)" = ok ]
}

port_busy() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# Keys and certificates, made once per state dir and kept across down/up so kubeconfigs
# and ServiceAccount tokens already handed out stay valid.
make_pki() {
  mkdir -p "$PKI"
  chmod 700 "$PKI"
  if [ ! -s "$PKI/ca.crt" ]; then
    openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj "/CN=trainguard-local-kube-ca" \
      -keyout "$PKI/ca.key" -out "$PKI/ca.crt" 2>/dev/null || tg_die "openssl: cannot create the CA"
    rm -f "$PKI/apiserver.crt"
  fi
  # The serving certificate names the `kubernetes` Service's ClusterIP (10.0.0.1) too, as a real
  # apiserver's does: pods on the real node reach it there (in-cluster config); an older one is remade.
  if [ -s "$PKI/apiserver.crt" ] && ! openssl x509 -in "$PKI/apiserver.crt" -noout -ext subjectAltName 2>/dev/null |
      grep -q 'IP Address:10.0.0.1\b'; then
    rm -f "$PKI/apiserver.crt"
  fi
  if [ ! -s "$PKI/apiserver.crt" ]; then
    openssl req -newkey rsa:2048 -nodes -subj "/CN=kube-apiserver" \
      -keyout "$PKI/apiserver.key" -out "$PKI/apiserver.csr" 2>/dev/null || tg_die "openssl: cannot create the server key"
    printf 'subjectAltName=IP:127.0.0.1,IP:10.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc\nextendedKeyUsage=serverAuth\n' \
      > "$PKI/apiserver.ext"
    openssl x509 -req -in "$PKI/apiserver.csr" -CA "$PKI/ca.crt" -CAkey "$PKI/ca.key" -CAcreateserial \
      -days 3650 -extfile "$PKI/apiserver.ext" -out "$PKI/apiserver.crt" 2>/dev/null ||
      tg_die "openssl: cannot sign the server certificate"
    rm -f "$PKI/apiserver.csr" "$PKI/apiserver.ext"
  fi
  if [ ! -s "$PKI/sa.key" ]; then
    openssl genrsa -out "$PKI/sa.key" 2048 2>/dev/null || tg_die "openssl: cannot create the ServiceAccount key"
    openssl rsa -in "$PKI/sa.key" -pubout -out "$PKI/sa.pub" 2>/dev/null || tg_die "openssl: cannot derive sa.pub"
  fi
  if [ ! -s "$PKI/tokens.csv" ]; then
    # token,user,uid,"groups": the admin is in system:masters, which RBAC always allows.
    printf '%s,admin,admin,"system:masters"\n' "$(openssl rand -hex 32)" | tg_write_atomic "$PKI/tokens.csv" 600
  fi
  chmod 600 "$PKI"/*.key
}

write_kubeconfig() {
  local ca
  ca=$(base64 -w0 < "$PKI/ca.crt")
  tg_write_atomic "$KUBECONFIG_FILE" 600 <<EOF
apiVersion: v1
kind: Config
clusters:
- name: trainguard-local
  cluster:
    server: $SERVER
    certificate-authority-data: $ca
users:
- name: admin
  user:
    token: $(admin_token)
contexts:
- name: trainguard-local
  context:
    cluster: trainguard-local
    user: admin
current-context: trainguard-local
EOF
}

# start NAME PIDFILE LOG ARGV...: run a daemon in its own session, detached from our
# stdio (a caller reading our output must not wait for the daemon) and from the lock fd.
start() {
  local name=$1 pidfile=$2 log=$3
  shift 3
  setsid "$@" </dev/null >>"$log" 2>&1 9>&- &
  echo $! > "$pidfile"
  STARTED+=("$pidfile")
  tg_log "started $name (pid $!, log $log)"
}

# A failed `up` stops what it started itself, so no half-started daemon is left behind.
STARTED=()
UP_DONE=0
stop_started_on_failure() {
  if [ "$UP_DONE" = 0 ] && [ ${#STARTED[@]} -gt 0 ]; then
    tg_log "start-up failed: stopping what this run started"
    tg_stop_pidfiles "${STARTED[@]}"
  fi
}

wait_for() {   # wait_for WHAT PIDFILE LOG CHECK...: until CHECK succeeds or the process dies
  local what=$1 pidfile=$2 log=$3 deadline
  shift 3
  deadline=$(($(date +%s) + TIMEOUT))
  until "$@"; do
    tg_alive "$pidfile" || tg_die "$what exited during start-up" "$log"
    [ "$(date +%s)" -lt "$deadline" ] || tg_die "$what not ready after ${TIMEOUT}s" "$log"
    sleep 0.5
  done
}

etcd_healthy() { curl -sS --max-time 3 "http://127.0.0.1:$ETCD_PORT/health" 2>/dev/null | grep -q '"health":"true"'; }

cmd_up() {
  mkdir -p "$KUBE_DIR" "$LOGS"
  exec 9>"$KUBE_DIR/.lock"
  flock -w 600 9 || tg_die "another local-kube.sh holds $KUBE_DIR/.lock"
  if ours "$API_PID" kube-apiserver && api_ready; then
    write_kubeconfig
    tg_log "already running at $SERVER; kubeconfig $KUBECONFIG_FILE"
    return 0
  fi
  command -v curl >/dev/null || tg_apt_install curl
  command -v openssl >/dev/null || tg_apt_install openssl
  cmd_build
  make_pki

  local need_etcd=0 need_api=0
  ours "$ETCD_PID" etcd || need_etcd=1
  ours "$API_PID" kube-apiserver || need_api=1
  # All ports checked before anything starts.
  if [ $need_etcd = 1 ]; then
    port_busy "$ETCD_PORT" && tg_die "port $ETCD_PORT (TG_ETCD_PORT) is taken by another process"
    port_busy "$ETCD_PEER_PORT" && tg_die "port $ETCD_PEER_PORT (TG_ETCD_PEER_PORT) is taken by another process"
  fi
  if [ $need_api = 1 ]; then
    port_busy "$API_PORT" && tg_die "port $API_PORT (TG_KUBE_API_PORT) is taken by another process"
  fi
  trap stop_started_on_failure EXIT

  if [ $need_etcd = 1 ]; then
    rm -f "$ETCD_PID"
    # --unsafe-no-fsync: throw-away test data, and fsync on a shared disk makes etcd slow.
    start etcd "$ETCD_PID" "$LOGS/etcd.log" "$BIN/etcd" --name default --data-dir "$KUBE_DIR/etcd" \
      --listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
      --listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
      --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
      --initial-cluster "default=http://127.0.0.1:$ETCD_PEER_PORT" \
      --unsafe-no-fsync --log-level warn
  fi
  wait_for etcd "$ETCD_PID" "$LOGS/etcd.log" etcd_healthy

  if [ $need_api = 1 ]; then
    rm -f "$API_PID"
    # Flags after controller-runtime's envtest, with RBAC instead of AlwaysAllow, a static
    # admin token, and ServiceAccount signing keys so `kubectl create token` works.
    # ServiceAccount admission is off without --cluster: no controller creates the `default`
    # ServiceAccount. With --cluster the controller-manager does, and the admission plugin is on:
    # it mounts the pod's ServiceAccount token, which a pod on the real node (the chart's operator)
    # needs to reach the API. The second block is for the simulated cluster, harmless without it:
    # Node authorization, the kubelet (kwok) reached on its InternalIP for logs, webhooks
    # resolved to endpoints, a front-proxy CA that needs its allowed name, no loopback
    # Endpoints for the `kubernetes` Service, and evictions 10 s after a node goes NotReady
    # instead of 300 s.
    local admission=(--disable-admission-plugins ServiceAccount)
    [ "$CLUSTER" = 0 ] || admission=(--enable-admission-plugins ServiceAccount)
    start kube-apiserver "$API_PID" "$LOGS/kube-apiserver.log" "$BIN/kube-apiserver" \
      --etcd-servers "http://127.0.0.1:$ETCD_PORT" \
      --bind-address 127.0.0.1 --advertise-address 127.0.0.1 --secure-port "$API_PORT" \
      --tls-cert-file "$PKI/apiserver.crt" --tls-private-key-file "$PKI/apiserver.key" \
      --client-ca-file "$PKI/ca.crt" --token-auth-file "$PKI/tokens.csv" \
      --authorization-mode Node,RBAC --anonymous-auth=false \
      --service-account-issuer "$SERVER" --service-account-key-file "$PKI/sa.pub" \
      --service-account-signing-key-file "$PKI/sa.key" \
      --service-cluster-ip-range 10.0.0.0/24 --allow-privileged=true \
      "${admission[@]}" --profiling=false \
      --kubelet-preferred-address-types InternalIP --enable-aggregator-routing=true \
      --requestheader-client-ca-file "$PKI/ca.crt" --requestheader-allowed-names front-proxy-client \
      --endpoint-reconciler-type none \
      --default-not-ready-toleration-seconds 10 --default-unreachable-toleration-seconds 10
  fi
  wait_for kube-apiserver "$API_PID" "$LOGS/kube-apiserver.log" api_ready
  write_kubeconfig
  UP_DONE=1
  tg_log "ready at $SERVER; export KUBECONFIG=$KUBECONFIG_FILE; kubectl is $BIN/kubectl"
}

cmd_down() {
  local wipe=0
  case "${1:-}" in
    "") ;;
    --wipe) wipe=1 ;;
    *) tg_die "down: unknown option '$1' (only --wipe)" ;;
  esac
  mkdir -p "$KUBE_DIR"
  exec 9>"$KUBE_DIR/.lock"
  flock -w 600 9 || tg_die "another local-kube.sh holds $KUBE_DIR/.lock"
  local f name
  rn_down
  slinky_down
  sim_down
  for f in "$API_PID:kube-apiserver" "$ETCD_PID:etcd"; do
    name=${f##*:}
    f=${f%:*}
    if ours "$f" "$name"; then
      tg_log "stopping $name (pid $(cat "$f"))"
      tg_stop_pidfiles "$f"   # the apiserver first: it must not lose etcd mid-request
    else
      rm -f "$f"
    fi
  done
  rm -f "$KUBECONFIG_FILE" "$KUBE_DIR/.started-by-pytest"   # marker: tests/support/services.py
  if [ $wipe = 1 ]; then
    rm -rf "$KUBE_DIR/etcd" "$PKI" "$LOGS" "$SIM_DIR"
    tg_log "wiped etcd data, keys and logs in $KUBE_DIR"
  fi
  tg_log "stopped"
}

cmd_status() {
  local rc=0 f name
  echo "version:         Kubernetes $K8S_VERSION, etcd $ETCD_VERSION"
  echo "binaries:        $(cached_ok "$BIN" && echo "$BIN (ok)" || echo "not built (run: $0 build)")"
  for f in "$ETCD_PID:etcd" "$API_PID:kube-apiserver"; do
    name=${f##*:}
    f=${f%:*}
    if ours "$f" "$name"; then
      printf '%-16s pid %s, rss %s KiB\n' "$name:" "$(cat "$f")" "$(ps -o rss= -p "$(cat "$f")" | tr -d ' ')"
    else
      printf '%-16s not running\n' "$name:"
    fi
  done
  if api_ready; then
    echo "api:             $SERVER ready; kubeconfig $KUBECONFIG_FILE"
  else
    echo "api:             $SERVER not answering"
    rc=1
  fi
  if [ "$SLINKY" = 1 ]; then
    slinky_status || rc=1
  fi
  if [ "$CLUSTER" = 1 ]; then
    sim_status || rc=1
  elif [ -d "$SIM_DIR" ]; then
    sim_status || true
  fi
  return $rc
}

# shellcheck source=hack/lib/sim-cluster.sh
source "$TG_REPO_ROOT/hack/lib/sim-cluster.sh"
# shellcheck source=hack/lib/real-node.sh
source "$TG_REPO_ROOT/hack/lib/real-node.sh"
# shellcheck source=hack/lib/slinky.sh
source "$TG_REPO_ROOT/hack/lib/slinky.sh"
REAL_NODE=0
SLINKY=0
cluster_flag() {   # cluster_flag [--cluster] [--real-node] [--slinky]: set CLUSTER / REAL_NODE / SLINKY, refuse anything else
  local a
  for a in "$@"; do
    case "$a" in
      --cluster) CLUSTER=1 ;;
      --real-node) REAL_NODE=1 ;;
      --slinky) SLINKY=1 ;;
      *) tg_die "unknown option '$a' (only --cluster, --real-node, --slinky)" ;;
    esac
  done
}

case "${1:-}" in
  build) shift; cluster_flag "$@"
    if [ $REAL_NODE = 1 ] && [ $CLUSTER = 0 ] && [ $SLINKY = 0 ]; then rn_build; exit 0; fi
    cmd_build
    if [ $CLUSTER = 1 ]; then sim_build; fi
    if [ $REAL_NODE = 1 ]; then rn_build; fi
    if [ $SLINKY = 1 ]; then slinky_build; fi ;;
  up) shift; cluster_flag "$@"
    [ $REAL_NODE = 0 ] || [ $CLUSTER = 1 ] || tg_die "--real-node joins the simulated cluster: up --cluster --real-node"
    [ $SLINKY = 0 ] || [ $CLUSTER = 1 ] || tg_die "--slinky needs --cluster (its NodeSet pods land on kwok nodes)"
    cmd_up
    if [ $CLUSTER = 1 ]; then sim_up; fi
    if [ $REAL_NODE = 1 ]; then rn_up; fi
    if [ $SLINKY = 1 ]; then slinky_up; fi ;;
  down) shift; cmd_down "$@" ;;
  status) shift; cluster_flag "$@"; cmd_status; if [ $REAL_NODE = 1 ]; then rn_status; fi ;;
  pin) shift; cmd_pin "$@" ;;
  -h | --help | help) usage ;;
  "") usage >&2; exit 2 ;;
  *) echo "unknown command '$1'" >&2; usage >&2; exit 2 ;;
esac
