# shellcheck shell=bash
# hack/lib/real-node.sh: the real kubelet node behind `hack/local-kube.sh up --cluster --real-node`
# (sourced by local-kube.sh after hack/lib/sim-cluster.sh; uses their variables and helpers).
#
# One node, real-node-1, beside the kwok nodes: a kubelet of the apiserver's version (built from
# the Go module registry with tools/kube/go.mod), Debian's containerd 1.6 + runc 1.1 + CNI plugins
# (bridge, host-local, loopback), where pods really run. Host isolation (docs/sim-cluster.md):
#   - network: a namespace of its own (a bind-mounted nsfs file, entered with nsenter --net=), linked
#     to the host by a veth pair 10.250.N.1 (host) / 10.250.N.2 (node); the apiserver (loopback only)
#     is reached through a forwarder on 10.250.N.1 (hack/lib/real-node/forward.py); pods get
#     10.251.N.0/24 on a CNI bridge inside the namespace, masqueraded to the node's address.
#   - Services: kube-proxy (iptables mode, built like the kubelet) runs in the node's namespaces and
#     routes every ClusterIP Service but one: the `kubernetes` Service carries the label
#     service.kubernetes.io/service-proxy-name (kube-proxy leaves it alone), because its endpoint is
#     the apiserver's loopback address; its Service IP is DNAT'ed to the forwarder instead.
#   - DNS: CoreDNS (tools/coredns: the kubernetes, forward, cache, loop, errors, health and ready
#     plugins) on the host side of the veth (RN_HOST_IP:53, so it reaches the host's resolver), behind
#     the Service kube-system/kube-dns at 10.0.0.10 (an EndpointSlice to RN_HOST_IP); the kubelet's
#     clusterDNS is 10.0.0.10, clusterDomain cluster.local.
#   - mounts: a mount namespace of its own (private), with tmpfs on /run/netns and /run/containerd:
#     the container mounts and the runtime's sockets never show on the host, and go with it.
#   - cgroups: everything (the daemons, their shims, the pods) under /tg-real-node-N in every v1
#     hierarchy; `down` kills what is left there and removes the tree.
#   - sysctls: the host's are never written: protectKernelDefaults is true and the kubelet's mount
#     namespace shows it the values it checks (files bound over those /proc/sys entries); the host
#     keeps its own. ip_forward is set inside the node's network namespace only.
#
# N is TG_REAL_NODE_NET (0..250, default: the last byte of TG_SIM_PORT_BASE's hundreds, so test
# slots differ). State: $TG_KUBE_DIR/real-node/.

RN_NAME=real-node-1
RN_DIR=$KUBE_DIR/real-node
RN_LIB=$TG_REPO_ROOT/hack/lib/real-node
RN_CACHE=$SIM_CACHE/real-node
RN_PAUSE_IMAGE=registry.k8s.io/pause:3.10
RN_BUSYBOX_IMAGE=localhost/trainguard-busybox:1
RN_OPERATOR_IMAGE=docker.io/library/trainguard:dev
RN_OPERATOR_IMAGE_2=docker.io/library/trainguard:dev-2
RN_NET=${TG_REAL_NODE_NET:-$(( (SIM_PORT_BASE / 100) % 250 ))}
need_number TG_REAL_NODE_NET "$RN_NET"
RN_HOST_IP=10.250.$RN_NET.1
RN_NODE_IP=10.250.$RN_NET.2
RN_POD_CIDR=10.251.$RN_NET.0/24
RN_VETH=tgrn$RN_NET
RN_CGROUP=tg-real-node-$RN_NET
RN_NETNS=$RN_DIR/ns/net
RN_MNTNS=$RN_DIR/ns/mnt
RN_SOCK=$RN_DIR/containerd.sock
RN_DEB_PACKAGES=(containerd runc containernetworking-plugins iptables busybox-static)
RN_DNS_IP=10.0.0.10                       # the kube-dns Service's ClusterIP (the static band of 10.0.0.0/24)
RN_CLUSTER_DOMAIN=cluster.local
RN_DNS_HEALTH_PORT=$((SIM_PORT_BASE + 60)) # CoreDNS's health and ready endpoints, on RN_HOST_IP
RN_DNS_READY_PORT=$((SIM_PORT_BASE + 61))
RN_COREDNS_DIR=$TG_REPO_ROOT/tools/coredns
RN_MYSQL_IMAGE=localhost/trainguard-mariadb:10.11-1

rn_pidfile() { echo "$RN_DIR/$1.pid"; }

# --- build -----------------------------------------------------------------------------

rn_kube_ok() {   # rn_kube_ok BINARY: the cached kubelet / kube-proxy reports the apiserver's version
  local out
  [ -x "$CACHE_BIN/$1" ] || return 1
  out=$("$CACHE_BIN/$1" --version 2>/dev/null) && grep -qx "Kubernetes $K8S_VERSION" <<<"$out"
}

# rn_build_kube CMD: k8s.io/kubernetes/cmd/CMD (a `tool` of tools/kube/go.mod) into $tmp.
rn_build_kube() {
  local ld ver=${K8S_VERSION#v}
  ld="-s -w -X k8s.io/component-base/version.gitVersion=$K8S_VERSION -X k8s.io/component-base/version.gitMajor=${ver%%.*}"
  ver=${ver#*.}
  ld+=" -X k8s.io/component-base/version.gitMinor=${ver%%.*} -X k8s.io/component-base/version.gitTreeState=clean"
  cd "$MOD_DIR" && nice -n 10 go build -trimpath -ldflags "$ld" -o "$tmp/" "k8s.io/kubernetes/cmd/$1"
}
rn_build_kubelet() { rn_build_kube kubelet; }
rn_build_kube_proxy() { rn_build_kube kube-proxy; }

# CoreDNS: tools/coredns (its own module: coremain and the plugins the Corefile uses), cached with
# a stamp of its sources.
rn_coredns_stamp() { cat "$RN_COREDNS_DIR/go.mod" "$RN_COREDNS_DIR/go.sum" "$RN_COREDNS_DIR/main.go" | sha256sum | cut -d' ' -f1; }
rn_coredns_ok() { [ -x "$RN_CACHE/coredns" ] && [ "$(cat "$RN_CACHE/coredns.stamp" 2>/dev/null)" = "$(rn_coredns_stamp)" ]; }
rn_build_coredns() {
  cd "$RN_COREDNS_DIR" && nice -n 10 go build -trimpath -ldflags "-s -w" -o "$tmp/coredns" .
}

rn_build_pause() {
  cp "$RN_LIB/pause.go" "$tmp/main.go"
  (cd "$tmp" && printf 'module trainguard.invalid/pause\n\ngo 1.26\n' > go.mod &&
    GOFLAGS=-buildvcs=false nice -n 10 go build -trimpath -ldflags "-s -w" -o "$tmp/pause" .)
  rm -f "$tmp/main.go" "$tmp/go.mod"
}

# rn_build: the kubelet and kube-proxy (next to the apiserver's binaries), CoreDNS and the pause
# binary, cached; the MariaDB image (hack/build-mysql-image.sh, cached); the Debian packages
# installed when missing. Safe to run in the background while other things start.
rn_build() {
  need_go
  tg_apt_install "${RN_DEB_PACKAGES[@]}"
  mkdir -p "$SIM_CACHE" "$RN_CACHE"
  exec 7>"$SIM_CACHE/.real-node-build.lock"
  flock -w 3600 7 || tg_die "another build holds $SIM_CACHE/.real-node-build.lock"
  local tmp
  if ! rn_kube_ok kubelet; then
    sim_build_one "kubelet $K8S_VERSION" "$CACHE_ROOT/build-kubelet-$K8S_VERSION.log" rn_build_kubelet
    sim_install "$tmp/kubelet" "$CACHE_BIN/kubelet"
    rm -rf "$tmp"
    rn_kube_ok kubelet || tg_die "the built kubelet does not report $K8S_VERSION"
  fi
  if ! rn_kube_ok kube-proxy; then
    sim_build_one "kube-proxy $K8S_VERSION" "$CACHE_ROOT/build-kube-proxy-$K8S_VERSION.log" rn_build_kube_proxy
    sim_install "$tmp/kube-proxy" "$CACHE_BIN/kube-proxy"
    rm -rf "$tmp"
    rn_kube_ok kube-proxy || tg_die "the built kube-proxy does not report $K8S_VERSION"
  fi
  if ! rn_coredns_ok; then
    sim_build_one CoreDNS "$RN_CACHE/build-coredns.log" rn_build_coredns
    sim_install "$tmp/coredns" "$RN_CACHE/coredns"
    rm -rf "$tmp"
    rn_coredns_stamp > "$RN_CACHE/coredns.stamp"
  fi
  if [ ! -x "$RN_CACHE/pause" ] || [ "$RN_LIB/pause.go" -nt "$RN_CACHE/pause" ]; then
    sim_build_one pause "$RN_CACHE/build-pause.log" rn_build_pause
    sim_install "$tmp/pause" "$RN_CACHE/pause"
    rm -rf "$tmp"
  fi
  exec 7>&-
  "$TG_REPO_ROOT/hack/build-mysql-image.sh" build >/dev/null || tg_die "hack/build-mysql-image.sh build failed"
  tg_log "real node: kubelet and kube-proxy $K8S_VERSION, CoreDNS, pause and the MariaDB image in the cache"
}

# --- run -------------------------------------------------------------------------------

rn_in() { nsenter --net="$RN_NETNS" --mount="$RN_MNTNS" -- "$@"; }
rn_ctr() { rn_in ctr --address "$RN_SOCK" -n k8s.io "$@"; }
# The v1 hierarchies we place processes in; runc also makes the pods' cgroups on the v2 side (unified).
rn_hierarchies() { local d; for d in /sys/fs/cgroup/*/; do d=${d%/}; [ "${d##*/}" = unified ] || echo "$d"; done; }
rn_all_hierarchies() { rn_hierarchies; [ ! -d /sys/fs/cgroup/unified ] || echo /sys/fs/cgroup/unified; }

rn_cgroups_create() {
  local h
  for h in $(rn_hierarchies); do
    mkdir -p "$h/$RN_CGROUP/system"
    if [ -e "$h/cpuset.cpus" ]; then
      cat "$h/cpuset.cpus" > "$h/$RN_CGROUP/cpuset.cpus"; cat "$h/cpuset.mems" > "$h/$RN_CGROUP/cpuset.mems"
      cat "$h/cpuset.cpus" > "$h/$RN_CGROUP/system/cpuset.cpus"; cat "$h/cpuset.mems" > "$h/$RN_CGROUP/system/cpuset.mems"
    fi
  done
}

# rn_cgroup_enter PID: move PID into our system cgroup in every hierarchy.
rn_cgroup_enter() { local h; for h in $(rn_hierarchies); do echo "$1" > "$h/$RN_CGROUP/system/cgroup.procs"; done; }

rn_cgroup_pids() {   # every process in our tree (the pids hierarchy lists them all)
  [ -d "/sys/fs/cgroup/pids/$RN_CGROUP" ] || return 0
  find "/sys/fs/cgroup/pids/$RN_CGROUP" -name cgroup.procs -exec cat {} + 2>/dev/null | sort -u || true
}

rn_cgroups_remove() {
  local h i pids
  for i in $(seq 1 50); do
    pids=$(rn_cgroup_pids)
    [ -z "$pids" ] && break
    # shellcheck disable=SC2086
    kill -KILL $pids 2>/dev/null || true
    sleep 0.1
  done
  for h in $(rn_all_hierarchies); do
    [ -d "$h/$RN_CGROUP" ] && find "$h/$RN_CGROUP" -depth -type d -exec rmdir {} + 2>/dev/null || true
    [ ! -d "$h/$RN_CGROUP" ] || tg_log "warning: $h/$RN_CGROUP could not be removed"
  done
}

rn_namespaces_create() {
  mkdir -p "$RN_DIR/ns"
  if ! grep -q " $RN_DIR/ns " /proc/self/mountinfo; then
    mount --bind "$RN_DIR/ns" "$RN_DIR/ns" && mount --make-private "$RN_DIR/ns"
  fi
  touch "$RN_NETNS" "$RN_MNTNS"
  # Mount points the private tmpfs need: made on the host only when missing, and removed by down.
  local d
  for d in /run/netns /run/containerd; do
    [ -d "$d" ] || { mkdir "$d" && echo "$d" >> "$RN_DIR/ns-made-dirs"; }
  done
  unshare --net="$RN_NETNS" true
  unshare --mount="$RN_MNTNS" --propagation private sh -c '
    set -e
    mount -t tmpfs -o mode=755 tg-real-node /run/netns
    mount -t tmpfs -o mode=711 tg-real-node /run/containerd
    # The values the kubelet checks (protectKernelDefaults: true), shown to it alone.
    d=$1
    for kv in vm/overcommit_memory=1 vm/panic_on_oom=0 kernel/panic=10 kernel/panic_on_oops=1 \
              kernel/keys/root_maxkeys=1000000 kernel/keys/root_maxbytes=25000000; do
      f=$d/sysctl-$(echo "${kv%%=*}" | tr / _)
      echo "${kv#*=}" > "$f"
      mount --bind "$f" "/proc/sys/${kv%%=*}"
    done' sh "$RN_DIR/sysctl"
  ip link add "$RN_VETH" type veth peer name eth0 netns "$RN_NETNS" ||
    tg_die "cannot create the veth pair $RN_VETH (is TG_REAL_NODE_NET=$RN_NET used by another run?)"
  ip addr add "$RN_HOST_IP/30" dev "$RN_VETH"
  ip link set "$RN_VETH" up
  nsenter --net="$RN_NETNS" sh -c "
    ip link set lo up && ip addr add $RN_NODE_IP/30 dev eth0 && ip link set eth0 up &&
    ip route add default via $RN_HOST_IP &&
    echo 1 > /proc/sys/net/ipv4/ip_forward &&
    iptables -t nat -A OUTPUT -d 10.0.0.1 -p tcp --dport 443 -j DNAT --to-destination $RN_HOST_IP:$API_PORT &&
    iptables -t nat -A PREROUTING -d 10.0.0.1 -p tcp --dport 443 -j DNAT --to-destination $RN_HOST_IP:$API_PORT"
}

rn_namespaces_remove() {
  ip link del "$RN_VETH" 2>/dev/null || true
  local f
  for f in "$RN_MNTNS" "$RN_NETNS"; do
    umount "$f" 2>/dev/null || true
  done
  if grep -q " $RN_DIR/ns " /proc/self/mountinfo; then umount "$RN_DIR/ns" || tg_log "warning: cannot unmount $RN_DIR/ns"; fi
  if [ -s "$RN_DIR/ns-made-dirs" ]; then
    while read -r f; do rmdir "$f" 2>/dev/null || tg_log "warning: $f is not empty: left in place"; done < "$RN_DIR/ns-made-dirs"
    rm -f "$RN_DIR/ns-made-dirs"
  fi
}

rn_write_configs() {
  mkdir -p "$RN_DIR"/{containerd/root,containerd/state,containerd/opt,runc,cni/net.d,cni/ipam,kubelet,pods,pki,sysctl}
  cat > "$RN_DIR/containerd.toml" <<EOF
version = 2
root = "$RN_DIR/containerd/root"
state = "$RN_DIR/containerd/state"
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs"]
[grpc]
  address = "$RN_SOCK"
[ttrpc]
  address = "$RN_DIR/containerd-ttrpc.sock"
[plugins."io.containerd.internal.v1.opt"]
  path = "$RN_DIR/containerd/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$RN_PAUSE_IMAGE"
  restrict_oom_score_adj = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        BinaryName = "/usr/sbin/runc"
        Root = "$RN_DIR/runc"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$RN_DIR/cni/net.d"
EOF
  cat > "$RN_DIR/cni/net.d/10-bridge.conflist" <<EOF
{"cniVersion": "0.4.0", "name": "tg-real-node", "plugins": [
  {"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": true, "hairpinMode": true,
   "ipam": {"type": "host-local", "dataDir": "$RN_DIR/cni/ipam", "ranges": [[{"subnet": "$RN_POD_CIDR"}]],
            "routes": [{"dst": "0.0.0.0/0"}]}},
  {"type": "portmap", "capabilities": {"portMappings": true}}]}
EOF
  # Client certificates: the kubelet's (Node authorizer: system:node:NAME in system:nodes),
  # kube-proxy's (system:kube-proxy: the bootstrap binding system:node-proxier), CoreDNS's (bound
  # to the ClusterRole of rn_dns_yaml).
  rn_client_cert kubelet "/O=system:nodes/CN=system:node:$RN_NAME"
  rn_client_cert kube-proxy "/CN=system:kube-proxy"
  rn_client_cert coredns "/CN=trainguard:real-node-dns"
  # The kubelet and kube-proxy reach the apiserver through the forwarder (they run in the node's
  # network namespace); CoreDNS runs on the host and reaches it on loopback.
  rn_kubeconfig kubelet "https://$RN_HOST_IP:$API_PORT" > "$RN_DIR/kubeconfig"
  rn_kubeconfig kube-proxy "https://$RN_HOST_IP:$API_PORT" > "$RN_DIR/kube-proxy.kubeconfig"
  rn_kubeconfig coredns "https://127.0.0.1:$API_PORT" > "$RN_DIR/coredns.kubeconfig"
  cat > "$RN_DIR/Corefile" <<EOF
.:53 {
    bind $RN_HOST_IP
    errors
    health $RN_HOST_IP:$RN_DNS_HEALTH_PORT
    ready $RN_HOST_IP:$RN_DNS_READY_PORT
    kubernetes $RN_CLUSTER_DOMAIN in-addr.arpa ip6.arpa {
        kubeconfig $RN_DIR/coredns.kubeconfig coredns
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
        ttl 30
    }
    forward . /etc/resolv.conf
    cache 30
    loop
}
EOF
  cat > "$RN_DIR/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# cgroup v1: refused by Kubernetes >= 1.35 unless allowed here (KEP-5573); the version is pinned.
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupRoot: /$RN_CGROUP
protectKernelDefaults: true
address: $RN_NODE_IP
port: 10250
healthzBindAddress: 127.0.0.1
healthzPort: 10248
readOnlyPort: 0
podLogsDir: $RN_DIR/pods
authentication:
  anonymous: {enabled: true}
  webhook: {enabled: false}
  x509: {clientCAFile: $PKI/ca.crt}
authorization: {mode: AlwaysAllow}
containerRuntimeEndpoint: unix://$RN_SOCK
failSwapOn: false
imageGCHighThresholdPercent: 100
evictionHard: {memory.available: "100Mi", nodefs.available: "1%", imagefs.available: "1%"}
staticPodPath: ""
resolvConf: /etc/resolv.conf
clusterDNS: [$RN_DNS_IP]
clusterDomain: $RN_CLUSTER_DOMAIN
serializeImagePulls: false
registerNode: true
# The scheduler keeps pods off this node unless they ask for it (PreferNoSchedule): a pod of any
# other test, with no image here to pull and no network to pull it from, would wait in
# ImagePullBackOff; a pod that selects the node by name (the chart's nodeSelector) still runs here
# with no toleration.
registerWithTaints: [{key: trainguard.dev/real-node, value: "true", effect: PreferNoSchedule}]
maxPods: 30
EOF
}

# rn_client_cert NAME SUBJECT: a client certificate signed by the cluster's CA (kept across ups).
rn_client_cert() {
  [ -s "$RN_DIR/pki/$1.crt" ] && return 0
  openssl req -newkey rsa:2048 -nodes -subj "$2" -keyout "$RN_DIR/pki/$1.key" -out "$RN_DIR/pki/$1.csr" 2>/dev/null &&
    openssl x509 -req -in "$RN_DIR/pki/$1.csr" -CA "$PKI/ca.crt" -CAkey "$PKI/ca.key" -CAcreateserial \
      -days 3650 -out "$RN_DIR/pki/$1.crt" 2>/dev/null || tg_die "openssl: cannot sign the certificate of $1"
  chmod 600 "$RN_DIR/pki/$1.key"
}

# rn_kubeconfig NAME SERVER: a kubeconfig of the client certificate NAME (context NAME).
rn_kubeconfig() {
  cat <<EOF
apiVersion: v1
kind: Config
clusters:
- name: local
  cluster:
    server: $2
    tls-server-name: localhost
    certificate-authority: $PKI/ca.crt
users:
- name: $1
  user:
    client-certificate: $RN_DIR/pki/$1.crt
    client-key: $RN_DIR/pki/$1.key
contexts:
- name: $1
  context: {cluster: local, user: $1}
current-context: $1
EOF
}

# rn_dns_yaml: what CoreDNS may read (its upstream manifest's rules), and the kube-dns Service at
# RN_DNS_IP with an EndpointSlice to CoreDNS on RN_HOST_IP (no selector: CoreDNS is not a pod here).
rn_dns_yaml() {
  cat <<EOF
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: "trainguard:real-node-dns"}
rules:
- apiGroups: [""]
  resources: [endpoints, services, pods, namespaces]
  verbs: [list, watch]
- apiGroups: [discovery.k8s.io]
  resources: [endpointslices]
  verbs: [list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: "trainguard:real-node-dns"}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: "trainguard:real-node-dns"}
subjects:
- {apiGroup: rbac.authorization.k8s.io, kind: User, name: "trainguard:real-node-dns"}
---
apiVersion: v1
kind: Service
metadata:
  name: kube-dns
  namespace: kube-system
  labels: {k8s-app: kube-dns, kubernetes.io/name: CoreDNS}
spec:
  clusterIP: $RN_DNS_IP
  ports:
  - {name: dns, port: 53, targetPort: 53, protocol: UDP}
  - {name: dns-tcp, port: 53, targetPort: 53, protocol: TCP}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: kube-dns-real-node
  namespace: kube-system
  labels: {kubernetes.io/service-name: kube-dns, endpointslice.kubernetes.io/managed-by: trainguard.dev-real-node}
addressType: IPv4
endpoints:
- addresses: [$RN_HOST_IP]
  conditions: {ready: true}
ports:
- {name: dns, port: 53, protocol: UDP}
- {name: dns-tcp, port: 53, protocol: TCP}
EOF
}

rn_dns_ready() {
  python3 -c 'import sys, urllib.request; sys.exit(urllib.request.urlopen(sys.argv[1], timeout=2).status != 200)' \
    "http://$RN_HOST_IP:$RN_DNS_READY_PORT/ready" 2>/dev/null
}

rn_import_images() {
  local tar=$RN_DIR/images
  mkdir -p "$tar"
  python3 "$RN_LIB/oci.py" "$tar/pause.tar" "$RN_PAUSE_IMAGE" '{"Entrypoint": ["/pause"], "User": "65535:65535"}' \
    "$RN_CACHE/pause:/pause"
  local bb=/bin/busybox links=() a
  for a in sh echo cat sleep id ls head tail printf true false env wc grep date tr dd \
      mkdir hostname wget nslookup httpd; do links+=("/bin/$a=busybox"); done
  python3 "$RN_LIB/oci.py" "$tar/busybox.tar" "$RN_BUSYBOX_IMAGE" '{"Cmd": ["/bin/sh"], "Env": ["PATH=/bin"]}' \
    "$bb:/bin/busybox" "${links[@]}"
  rn_ctr images import "$tar/pause.tar" >/dev/null || tg_die "cannot import the pause image"
  rn_ctr images import "$tar/busybox.tar" >/dev/null || tg_die "cannot import the busybox image"
  rn_ctr images label "$RN_PAUSE_IMAGE" io.cri-containerd.pinned=pinned >/dev/null 2>&1 || true
  # The operator image: hack/build-image.sh's OCI layout (cached; it prints LAYOUT:TAG), as trainguard:dev.
  local out layout tag
  out=$("$TG_REPO_ROOT/hack/build-image.sh" build | tail -1) || tg_die "hack/build-image.sh build failed"
  layout=${out%:*}
  tag=${out##*:}
  [ -s "$layout/index.json" ] || tg_die "hack/build-image.sh printed '$out', not an OCI layout"
  tar -C "$layout" -cf "$tar/trainguard.tar" . || tg_die "cannot pack $layout"
  rn_ctr images import --base-name "${RN_OPERATOR_IMAGE%:*}" "$tar/trainguard.tar" >/dev/null ||
    tg_die "cannot import the operator image"
  rn_ctr images tag --force "${RN_OPERATOR_IMAGE%:*}:$tag" "$RN_OPERATOR_IMAGE" >/dev/null ||
    tg_die "cannot tag the operator image as $RN_OPERATOR_IMAGE"
  # the same image under a second tag: a chart upgrade to a new image tag, and its rollback
  rn_ctr images tag --force "${RN_OPERATOR_IMAGE%:*}:$tag" "$RN_OPERATOR_IMAGE_2" >/dev/null ||
    tg_die "cannot tag the operator image as $RN_OPERATOR_IMAGE_2"
  # The MariaDB image of the chart's MySQL subchart (hack/build-mysql-image.sh, cached).
  out=$("$TG_REPO_ROOT/hack/build-mysql-image.sh" build | tail -1) || tg_die "hack/build-mysql-image.sh build failed"
  layout=${out%:*}
  tag=${out##*:}
  [ -s "$layout/index.json" ] || tg_die "hack/build-mysql-image.sh printed '$out', not an OCI layout"
  tar -C "$layout" -cf "$tar/mariadb.tar" . || tg_die "cannot pack $layout"
  rn_ctr images import --base-name "${RN_MYSQL_IMAGE%:*}" "$tar/mariadb.tar" >/dev/null ||
    tg_die "cannot import the MariaDB image"
  [ "${RN_MYSQL_IMAGE##*:}" = "$tag" ] || tg_die "the MariaDB image is tagged $tag, not ${RN_MYSQL_IMAGE##*:}"
  rm -f "$tar"/*.tar
}

rn_node_ready() {
  [ "$(sim_kubectl get node "$RN_NAME" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null)" = True ]
}

rn_storage_yaml() {
  cat <<EOF
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: real-node-local
  annotations: {storageclass.kubernetes.io/is-default-class: "true"}
provisioner: trainguard.invalid/real-node-hostpath
reclaimPolicy: Delete
volumeBindingMode: WaitForFirstConsumer
# Directories on the real node only: the scheduler puts a claim's first pod there.
allowedTopologies:
- matchLabelExpressions:
  - {key: kubernetes.io/hostname, values: [$RN_NAME]}
EOF
}

# rn_launch_prefix: sets RN_LAUNCH, the argv prefix that runs a command in the node's cgroup (our
# system cgroup of every hierarchy, entered before the exec so its children, the runtime's shims
# among them, start there) and namespaces. The pid stays the same through both execs, so `start`'s
# pid file names the daemon.
rn_launch_prefix() {
  RN_LAUNCH=(sh -c 'cgroups=$1 net=$2 mnt=$3; shift 3
    for h in $cgroups; do echo $$ > "$h/cgroup.procs" || exit 1; done
    exec nsenter --net="$net" --mount="$mnt" -- "$@"' sh
    "$(rn_hierarchies | sed "s#\$#/$RN_CGROUP/system#" | tr '\n' ' ')" "$RN_NETNS" "$RN_MNTNS")
  # CoreDNS: in the node's cgroup, but on the host's network (it reaches the host's resolver).
  RN_HOST_LAUNCH=(sh -c 'cgroups=$1; shift
    for h in $cgroups; do echo $$ > "$h/cgroup.procs" || exit 1; done
    exec "$@"' sh "$(rn_hierarchies | sed "s#\$#/$RN_CGROUP/system#" | tr '\n' ' ')")
}

# rn_kube_proxy_healthy: kube-proxy has synced its rules (its healthz, inside the node's network).
rn_kube_proxy_healthy() {
  rn_in python3 -c 'import sys, urllib.request; sys.exit(urllib.request.urlopen(sys.argv[1], timeout=2).status != 200)' \
    http://127.0.0.1:10256/healthz 2>/dev/null
}

# rn_services_up: the `kubernetes` Service left to the forwarder's DNAT, CoreDNS behind kube-dns,
# kube-proxy; returns once CoreDNS answers for the cluster and kube-proxy has synced.
rn_services_up() {
  # kube-proxy leaves a Service with this label to another proxy: here the DNAT of rn_namespaces_create
  # (the Service's endpoint is the apiserver's loopback address, which no pod can reach).
  sim_kubectl label service kubernetes -n default --overwrite \
    service.kubernetes.io/service-proxy-name=trainguard-real-node-forwarder >/dev/null ||
    tg_die "cannot label the kubernetes Service"
  rn_dns_yaml | sim_kubectl apply -f - >/dev/null || tg_die "cannot create the kube-dns Service and CoreDNS's RBAC"
  start coredns "$(rn_pidfile coredns)" "$LOGS/real-node-coredns.log" \
    "${RN_HOST_LAUNCH[@]}" "$RN_CACHE/coredns" -conf "$RN_DIR/Corefile"
  # kube-proxy, iptables mode, in the node's namespaces. Host settings are left alone: conntrack
  # sizes and timeouts as they are (0: leave as-is; nf_conntrack_max is the host's), no localhost
  # NodePorts (they would set route_localnet), no OOM score change (root may not lower it here).
  start kube-proxy "$(rn_pidfile kube-proxy)" "$LOGS/real-node-kube-proxy.log" \
    "${RN_LAUNCH[@]}" "$CACHE_BIN/kube-proxy" --kubeconfig "$RN_DIR/kube-proxy.kubeconfig" \
    --hostname-override "$RN_NAME" --proxy-mode iptables --cluster-cidr "$RN_POD_CIDR" \
    --bind-address "$RN_NODE_IP" --metrics-bind-address 127.0.0.1:10249 --healthz-bind-address 127.0.0.1:10256 \
    --conntrack-max-per-core 0 --conntrack-min 0 --conntrack-tcp-timeout-established 0 \
    --conntrack-tcp-timeout-close-wait 0 --conntrack-udp-timeout 0 --conntrack-udp-timeout-stream 0 \
    --iptables-localhost-nodeports=false --oom-score-adj 0 --v=1
  local deadline=$(( $(date +%s) + TIMEOUT ))
  until rn_dns_ready && rn_kube_proxy_healthy; do
    tg_alive "$(rn_pidfile coredns)" || tg_die "CoreDNS exited during start-up" "$LOGS/real-node-coredns.log"
    tg_alive "$(rn_pidfile kube-proxy)" || tg_die "kube-proxy exited during start-up" "$LOGS/real-node-kube-proxy.log"
    [ "$(date +%s)" -lt "$deadline" ] || tg_die "CoreDNS or kube-proxy not ready after ${TIMEOUT}s" \
      "$LOGS/real-node-kube-proxy.log"
    sleep 0.5
  done
}

rn_up() {
  [ "$(id -u)" = 0 ] || tg_die "the real node needs root (namespaces, cgroups, containerd)"
  rn_build
  mkdir -p "$RN_DIR"
  # Running means all of it: a node of an older up (no kube-proxy, no CoreDNS) is started again.
  if tg_alive "$(rn_pidfile kubelet)" && tg_alive "$(rn_pidfile kube-proxy)" && tg_alive "$(rn_pidfile coredns)" &&
      rn_node_ready; then
    tg_log "real node $RN_NAME already running"
    return 0
  fi
  rn_down_quiet
  RN_UP_DONE=0
  trap 'if [ "$RN_UP_DONE" = 0 ]; then tg_log "real node start-up failed: removing what it made"; rn_down_quiet; fi' EXIT
  rn_write_configs
  rn_cgroups_create
  rn_namespaces_create
  rn_launch_prefix
  start forwarder "$(rn_pidfile forwarder)" "$LOGS/real-node-forwarder.log" \
    python3 "$RN_LIB/forward.py" "$RN_HOST_IP" "$API_PORT" "$API_PORT"
  # containerd and the kubelet: in the node's namespaces and cgroup (a shell that moves itself there first).
  start containerd "$(rn_pidfile containerd)" "$LOGS/real-node-containerd.log" \
    "${RN_LAUNCH[@]}" containerd --config "$RN_DIR/containerd.toml"
  local deadline=$(( $(date +%s) + TIMEOUT ))
  until rn_ctr version >/dev/null 2>&1; do
    tg_alive "$(rn_pidfile containerd)" || tg_die "containerd exited during start-up" "$LOGS/real-node-containerd.log"
    [ "$(date +%s)" -lt "$deadline" ] || tg_die "containerd not ready after ${TIMEOUT}s" "$LOGS/real-node-containerd.log"
    sleep 0.2
  done
  rn_import_images
  start kubelet "$(rn_pidfile kubelet)" "$LOGS/real-node-kubelet.log" \
    "${RN_LAUNCH[@]}" "$CACHE_BIN/kubelet" --config "$RN_DIR/kubelet.yaml" --kubeconfig "$RN_DIR/kubeconfig" \
    --hostname-override "$RN_NAME" --node-ip "$RN_NODE_IP" --root-dir "$RN_DIR/kubelet" --v=1
  deadline=$(( $(date +%s) + TIMEOUT ))
  until rn_node_ready; do
    tg_alive "$(rn_pidfile kubelet)" || tg_die "the kubelet exited during start-up" "$LOGS/real-node-kubelet.log"
    [ "$(date +%s)" -lt "$deadline" ] || tg_die "$RN_NAME not Ready after ${TIMEOUT}s" "$LOGS/real-node-kubelet.log"
    sleep 0.5
  done
  sim_kubectl label node "$RN_NAME" --overwrite trainguard.dev/real-node=true >/dev/null
  # the taint again: registerWithTaints applies only when the kubelet creates the Node object
  sim_kubectl taint node "$RN_NAME" trainguard.dev/real-node:NoSchedule- >/dev/null 2>&1 || true  # an older up's
  sim_kubectl taint node "$RN_NAME" --overwrite trainguard.dev/real-node=true:PreferNoSchedule >/dev/null ||
    tg_die "cannot taint $RN_NAME"
  rn_storage_yaml | sim_kubectl apply -f - >/dev/null || tg_die "cannot create the StorageClass"
  rn_services_up
  start provisioner "$(rn_pidfile provisioner)" "$LOGS/real-node-provisioner.log" \
    python3 "$RN_LIB/provisioner.py" "$KUBECONFIG_FILE" "$BIN/kubectl" "$RN_NAME" "$RN_DIR/volumes"
  RN_UP_DONE=1
  tg_log "real node $RN_NAME Ready ($RN_NODE_IP; pods $RN_POD_CIDR; kube-proxy; DNS $RN_DNS_IP, $RN_CLUSTER_DOMAIN);" \
    "images $RN_PAUSE_IMAGE, $RN_BUSYBOX_IMAGE, trainguard:dev (and :dev-2), $RN_MYSQL_IMAGE"
}

rn_down_quiet() {
  local name
  for name in provisioner kube-proxy coredns kubelet containerd forwarder; do
    [ -s "$(rn_pidfile "$name")" ] && tg_stop_pidfiles "$(rn_pidfile "$name")"
    rm -f "$(rn_pidfile "$name")"
  done
  rn_cgroups_remove
  rn_namespaces_remove
  # Mounts the runtime made live in its mount namespace, gone with it; refuse to delete through one.
  if grep -q " $RN_DIR/" /proc/self/mountinfo; then
    tg_log "warning: something is still mounted under $RN_DIR: not deleting it"
  else
    rm -rf "$RN_DIR"
  fi
}

rn_down() {
  [ -d "$RN_DIR" ] || return 0
  [ "$(id -u)" = 0 ] || tg_die "stopping the real node needs root"
  sim_kubectl delete node "$RN_NAME" --ignore-not-found --wait=false >/dev/null 2>&1 || true
  sim_kubectl delete storageclass real-node-local --ignore-not-found --wait=false >/dev/null 2>&1 || true
  rn_dns_yaml | sim_kubectl delete --ignore-not-found --wait=false -f - >/dev/null 2>&1 || true
  sim_kubectl label service kubernetes -n default service.kubernetes.io/service-proxy-name- >/dev/null 2>&1 || true
  rn_down_quiet
  tg_log "real node $RN_NAME stopped and removed"
}

rn_status() {
  local rc=0 name
  for name in forwarder containerd kubelet provisioner coredns kube-proxy; do
    if tg_alive "$(rn_pidfile "$name")"; then
      printf '%-16s pid %s\n' "real-node $name:" "$(cat "$(rn_pidfile "$name")")"
    else
      printf '%-16s not running\n' "real-node $name:"; rc=1
    fi
  done
  rn_node_ready && echo "node $RN_NAME:   Ready" || { echo "node $RN_NAME:   not Ready"; rc=1; }
  return $rc
}
