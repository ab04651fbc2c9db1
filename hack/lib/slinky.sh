# shellcheck shell=bash
# hack/lib/slinky.sh: SchedMD's slurm-operator (Slinky) on the simulated cluster, behind
# `hack/local-kube.sh build --slinky` and `up --cluster --slinky` (sourced by local-kube.sh after
# hack/lib/sim-cluster.sh, never run; it uses their variables and helpers).
#
# build: slurm-operator $SLINKY_VERSION compiled from the Go module registry (pinned: the registry
# refuses @latest) into $TG_SIM_CACHE/slurm-operator/<version>/, with the module's CRDs
# (config/crd/bases/). Nothing else of the operator's repository is used.
#
# up (after sim_up): a real Slurm 26.05 (hack/local-slurm.sh with the 26.05 root: slurmctld,
# slurmrestd, and one host `slurmd -N slinky-<i>` per NodeSet pod), then slurm-operator as a host
# process with, in namespace slinky:
#   Controller slurm   external: true, externalConfig -> our slurmctld; jwtHs256KeyRef -> Secret
#                      slurm-jwt, the same HS256 key slurmctld's auth/jwt reads (the operator signs
#                      its own token for user slurm, hence SlurmUser=slurm)
#   RestApi slurm      its Deployment's pod lands on a kwok node and is Ready without running; the
#                      operator talks to our slurmrestd instead: it builds the URL from the RestApi
#                      name with the fixed port 6820, and DEBUG=1 makes it http://localhost:6820
#   NodeSet slinky     3 pods slinky-0..2, one per kwok node (anti-affinity, nodeSelector type=kwok); pod name = hostname =
#                      Slurm node name
# Ready when slurm-operator has written each pod into its Slurm node's comment (the whole path:
# CRDs, JWT, slurmrestd v0.0.44, live slurmd). Writes $TG_SLINKY_DIR/env.
# Limit: slurmrestd listens on 127.0.0.1:6820 (the operator's fixed port): one `--slinky` cluster
# per machine at a time.
#
# Settings (environment):
#   TG_SLINKY_SLURM_ROOT  $(hack/slurm-root.sh path 26.05)   the Slurm 26.05 root (slurmrestd v0.0.44)
#   TG_SLINKY_DIR         <repo>/.local/slinky                   state: slurm/ (the cluster), env
#   ports: slurmctld TG_SIM_PORT_BASE+40, slurmd +41..+43, slurm-operator metrics +44, health +45

SLINKY_VERSION=v1.0.1
SLINKY_MODULE=github.com/SlinkyProject/slurm-operator
SLINKY_CACHE=$SIM_CACHE/slurm-operator/$SLINKY_VERSION

# Built from a copy of the module, the binary records "(devel)": the build writes a stamp with the
# version and the binary's sha256, checked here (as for JobSet in sim-cluster.sh).
slinky_stamp() { echo "$SLINKY_MODULE $SLINKY_VERSION $(sha256sum < "$1/slurm-operator" | cut -d' ' -f1)"; }
slinky_ok() {
  [ -x "$SLINKY_CACHE/slurm-operator" ] && [ -s "$SLINKY_CACHE/crds/slinky.slurm.net_nodesets.yaml" ] || return 1
  [ "$(cat "$SLINKY_CACHE/slurm-operator.version" 2>/dev/null)" = "$(slinky_stamp "$SLINKY_CACHE")" ]
}

slinky_build_operator() {
  local src
  # Not `go install MODULE/cmd/manager@VERSION`: that also asks the registry for the module's
  # version list (deprecation check), which it refuses for this module. Built instead from a
  # writable copy of the module source, with its own go.mod and go.sum (exact versions only).
  src=$(sim_mod_dir "$SLINKY_MODULE@$SLINKY_VERSION") || return 1
  cp -r "$src" "$tmp/src" && chmod -R u+w "$tmp/src" || return 1
  (cd "$tmp/src" && nice -n 10 go build -trimpath -ldflags "-s -w" -o "$tmp/slurm-operator" ./cmd/manager) || return 1
  mkdir -p "$tmp/crds" && cp "$src"/config/crd/bases/*.yaml "$tmp/crds/" || return 1
  rm -rf "$tmp/src"
  slinky_stamp "$tmp" > "$tmp/slurm-operator.version"
}

slinky_build() {
  mkdir -p "$SIM_CACHE" "$BIN"
  exec 8>"$CACHE_ROOT/.build.lock"
  if ! flock -n 8; then
    tg_log "another build holds $CACHE_ROOT/.build.lock: waiting"
    flock 8
  fi
  local tmp
  if slinky_ok; then
    tg_log "cached slurm-operator $SLINKY_VERSION in $SLINKY_CACHE"
  else
    need_go
    sim_build_one "slurm-operator $SLINKY_VERSION" "$SIM_CACHE/build-slurm-operator-$SLINKY_VERSION.log" slinky_build_operator
    sim_install "$tmp" "$SLINKY_CACHE"
    slinky_ok || tg_die "slurm-operator does not carry $SLINKY_MODULE $SLINKY_VERSION"
  fi
  flock -u 8
  exec 8>&-
  ln -sfn "$SLINKY_CACHE/slurm-operator" "$BIN/slurm-operator"
}

# --- run -------------------------------------------------------------------------------

SLINKY_DIR=${TG_SLINKY_DIR:-$TG_REPO_ROOT/.local/slinky}
SLINKY_NAMESPACE=slinky
SLINKY_NODES=3
SLINKY_REST_PORT=6820   # slurm-operator's constant (internal/builder/restapi_app.go)
SLINKY_CTLD_PORT=$((SIM_PORT_BASE + 40))
SLINKY_NODE_PORT_BASE=$((SIM_PORT_BASE + 40))
SLINKY_METRICS_PORT=$((SIM_PORT_BASE + 44))
SLINKY_HEALTH_PORT=$((SIM_PORT_BASE + 45))
SLINKY_PID=$SLINKY_DIR/slurm-operator.pid
# The pods' images are required fields but never pulled (kwok runs no container): a name that
# cannot resolve says so.
SLINKY_IMAGE_PREFIX=images.invalid/slinky

# slinky_slurm ARGS...: hack/local-slurm.sh for this cluster's Slurm
slinky_slurm() {
  local root=${TG_SLINKY_SLURM_ROOT:-$("$TG_REPO_ROOT/hack/slurm-root.sh" path 26.05)}
  env TG_SLURM_ROOT="$root" TG_SLURM_DIR="$SLINKY_DIR/slurm" TG_SLURM_NODES=$SLINKY_NODES \
    TG_SLURM_NODE_PREFIX=slinky- TG_SLURM_NODE_FIRST=0 TG_SLURM_USER=slurm \
    TG_SLURM_CTLD_PORT=$SLINKY_CTLD_PORT TG_SLURM_NODE_PORT_BASE=$SLINKY_NODE_PORT_BASE \
    TG_SLURM_REST_PORT=$SLINKY_REST_PORT "$TG_REPO_ROOT/hack/local-slurm.sh" "$@"
}

# Only its name: the Controller reconcile looks a ServiceMonitor up (to delete one when metrics are off)
# and fails its whole pass when the kind is unknown. No Prometheus operator runs here.
slinky_servicemonitor_crd_yaml() {
  cat <<EOF
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: servicemonitors.monitoring.coreos.com}
spec:
  group: monitoring.coreos.com
  scope: Namespaced
  names: {kind: ServiceMonitor, listKind: ServiceMonitorList, plural: servicemonitors, singular: servicemonitor}
  versions:
  - name: v1
    served: true
    storage: true
    schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}
EOF
}

slinky_objects_yaml() {
  cat <<EOF
apiVersion: v1
kind: Namespace
metadata: {name: $SLINKY_NAMESPACE}
---
apiVersion: v1
kind: Secret
metadata: {name: slurm-jwt, namespace: $SLINKY_NAMESPACE}
data: {jwt_hs256.key: $(base64 -w0 < "$SLINKY_DIR/slurm/etc/jwt_hs256.key")}
---
apiVersion: v1
kind: Secret
metadata: {name: slurm-key, namespace: $SLINKY_NAMESPACE}
data: {slurm.key: $(base64 -w0 < "$SLINKY_DIR/slurm/munge/munge.key")}
---
apiVersion: slinky.slurm.net/v1beta1
kind: Controller
metadata: {name: slurm, namespace: $SLINKY_NAMESPACE}
spec:
  clusterName: trainguard
  slurmKeyRef: {name: slurm-key, key: slurm.key}
  jwtHs256KeyRef: {name: slurm-jwt, key: jwt_hs256.key}
  external: true
  externalConfig: {host: 127.0.0.1, port: $SLINKY_CTLD_PORT}
---
apiVersion: slinky.slurm.net/v1beta1
kind: RestApi
metadata: {name: slurm, namespace: $SLINKY_NAMESPACE}
spec:
  controllerRef: {name: slurm, namespace: $SLINKY_NAMESPACE}
  replicas: 1
  slurmrestd: {image: $SLINKY_IMAGE_PREFIX/slurmrestd:26.05}
  template: {spec: {nodeSelector: {type: kwok}}}
---
apiVersion: slinky.slurm.net/v1beta1
kind: NodeSet
metadata: {name: slinky, namespace: $SLINKY_NAMESPACE}
spec:
  controllerRef: {name: slurm, namespace: $SLINKY_NAMESPACE}
  replicas: $SLINKY_NODES
  partition: {enabled: false}
  slurmd: {image: $SLINKY_IMAGE_PREFIX/slurmd:26.05}
  # what the chart sets: without an update strategy v1.0.1 never un-marks a pod whose Kubernetes
  # node was uncordoned (its pod processing keeps no pods), so the Slurm node stays drained
  updateStrategy: {type: RollingUpdate, rollingUpdate: {maxUnavailable: 1}}
  logfile: {image: $SLINKY_IMAGE_PREFIX/alpine:latest}
  template:
    spec:
      # kwok nodes only: with --real-node the real kubelet would try to run these images
      nodeSelector: {type: kwok}
      affinity:
        podAntiAffinity:
          requiredDuringSchedulingIgnoredDuringExecution:
          - topologyKey: kubernetes.io/hostname
            labelSelector: {matchLabels: {app.kubernetes.io/name: slurmd}}
EOF
}

# slinky_scontrol ARGS...: the root's scontrol against this cluster
slinky_scontrol() {
  PATH=$SLINKY_DIR/slurm/bin:$PATH SLURM_CONF=$SLINKY_DIR/slurm/etc/slurm.conf timeout 10 scontrol "$@"
}

# slinky_comments_ok: every NodeSet pod runs on a node, and its Slurm node's comment names the pod on
# that node (slurm-operator wrote it for this pod). The comment alone is not enough: slurmctld keeps
# it across a restart (its saved state), and so does etcd the pods, so after `down` and `up` an old
# comment can be there before slurm-operator has made the pods again (pods the simulated cluster's
# tests evicted meanwhile).
slinky_comments_ok() {
  local i out pods node line
  out=$(slinky_scontrol show node -o 2>/dev/null) || return 1
  pods=$(sim_kubectl get pods -n "$SLINKY_NAMESPACE" -l app.kubernetes.io/name=slurmd \
    -o jsonpath='{range .items[*]}{.metadata.name} {.spec.nodeName} {.status.phase}{"\n"}{end}' 2>/dev/null) || return 1
  for i in $(seq 0 $((SLINKY_NODES - 1))); do
    node=$(awk -v pod="slinky-$i" '$1 == pod && $3 == "Running" { print $2 }' <<<"$pods")
    [ -n "$node" ] || return 1
    line=$(grep "^NodeName=slinky-$i " <<<"$out") || return 1
    grep -q "Comment={.*\"podName\":\"slinky-$i\"" <<<"$line" && grep -q "Comment={.*\"node\":\"$node\"" <<<"$line" ||
      return 1
  done
}

slinky_healthy() { [ "$(curl -s --max-time 3 "http://127.0.0.1:$SLINKY_HEALTH_PORT/readyz" 2>/dev/null)" = ok ]; }

slinky_write_env() {
  tg_write_atomic "$SLINKY_DIR/env" 600 <<EOF
# Written by hack/local-kube.sh up --cluster --slinky. Source it: source $SLINKY_DIR/env
# slurm-operator $SLINKY_VERSION manages the Slurm below (Controller slurm, RestApi slurm, NodeSet
# slinky in namespace $SLINKY_NAMESPACE); sbatch/scontrol/squeue and
# \`trainguard run|operator --scheduler slurm-local\` talk to that Slurm.
$(sed '/^#/d' "$SLINKY_DIR/slurm/env")
export KUBECONFIG=$KUBECONFIG_FILE
export SLINKY_NAMESPACE=$SLINKY_NAMESPACE
export SLINKY_OPERATOR_VERSION=$SLINKY_VERSION
PATH=$BIN:\$PATH
EOF
}

slinky_up() {
  local t0 p
  t0=$(date +%s)
  UP_DONE=0
  trap stop_started_on_failure EXIT
  slinky_build
  mkdir -p "$SLINKY_DIR" "$LOGS"
  chmod 755 "$SLINKY_DIR"
  echo "$KUBE_DIR" > "$SLINKY_DIR/kube-dir"
  slinky_slurm up || tg_die "the Slurm 26.05 cluster did not come up (hack/local-slurm.sh)"
  trap 'stop_started_on_failure; [ "$UP_DONE" = 1 ] || slinky_slurm down >/dev/null 2>&1 || true' EXIT
  sim_kubectl apply --server-side --force-conflicts -f "$SLINKY_CACHE/crds/" >/dev/null ||
    tg_die "cannot apply the slurm-operator CRDs"
  slinky_servicemonitor_crd_yaml | sim_kubectl apply -f - >/dev/null || tg_die "cannot apply the ServiceMonitor CRD"
  sim_kubectl wait --for=condition=Established --timeout="${TIMEOUT}s" \
    crd/controllers.slinky.slurm.net crd/restapis.slinky.slurm.net crd/nodesets.slinky.slurm.net \
    crd/servicemonitors.monitoring.coreos.com >/dev/null ||
    tg_die "the slurm-operator CRDs did not become Established"
  slinky_objects_yaml | sim_kubectl apply -f - >/dev/null || tg_die "cannot apply the Slinky objects"
  local attempt
  for attempt in 1 2 3; do
    if ! ours "$SLINKY_PID" slurm-operator; then
      for p in "$SLINKY_METRICS_PORT" "$SLINKY_HEALTH_PORT"; do
        port_busy "$p" && tg_die "port $p (for slurm-operator) is taken by another process"
      done
      start slurm-operator "$SLINKY_PID" "$LOGS/slurm-operator.log" env DEBUG=1 KUBECONFIG="$KUBECONFIG_FILE" \
        "$BIN/slurm-operator" --metrics-addr "127.0.0.1:$SLINKY_METRICS_PORT" \
        --health-addr "127.0.0.1:$SLINKY_HEALTH_PORT" --leader-elect=false
    fi
    # A slot's ports can lie in the kernel's ephemeral range, where a loopback client connection of
    # the moment may hold one: the operator then exits at once on "address already in use".
    for _ in $(seq 40); do
      slinky_healthy && break 2
      tg_alive "$SLINKY_PID" || break
      sleep 0.5
    done
    tg_alive "$SLINKY_PID" && break
    grep -q "address already in use" "$LOGS/slurm-operator.log" || break
    tg_log "slurm-operator could not bind its port (attempt $attempt): starting it again"
    sleep 2
  done
  wait_for slurm-operator "$SLINKY_PID" "$LOGS/slurm-operator.log" slinky_healthy
  wait_for "slurm-operator (NodeSet pods in their Slurm nodes' comments)" "$SLINKY_PID" \
    "$LOGS/slurm-operator.log" slinky_comments_ok
  slinky_write_env
  UP_DONE=1
  tg_log "Slinky ready in $(($(date +%s) - t0)) s: slurm-operator $SLINKY_VERSION, Slurm nodes slinky-0..$((SLINKY_NODES - 1)); source $SLINKY_DIR/env"
}

slinky_down() {
  # only the Slinky of this state dir: a plain API's `down` (another TG_KUBE_DIR) leaves it running
  [ "$(cat "$SLINKY_DIR/kube-dir" 2>/dev/null)" = "$KUBE_DIR" ] || return 0
  if ours "$SLINKY_PID" slurm-operator; then
    tg_log "stopping slurm-operator (pid $(cat "$SLINKY_PID"))"
    tg_stop_pidfiles "$SLINKY_PID"
  else
    rm -f "$SLINKY_PID"
  fi
  if [ -d "$SLINKY_DIR/slurm" ]; then slinky_slurm down; fi
  rm -f "$SLINKY_DIR/env"
}

slinky_status() {
  if ours "$SLINKY_PID" slurm-operator && slinky_healthy; then
    printf '%-24s pid %s, ready (%s)\n' "slurm-operator:" "$(cat "$SLINKY_PID")" "$SLINKY_VERSION"
  else
    printf '%-24s not running\n' "slurm-operator:"
    return 1
  fi
  slinky_slurm status
}
