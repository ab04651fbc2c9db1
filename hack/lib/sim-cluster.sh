# shellcheck shell=bash
# hack/lib/sim-cluster.sh: the simulated cluster behind `hack/local-kube.sh up --cluster`
# (sourced by local-kube.sh, never run; it uses that script's variables and helpers).
#
# On top of local-kube.sh's etcd + kube-apiserver it runs, all on loopback:
#   kube-controller-manager, kube-scheduler   same Kubernetes version and go.mod as the apiserver
#   kwok                                      fake nodes kwok-node-1..4 (8 nvidia.com/gpu each),
#                                             pod lifecycle from hack/lib/sim-cluster/kwok-stages.yaml,
#                                             pod logs from kwok Logs/ClusterLogs objects
#   JobSet controller (+ its webhooks)        sigs.k8s.io/jobset
#   Kubeflow training-operator (+ webhook)    PyTorchJob only
# Nothing runs in a container: the controllers run as processes outside the cluster and
# their webhooks are reached by URL on 127.0.0.1 with a CA of this state dir.
#
# Settings (environment):
#   TG_SIM_PORT_BASE  20250   every port of the simulated cluster derives from it:
#                             +0 kwok (kubelet API for logs, its metrics), +7 controller-manager,
#                             +9 scheduler, +20/+21/+22 JobSet webhook/metrics/health,
#                             +23/+24/+25 training-operator webhook/metrics/health
#   TG_SIM_CACHE      ${XDG_CACHE_HOME:-$HOME/.cache}/trainguard   kwok/, jobset/, training-operator/
#
# State: $TG_KUBE_DIR/cluster/ (configs, webhook PKI, pid files, the training-operator's private
# certificate dir) and $TG_KUBE_DIR/logs/ (one log per daemon). Pod log files for kwok Logs objects can
# live anywhere readable; tests put theirs under $TG_KUBE_DIR/cluster/pod-logs/.

SIM_KWOK_VERSION=v0.8.0
SIM_JOBSET_VERSION=v0.10.1
SIM_TO_VERSION=v1.8.1
SIM_NODES=4   # kwok-node-1..kwok-node-4: a fixed contract, tests and docs name these nodes

SIM_PORT_BASE=${TG_SIM_PORT_BASE:-20250}
need_number TG_SIM_PORT_BASE "$SIM_PORT_BASE"
SIM_KWOK_PORT=$SIM_PORT_BASE
SIM_KCM_PORT=$((SIM_PORT_BASE + 7))
SIM_SCHED_PORT=$((SIM_PORT_BASE + 9))
SIM_JS_WEBHOOK_PORT=$((SIM_PORT_BASE + 20))
SIM_JS_METRICS_PORT=$((SIM_PORT_BASE + 21))
SIM_JS_HEALTH_PORT=$((SIM_PORT_BASE + 22))
SIM_TO_WEBHOOK_PORT=$((SIM_PORT_BASE + 23))
SIM_TO_METRICS_PORT=$((SIM_PORT_BASE + 24))
SIM_TO_HEALTH_PORT=$((SIM_PORT_BASE + 25))

SIM_CACHE=${TG_SIM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/trainguard}
SIM_KWOK_CACHE=$SIM_CACHE/kwok/$SIM_KWOK_VERSION
SIM_JS_CACHE=$SIM_CACHE/jobset/$SIM_JOBSET_VERSION
SIM_TO_CACHE=$SIM_CACHE/training-operator/$SIM_TO_VERSION
SIM_DIR=$KUBE_DIR/cluster
SIM_PKI=$SIM_DIR/pki
SIM_STAGES=$TG_REPO_ROOT/hack/lib/sim-cluster/kwok-stages.yaml
# The training-operator reads its webhook certificate from this fixed path (not a flag).
SIM_TO_CERT_PATH=/tmp/k8s-webhook-server/serving-certs

# name:binary pairs in start order; down stops them in reverse.
SIM_DAEMONS=(kube-controller-manager:kube-controller-manager kube-scheduler:kube-scheduler
  kwok:kwok jobset:jobset-controller training-operator:training-operator.v1)

sim_pidfile() { echo "$SIM_DIR/$1.pid"; }

# --- build -----------------------------------------------------------------------------

sim_go_env() { export CGO_ENABLED=0 GOTOOLCHAIN=local GOFLAGS="-mod=readonly -buildvcs=false -p=2"; }

sim_mod_dir() {   # sim_mod_dir MODULE@VERSION: the module's source dir in the Go module cache
  GOFLAGS=-buildvcs=false go mod download -json "$1" 2>/dev/null | python3 -c '
import json, sys
info = json.load(sys.stdin)
if not info.get("Dir"):
    sys.exit("go mod download: " + info.get("Error", "no Dir"))
print(info["Dir"])'
}

sim_kcm_ok() {
  local out b
  for b in kube-controller-manager kube-scheduler; do
    [ -x "$CACHE_BIN/$b" ] || return 1
    out=$("$CACHE_BIN/$b" --version 2>/dev/null) && grep -qx "Kubernetes $K8S_VERSION" <<<"$out" || return 1
  done
}
sim_kwok_ok() {
  local out
  [ -x "$SIM_KWOK_CACHE/kwok" ] && [ -s "$SIM_KWOK_CACHE/crds/kwok.x-k8s.io_logs.yaml" ] || return 1
  out=$("$SIM_KWOK_CACHE/kwok" --version 2>/dev/null) && grep -q "^kwok version $SIM_KWOK_VERSION " <<<"$out"
}
# JobSet and the training-operator print no version. The training-operator's Go build info
# records the module version `go install` used. JobSet is built from a copy of its module
# (recorded as "(devel)", and -trimpath drops the ldflags from the build info): the build
# writes a stamp with the version and the binary's sha256, checked here (the version is also
# stamped into the binary, which logs it as gitVersion at start).
sim_buildinfo() { command -v go >/dev/null && go version -m "$1" 2>/dev/null; }
sim_js_stamp() { echo "sigs.k8s.io/jobset $SIM_JOBSET_VERSION $(sha256sum < "$1/jobset-controller" | cut -d' ' -f1)"; }
sim_js_ok() {
  [ -x "$SIM_JS_CACHE/jobset-controller" ] && [ -s "$SIM_JS_CACHE/crds/jobset.x-k8s.io_jobsets.yaml" ] || return 1
  [ "$(cat "$SIM_JS_CACHE/jobset-controller.version" 2>/dev/null)" = "$(sim_js_stamp "$SIM_JS_CACHE")" ]
}
sim_to_ok() {
  local out
  [ -x "$SIM_TO_CACHE/training-operator.v1" ] && [ -s "$SIM_TO_CACHE/crds/kubeflow.org_pytorchjobs.yaml" ] || return 1
  out=$(sim_buildinfo "$SIM_TO_CACHE/training-operator.v1") &&
    grep -qP "^\tmod\tgithub.com/kubeflow/training-operator\t$SIM_TO_VERSION\t" <<<"$out"
}

# sim_build_one NAME LOG FUNCTION: run FUNCTION (which builds into $tmp) and time it.
sim_build_one() {
  local name=$1 log=$2 fn=$3 start
  tmp=$(mktemp -d "$SIM_CACHE/.build.XXXXXX")
  tg_log "building $name (cold: minutes on 2 cores; log $log)"
  start=$(date +%s)
  if ! ( sim_go_env && "$fn" ) >"$log" 2>&1; then
    rm -rf "$tmp"
    tg_die "building $name failed" "$log"
  fi
  tg_log "built $name in $(($(date +%s) - start)) s"
}

sim_build_kcm() {
  local ld ver=${K8S_VERSION#v}
  ld="-s -w -X k8s.io/component-base/version.gitVersion=$K8S_VERSION -X k8s.io/component-base/version.gitMajor=${ver%%.*}"
  ver=${ver#*.}
  ld+=" -X k8s.io/component-base/version.gitMinor=${ver%%.*} -X k8s.io/component-base/version.gitTreeState=clean"
  cd "$MOD_DIR" && nice -n 10 go build -trimpath -ldflags "$ld" -o "$tmp/" \
    k8s.io/kubernetes/cmd/kube-controller-manager k8s.io/kubernetes/cmd/kube-scheduler
}
sim_build_kwok() {
  local src
  # The module's own go.sum pins its dependencies (go install module@version ignores ours).
  GOFLAGS="${GOFLAGS/-mod=readonly /}" GOBIN=$tmp nice -n 10 go install "sigs.k8s.io/kwok/cmd/kwok@$SIM_KWOK_VERSION"
  src=$(sim_mod_dir "sigs.k8s.io/kwok@$SIM_KWOK_VERSION")
  mkdir -p "$tmp/crds"
  cp "$src/kustomize/crd/bases/kwok.x-k8s.io_logs.yaml" "$src/kustomize/crd/bases/kwok.x-k8s.io_clusterlogs.yaml" "$tmp/crds/"
}
sim_build_jobset() {
  local src
  # `go install sigs.k8s.io/jobset@VERSION` is refused (its go.mod has replace directives) and
  # main is the module root: build a writable copy of the module source with its own go.sum.
  src=$(sim_mod_dir "sigs.k8s.io/jobset@$SIM_JOBSET_VERSION")
  cp -r "$src" "$tmp/src"
  chmod -R u+w "$tmp/src"
  (cd "$tmp/src" && nice -n 10 go build -trimpath \
    -ldflags "-s -w -X sigs.k8s.io/jobset/pkg/version.GitVersion=$SIM_JOBSET_VERSION" -o "$tmp/jobset-controller" .)
  mkdir -p "$tmp/crds"
  cp "$src/config/components/crd/bases/jobset.x-k8s.io_jobsets.yaml" "$tmp/crds/"
  rm -rf "$tmp/src"
  sim_js_stamp "$tmp" > "$tmp/jobset-controller.version"
}
sim_build_to() {
  local src
  GOFLAGS="${GOFLAGS/-mod=readonly /}" GOBIN=$tmp nice -n 10 go install -trimpath -ldflags "-s -w" \
    "github.com/kubeflow/training-operator/cmd/training-operator.v1@$SIM_TO_VERSION"
  src=$(sim_mod_dir "github.com/kubeflow/training-operator@$SIM_TO_VERSION")
  mkdir -p "$tmp/crds"
  cp "$src/manifests/base/crds/kubeflow.org_pytorchjobs.yaml" "$tmp/crds/"
}

# sim_install TMP DEST: replace DEST by the fresh build atomically enough for one machine
# (the build lock is held).
sim_install() { chmod 755 "$1"; mkdir -p "${2%/*}"; rm -rf "$2"; mv "$1" "$2"; }

sim_build() {
  mkdir -p "$SIM_CACHE" "$BIN"
  # Same lock as the apiserver build: one Go build at a time per machine.
  exec 8>"$CACHE_ROOT/.build.lock"
  if ! flock -n 8; then
    tg_log "another build holds $CACHE_ROOT/.build.lock: waiting"
    flock 8
  fi
  local tmp
  if sim_kcm_ok; then
    tg_log "cached kube-controller-manager + kube-scheduler $K8S_VERSION in $CACHE_BIN"
  else
    need_go
    sim_build_one "kube-controller-manager + kube-scheduler $K8S_VERSION" "$CACHE_ROOT/build-cluster-$K8S_VERSION.log" sim_build_kcm
    mkdir -p "$CACHE_BIN"
    mv -f "$tmp/kube-controller-manager" "$tmp/kube-scheduler" "$CACHE_BIN/"
    rm -rf "$tmp"
    sim_kcm_ok || tg_die "kube-controller-manager/kube-scheduler do not report $K8S_VERSION"
  fi
  if sim_kwok_ok; then
    tg_log "cached kwok $SIM_KWOK_VERSION in $SIM_KWOK_CACHE"
  else
    need_go
    sim_build_one "kwok $SIM_KWOK_VERSION" "$SIM_CACHE/build-kwok-$SIM_KWOK_VERSION.log" sim_build_kwok
    sim_install "$tmp" "$SIM_KWOK_CACHE"
    sim_kwok_ok || tg_die "kwok does not report $SIM_KWOK_VERSION"
  fi
  if sim_js_ok; then
    tg_log "cached JobSet $SIM_JOBSET_VERSION in $SIM_JS_CACHE"
  else
    need_go
    sim_build_one "JobSet controller $SIM_JOBSET_VERSION" "$SIM_CACHE/build-jobset-$SIM_JOBSET_VERSION.log" sim_build_jobset
    sim_install "$tmp" "$SIM_JS_CACHE"
    sim_js_ok || tg_die "jobset-controller does not carry $SIM_JOBSET_VERSION"
  fi
  if sim_to_ok; then
    tg_log "cached training-operator $SIM_TO_VERSION in $SIM_TO_CACHE"
  else
    need_go
    sim_build_one "training-operator $SIM_TO_VERSION" "$SIM_CACHE/build-training-operator-$SIM_TO_VERSION.log" sim_build_to
    sim_install "$tmp" "$SIM_TO_CACHE"
    sim_to_ok || tg_die "training-operator.v1 does not carry $SIM_TO_VERSION"
  fi
  flock -u 8
  exec 8>&-
  ln -sfn "$CACHE_BIN/kube-controller-manager" "$BIN/kube-controller-manager"
  ln -sfn "$CACHE_BIN/kube-scheduler" "$BIN/kube-scheduler"
  ln -sfn "$SIM_KWOK_CACHE/kwok" "$BIN/kwok"
  ln -sfn "$SIM_JS_CACHE/jobset-controller" "$BIN/jobset-controller"
  ln -sfn "$SIM_TO_CACHE/training-operator.v1" "$BIN/training-operator.v1"
}

# --- PKI and manifests -------------------------------------------------------------------

# One serving certificate for both controllers' webhooks, signed by a webhook CA of this state
# dir. The training-operator's built-in certificate rotator keeps a certificate it finds in its
# Secret when the CA is named "training-operator-ca" and the server certificate is valid for
# training-operator.kubeflow.svc; 127.0.0.1 is in it too because the apiserver calls both
# webhooks by URL on loopback.
sim_make_pki() {
  mkdir -p "$SIM_PKI"
  chmod 700 "$SIM_PKI"
  [ -s "$SIM_PKI/webhook.crt" ] && return 0
  # Self-signed through a CSR so the extensions are exactly these (no openssl.cnf defaults).
  printf 'subjectAltName=DNS:training-operator-ca\nbasicConstraints=critical,CA:TRUE\nkeyUsage=critical,keyCertSign,cRLSign,digitalSignature\n' \
    > "$SIM_PKI/ca.ext"
  # PKCS#1: the rotator parses the CA key with x509.ParsePKCS1PrivateKey.
  ( umask 077 && openssl genrsa -traditional -out "$SIM_PKI/webhook-ca.key" 2048 2>/dev/null ) &&
    openssl req -new -key "$SIM_PKI/webhook-ca.key" -subj "/O=training-operator/CN=training-operator-ca" \
      -out "$SIM_PKI/webhook-ca.csr" 2>/dev/null &&
    openssl x509 -req -in "$SIM_PKI/webhook-ca.csr" -signkey "$SIM_PKI/webhook-ca.key" -days 3650 \
      -extfile "$SIM_PKI/ca.ext" -out "$SIM_PKI/webhook-ca.crt" 2>/dev/null || tg_die "openssl: cannot create the webhook CA"
  openssl req -newkey rsa:2048 -nodes -subj "/CN=training-operator.kubeflow.svc" \
    -keyout "$SIM_PKI/webhook.key" -out "$SIM_PKI/webhook.csr" 2>/dev/null || tg_die "openssl: cannot create the webhook key"
  printf 'subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:training-operator.kubeflow.svc\nextendedKeyUsage=serverAuth\n' \
    > "$SIM_PKI/webhook.ext"
  openssl x509 -req -in "$SIM_PKI/webhook.csr" -CA "$SIM_PKI/webhook-ca.crt" -CAkey "$SIM_PKI/webhook-ca.key" \
    -CAcreateserial -days 3650 -extfile "$SIM_PKI/webhook.ext" -out "$SIM_PKI/webhook.crt" 2>/dev/null ||
    tg_die "openssl: cannot sign the webhook certificate"
  rm -f "$SIM_PKI"/*.csr "$SIM_PKI/webhook.ext" "$SIM_PKI/ca.ext"
  chmod 600 "$SIM_PKI"/*.key
}

sim_nodes_yaml() {
  local i
  for i in $(seq 1 "$SIM_NODES"); do
    # The kwok annotation selects the nodes kwok manages; status.addresses are given here
    # because kwok's node-initialize leaves them empty after a NotReady -> Ready cycle, and
    # the apiserver needs InternalIP to reach kwok for `kubectl logs`. No taints.
    cat <<EOF
---
apiVersion: v1
kind: Node
metadata:
  name: kwok-node-$i
  annotations:
    kwok.x-k8s.io/node: fake
    node.alpha.kubernetes.io/ttl: "0"
  labels:
    kubernetes.io/hostname: kwok-node-$i
    kubernetes.io/os: linux
    kubernetes.io/arch: amd64
    type: kwok
    trainguard.dev/sim-rack: rack-$(((i - 1) / 2))
spec:
  taints: []
status:
  allocatable: {cpu: "32", memory: 256Gi, pods: "110", nvidia.com/gpu: "8"}
  capacity: {cpu: "32", memory: 256Gi, pods: "110", nvidia.com/gpu: "8"}
  addresses: [{type: InternalIP, address: 127.0.0.1}, {type: Hostname, address: kwok-node-$i}]
EOF
  done
}

sim_jobset_webhooks_yaml() {
  local ca url=https://127.0.0.1:$SIM_JS_WEBHOOK_PORT
  ca=$(base64 -w0 < "$SIM_PKI/webhook-ca.crt")
  # Paths and rules as in the JobSet release's config/components/webhook/manifests.yaml; the
  # pod webhooks only see pods that belong to a JobSet.
  cat <<EOF
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingWebhookConfiguration
metadata: {name: jobset-mutating-webhook-configuration}
webhooks:
- name: mjobset.kb.io
  admissionReviewVersions: [v1]
  sideEffects: None
  failurePolicy: Fail
  clientConfig: {url: "$url/mutate-jobset-x-k8s-io-v1alpha2-jobset", caBundle: "$ca"}
  rules: [{apiGroups: [jobset.x-k8s.io], apiVersions: [v1alpha2], operations: [CREATE], resources: [jobsets]}]
- name: mpod.kb.io
  admissionReviewVersions: [v1]
  sideEffects: None
  failurePolicy: Fail
  clientConfig: {url: "$url/mutate--v1-pod", caBundle: "$ca"}
  objectSelector: {matchExpressions: [{key: jobset.sigs.k8s.io/jobset-name, operator: Exists}]}
  rules: [{apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [pods]}]
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata: {name: jobset-validating-webhook-configuration}
webhooks:
- name: vjobset.kb.io
  admissionReviewVersions: [v1]
  sideEffects: None
  failurePolicy: Fail
  clientConfig: {url: "$url/validate-jobset-x-k8s-io-v1alpha2-jobset", caBundle: "$ca"}
  rules: [{apiGroups: [jobset.x-k8s.io], apiVersions: [v1alpha2], operations: [CREATE, UPDATE], resources: [jobsets]}]
- name: vpod.kb.io
  admissionReviewVersions: [v1]
  sideEffects: None
  failurePolicy: Fail
  clientConfig: {url: "$url/validate--v1-pod", caBundle: "$ca"}
  objectSelector: {matchExpressions: [{key: jobset.sigs.k8s.io/jobset-name, operator: Exists}]}
  rules: [{apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [pods]}]
EOF
}

sim_jobset_config() {
  cat <<EOF
apiVersion: config.jobset.x-k8s.io/v1alpha1
kind: Configuration
leaderElection:
  leaderElect: false
internalCertManagement:
  enable: false
webhook:
  host: 127.0.0.1
  port: $SIM_JS_WEBHOOK_PORT
  certDir: $SIM_DIR/jobset-certs
metrics:
  bindAddress: 127.0.0.1:$SIM_JS_METRICS_PORT
health:
  healthProbeBindAddress: 127.0.0.1:$SIM_JS_HEALTH_PORT
EOF
}

sim_to_setup_yaml() {
  local ca
  ca=$(base64 -w0 < "$SIM_PKI/webhook-ca.crt")
  cat <<EOF
apiVersion: v1
kind: Namespace
metadata: {name: kubeflow}
---
apiVersion: v1
kind: Secret
metadata: {name: training-operator-webhook-cert, namespace: kubeflow}
data:
  ca.crt: $ca
  ca.key: $(base64 -w0 < "$SIM_PKI/webhook-ca.key")
  tls.crt: $(base64 -w0 < "$SIM_PKI/webhook.crt")
  tls.key: $(base64 -w0 < "$SIM_PKI/webhook.key")
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata: {name: validator.training-operator.kubeflow.org}
webhooks:
- name: validator.pytorchjob.training-operator.kubeflow.org
  admissionReviewVersions: [v1]
  sideEffects: None
  failurePolicy: Fail
  clientConfig: {url: "https://127.0.0.1:$SIM_TO_WEBHOOK_PORT/validate-kubeflow-org-v1-pytorchjob", caBundle: "$ca"}
  rules: [{apiGroups: [kubeflow.org], apiVersions: [v1], operations: [CREATE, UPDATE], resources: [pytorchjobs]}]
EOF
}

# --- run -------------------------------------------------------------------------------

sim_kubectl() { KUBECONFIG=$KUBECONFIG_FILE "$BIN/kubectl" "$@"; }
sim_healthz() { [ "$(curl -sk --max-time 3 "https://127.0.0.1:$1/healthz" 2>/dev/null)" = ok ]; }
sim_readyz() { [ "$(curl -s --max-time 3 "http://127.0.0.1:$1/readyz" 2>/dev/null)" = ok ]; }
# kwok serves the kubelet API (logs) and /healthz on one port, over TLS with its own certificate.
sim_kwok_healthy() { [ "$(curl -sk --max-time 3 "https://127.0.0.1:$SIM_KWOK_PORT/healthz" 2>/dev/null)" = ok ]; }
sim_nodes_ready() {
  local out
  out=$(sim_kubectl get nodes -l type=kwok -o 'jsonpath={range .items[*]}{.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}' 2>/dev/null) || return 1
  [ "$(grep -cx True <<<"$out")" = "$SIM_NODES" ]
}

# The apiserver needs flags for the controllers (see local-kube.sh); one started by an older
# script lacks them and must be restarted rather than half-working.
sim_check_apiserver_flags() {
  tr '\0' '\n' < "/proc/$(cat "$API_PID")/cmdline" | grep -qx -- --enable-aggregator-routing=true ||
    tg_die "the running kube-apiserver lacks the flags the simulated cluster needs: run '$0 down' then '$0 up --cluster'"
}

sim_up() {
  local t0 name bin pidfile need=()
  t0=$(date +%s.%N)
  UP_DONE=0
  trap stop_started_on_failure EXIT
  sim_check_apiserver_flags
  sim_build
  mkdir -p "$SIM_DIR/jobset-certs" "$SIM_DIR/to-webhook/serving-certs" "$SIM_DIR/kwok-home" \
    "$SIM_DIR/pod-logs" "$LOGS"
  sim_make_pki
  for name in "${SIM_DAEMONS[@]}"; do
    bin=${name#*:}
    name=${name%%:*}
    ours "$(sim_pidfile "$name")" "$bin" || need+=("$name")
  done
  if [ ${#need[@]} = 0 ] && sim_status_ok; then
    UP_DONE=1
    tg_log "simulated cluster already running (TG_SIM_PORT_BASE=$SIM_PORT_BASE)"
    return 0
  fi
  # Every port checked before anything starts (a daemon of ours that runs keeps its port).
  local p
  for name in "${need[@]}"; do
    case $name in
      kube-controller-manager) p=$SIM_KCM_PORT ;;
      kube-scheduler) p=$SIM_SCHED_PORT ;;
      kwok) p=$SIM_KWOK_PORT ;;
      jobset) p="$SIM_JS_WEBHOOK_PORT $SIM_JS_METRICS_PORT $SIM_JS_HEALTH_PORT" ;;
      training-operator) p="$SIM_TO_WEBHOOK_PORT $SIM_TO_METRICS_PORT $SIM_TO_HEALTH_PORT" ;;
    esac
    for p in $p; do
      port_busy "$p" && tg_die "port $p (TG_SIM_PORT_BASE=$SIM_PORT_BASE + $((p - SIM_PORT_BASE)), for $name) is taken by another process"
    done
  done

  # CRDs first: JobSet's and PyTorchJob's are too large for client-side apply (the
  # last-applied annotation would exceed 256 KiB).
  sim_kubectl apply -f "$SIM_KWOK_CACHE/crds/" >/dev/null || tg_die "cannot apply the kwok CRDs"
  sim_kubectl apply --server-side --force-conflicts -f "$SIM_JS_CACHE/crds/" -f "$SIM_TO_CACHE/crds/" >/dev/null ||
    tg_die "cannot apply the JobSet/PyTorchJob CRDs"
  sim_kubectl wait --for=condition=Established --timeout="${TIMEOUT}s" \
    crd/jobsets.jobset.x-k8s.io crd/pytorchjobs.kubeflow.org crd/logs.kwok.x-k8s.io crd/clusterlogs.kwok.x-k8s.io >/dev/null ||
    tg_die "the CRDs did not become Established"

  local kc=$KUBECONFIG_FILE pf
  pf=$(sim_pidfile kube-controller-manager)
  if ! ours "$pf" kube-controller-manager; then
    start kube-controller-manager "$pf" "$LOGS/kube-controller-manager.log" "$BIN/kube-controller-manager" \
      --kubeconfig "$kc" --authentication-kubeconfig "$kc" --authorization-kubeconfig "$kc" \
      --bind-address 127.0.0.1 --secure-port "$SIM_KCM_PORT" \
      --service-account-private-key-file "$PKI/sa.key" --root-ca-file "$PKI/ca.crt" \
      --leader-elect=false --controllers '*' --kube-api-qps 100 --kube-api-burst 200 --profiling=false
  fi
  pf=$(sim_pidfile kube-scheduler)
  if ! ours "$pf" kube-scheduler; then
    start kube-scheduler "$pf" "$LOGS/kube-scheduler.log" "$BIN/kube-scheduler" \
      --kubeconfig "$kc" --authentication-kubeconfig "$kc" --authorization-kubeconfig "$kc" \
      --bind-address 127.0.0.1 --secure-port "$SIM_SCHED_PORT" --leader-elect=false --profiling=false
  fi
  pf=$(sim_pidfile kwok)
  if ! ours "$pf" kwok; then
    # HOME is private: kwok silently reads ~/.kwok/kwok.yaml when it exists. The lease
    # duration keeps the fake nodes Ready (kwok renews at a fraction of it).
    start kwok "$pf" "$LOGS/kwok.log" env HOME="$SIM_DIR/kwok-home" "$BIN/kwok" \
      --kubeconfig "$kc" --config "$SIM_STAGES" \
      --manage-all-nodes=false --manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake \
      --node-ip 127.0.0.1 --node-port "$SIM_KWOK_PORT" --server-address "127.0.0.1:$SIM_KWOK_PORT" \
      --cidr 10.244.0.0/16 --node-lease-duration-seconds 40 --enable-crds Logs,ClusterLogs
  fi
  sim_nodes_yaml | sim_kubectl apply -f - >/dev/null || tg_die "cannot create the fake nodes"

  cp "$SIM_PKI/webhook.crt" "$SIM_DIR/jobset-certs/tls.crt"
  cp "$SIM_PKI/webhook.key" "$SIM_DIR/jobset-certs/tls.key"
  sim_jobset_config > "$SIM_DIR/jobset-config.yaml"
  sim_jobset_webhooks_yaml | sim_kubectl apply -f - >/dev/null || tg_die "cannot apply the JobSet webhooks"
  pf=$(sim_pidfile jobset)
  if ! ours "$pf" jobset-controller; then
    start jobset "$pf" "$LOGS/jobset.log" "$BIN/jobset-controller" --kubeconfig "$kc" --config "$SIM_DIR/jobset-config.yaml"
  fi

  sim_to_setup_yaml | sim_kubectl apply -f - >/dev/null || tg_die "cannot apply the training-operator setup"
  cp "$SIM_PKI/webhook.crt" "$SIM_DIR/to-webhook/serving-certs/tls.crt"
  cp "$SIM_PKI/webhook.key" "$SIM_DIR/to-webhook/serving-certs/tls.key"
  pf=$(sim_pidfile training-operator)
  if ! ours "$pf" training-operator.v1; then
    # Its certificate directory is fixed at $SIM_TO_CERT_PATH. In a private mount namespace
    # this cluster's own directory is bound over ${SIM_TO_CERT_PATH%/*}, so two clusters on one
    # machine (other engineers, CI) never share it; the host keeps only an empty mount point.
    # unshare and sh exec, so the pid file names the operator itself.
    # The webhook server binds all addresses on its port (the operator has no host flag).
    start training-operator "$pf" "$LOGS/training-operator.log" env MY_POD_NAMESPACE=kubeflow \
      unshare --mount --propagation private sh -c 'mkdir -p "$1" && mount --bind "$0" "$1" && shift && exec "$@"' \
      "$SIM_DIR/to-webhook" "${SIM_TO_CERT_PATH%/*}" \
      "$BIN/training-operator.v1" --kubeconfig "$kc" --enable-scheme=pytorchjob \
      --webhook-server-port "$SIM_TO_WEBHOOK_PORT" --metrics-bind-address "127.0.0.1:$SIM_TO_METRICS_PORT" \
      --health-probe-bind-address "127.0.0.1:$SIM_TO_HEALTH_PORT" --leader-elect=false
  fi

  wait_for kube-controller-manager "$(sim_pidfile kube-controller-manager)" "$LOGS/kube-controller-manager.log" sim_healthz "$SIM_KCM_PORT"
  wait_for kube-scheduler "$(sim_pidfile kube-scheduler)" "$LOGS/kube-scheduler.log" sim_healthz "$SIM_SCHED_PORT"
  wait_for kwok "$(sim_pidfile kwok)" "$LOGS/kwok.log" sim_kwok_healthy
  # Nodes a test left NotReady stay so (status does not look at nodes); a fresh kwok must
  # bring all four up.
  if [[ " ${need[*]} " == *" kwok "* ]]; then
    wait_for "kwok (4 Ready nodes)" "$(sim_pidfile kwok)" "$LOGS/kwok.log" sim_nodes_ready
  fi
  wait_for "JobSet controller" "$(sim_pidfile jobset)" "$LOGS/jobset.log" sim_readyz "$SIM_JS_HEALTH_PORT"
  wait_for training-operator "$(sim_pidfile training-operator)" "$LOGS/training-operator.log" sim_readyz "$SIM_TO_HEALTH_PORT"
  UP_DONE=1
  tg_log "simulated cluster ready in $(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }') s" \
    "(TG_SIM_PORT_BASE=$SIM_PORT_BASE; nodes kwok-node-1..kwok-node-$SIM_NODES)"
}

# The pid files are checked against the binaries in $BIN: a recycled pid or a daemon of
# another state dir is never stopped.
# All at once (none needs another to shut down cleanly), before the apiserver.
sim_down() {
  local entry name bin pf ours_pf=()
  for entry in "${SIM_DAEMONS[@]}"; do
    name=${entry%%:*}
    bin=${entry#*:}
    pf=$(sim_pidfile "$name")
    if ours "$pf" "$bin"; then
      tg_log "stopping $name (pid $(cat "$pf"))"
      ours_pf+=("$pf")
    else
      rm -f "$pf"
    fi
  done
  [ ${#ours_pf[@]} = 0 ] || tg_stop_pidfiles "${ours_pf[@]}"
}

sim_component_ok() {   # sim_component_ok NAME
  case $1 in
    kube-controller-manager) sim_healthz "$SIM_KCM_PORT" ;;
    kube-scheduler) sim_healthz "$SIM_SCHED_PORT" ;;
    kwok) sim_kwok_healthy ;;
    jobset) sim_readyz "$SIM_JS_HEALTH_PORT" ;;
    training-operator) sim_readyz "$SIM_TO_HEALTH_PORT" ;;
  esac
}

sim_status_ok() {
  local entry
  for entry in "${SIM_DAEMONS[@]}"; do
    ours "$(sim_pidfile "${entry%%:*}")" "${entry#*:}" && sim_component_ok "${entry%%:*}" || return 1
  done
}

sim_status() {   # prints one line per component; returns 1 when one is not running or not ready
  local entry name bin pf rc=0
  for entry in "${SIM_DAEMONS[@]}"; do
    name=${entry%%:*}
    bin=${entry#*:}
    pf=$(sim_pidfile "$name")
    if ! ours "$pf" "$bin"; then
      printf '%-24s not running\n' "$name:"
      rc=1
    elif sim_component_ok "$name"; then
      printf '%-24s pid %s, ready, rss %s KiB\n' "$name:" "$(cat "$pf")" "$(ps -o rss= -p "$(cat "$pf")" | tr -d ' ')"
    else
      printf '%-24s pid %s, NOT ready\n' "$name:" "$(cat "$pf")"
      rc=1
    fi
  done
  echo "sim ports:               TG_SIM_PORT_BASE=$SIM_PORT_BASE (kwok +0, kcm +7, scheduler +9, jobset +20..22, training-operator +23..25)"
  return $rc
}
