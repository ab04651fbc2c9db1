#!/usr/bin/env bash
# hack/build-mysql-image.sh: a MySQL-compatible server image for the chart's MySQL subchart, built
# from Debian 12's own packages (MariaDB 10.11, `mariadb-server`) without a container runtime or a
# base image, as an OCI image layout. The real node (hack/local-kube.sh up --cluster --real-node)
# imports it; the chart test installs the subchart with it (mysql.image).
#
#   hack/build-mysql-image.sh build     build (cached) and print the layout's path and tag
#   hack/build-mysql-image.sh path      print the OCI layout directory
#   hack/build-mysql-image.sh remove    delete the cache
#
# Steps (cached under ${TG_MYSQL_IMAGE_CACHE:-~/.cache/trainguard/mysql-image}, redone when their
# inputs change): debootstrap a minimal Debian 12 root with mariadb-server (rootfs/; no daemon is
# started: debootstrap replaces start-stop-daemon while it installs); the package's mysql user and
# group renumbered to 999 (the subchart's runAsUser/fsGroup); its data directory emptied (the pod's
# volume is initialised by the entrypoint, not the package); hack/lib/mysql-image/entrypoint.sh
# added; packed with umoci as trainguard-mariadb:TAG, user 999:999.
#
# The entrypoint honours what the subchart's StatefulSet passes (charts/trainguard/charts/mysql):
# MYSQL_ROOT_PASSWORD, MYSQL_DATABASE, MYSQL_USER, MYSQL_PASSWORD; the data directory /var/lib/mysql
# (the claim); the socket directory /var/run/mysqld (an emptyDir). It initialises the data directory
# once (mariadb-install-db, then the root password, the database and the user through a server
# that listens on no TCP port) and keeps it across restarts; then it runs mariadbd in the
# foreground on port 3306. Needs root (debootstrap, chroot).
set -euo pipefail
TG_SCRIPT_NAME=build-mysql-image
# shellcheck source=hack/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
# shellcheck source=hack/lib/debian.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/debian.sh"

usage() { sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; }

CACHE=${TG_MYSQL_IMAGE_CACHE:-$HOME/.cache/trainguard/mysql-image}
SUITE=bookworm
PACKAGES=(mariadb-server)
UID_GID=999
ENTRYPOINT=$TG_REPO_ROOT/hack/lib/mysql-image/entrypoint.sh
TAG=10.11-1

stamp_ok() { [ -s "$1" ] && [ "$(cat "$1")" = "$2" ]; }

build_rootfs() {
  local root=$CACHE/rootfs want
  want="suite=$SUITE packages=${PACKAGES[*]} uid=$UID_GID format=1"
  stamp_ok "$root.stamp" "$want" && return 0
  command -v debootstrap >/dev/null || tg_apt_install debootstrap
  safe_remove "$root.partial"
  safe_remove "$root"
  tg_log "debootstrap $SUITE with ${PACKAGES[*]} into $root.partial (a few minutes)"
  if ! debootstrap --variant=minbase --include="$(IFS=,; echo "${PACKAGES[*]}")" \
      "$SUITE" "$root.partial" "$(mirror)" >"$CACHE/rootfs.log" 2>&1; then
    safe_remove "$root.partial"
    tg_die "debootstrap failed (log: $CACHE/rootfs.log)" "$CACHE/rootfs.log"
  fi
  if awk -v d="$root.partial/" 'index($2, d) == 1 { found = 1 } END { exit !found }' /proc/mounts; then
    tg_die "debootstrap left file systems mounted under $root.partial"
  fi
  # The package's mysql user takes the next free system id; the subchart runs the server as 999.
  chroot "$root.partial" /bin/sh -euc '
    old=$(id -u mysql)
    groupmod --gid '"$UID_GID"' mysql
    usermod --uid '"$UID_GID"' --gid '"$UID_GID"' mysql
    find / -xdev -uid "$old" -exec chown -h '"$UID_GID:$UID_GID"' {} +
    rm -rf /var/lib/mysql/* /run/mysqld/*
    install -d -o mysql -g mysql -m 0755 /var/lib/mysql /run/mysqld
    /usr/sbin/mariadbd --version
  ' >>"$CACHE/rootfs.log" 2>&1 || tg_die "preparing the root failed (log: $CACHE/rootfs.log)" "$CACHE/rootfs.log"
  rm -rf "$root.partial"/var/cache/apt/archives/*.deb "$root.partial"/var/lib/apt/lists/* \
    "$root.partial"/usr/share/doc/* "$root.partial"/usr/share/man/* "$root.partial"/usr/share/info/*
  mv "$root.partial" "$root"
  echo "$want" > "$root.stamp"
}

pack() {
  local layout=$CACHE/oci bundle=$CACHE/bundle want
  want="rootfs=$(cat "$CACHE/rootfs.stamp") entrypoint=$(sha256sum "$ENTRYPOINT" | cut -d' ' -f1) tag=$TAG format=1"
  stamp_ok "$layout.stamp" "$want" && return 0
  command -v umoci >/dev/null || tg_apt_install umoci
  rm -rf "$layout" "$bundle"
  tg_log "packing $layout:$TAG with umoci"
  umoci init --layout "$layout"
  umoci new --image "$layout:$TAG"
  umoci unpack --image "$layout:$TAG" "$bundle" >/dev/null
  cp -a "$CACHE/rootfs/." "$bundle/rootfs/"
  install -m 0755 "$ENTRYPOINT" "$bundle/rootfs/usr/local/bin/tg-mariadb-entrypoint"
  umoci repack --image "$layout:$TAG" "$bundle"
  umoci config --image "$layout:$TAG" --author "trainguard hack/build-mysql-image.sh" \
    --config.user "$UID_GID:$UID_GID" --config.workingdir /var/lib/mysql \
    --config.entrypoint /usr/local/bin/tg-mariadb-entrypoint \
    --config.env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    --config.exposedports 3306/tcp \
    --config.label "org.opencontainers.image.title=trainguard-mariadb" \
    --config.label "org.opencontainers.image.version=$TAG" \
    --config.label "org.opencontainers.image.description=MariaDB from Debian 12 packages for the Trainguard chart's MySQL subchart"
  umoci gc --layout "$layout"
  rm -rf "$bundle"
  echo "$want" > "$layout.stamp"
}

cmd=${1:-}
case "$cmd" in
  build)
    tg_need_root
    mkdir -p "$CACHE"
    exec 8>"$CACHE/.lock"
    flock 8
    started=$(date +%s)
    build_rootfs
    pack
    tg_log "ready: $CACHE/oci:$TAG ($(($(date +%s) - started)) s)"
    echo "$CACHE/oci:$TAG"
    ;;
  path) echo "$CACHE/oci" ;;
  remove) tg_need_root; safe_remove "$CACHE/rootfs"; safe_remove "$CACHE/rootfs.partial"; rm -rf "$CACHE"; tg_log "removed $CACHE" ;;
  -h | --help | help) usage ;;
  *) usage >&2; [ -z "$cmd" ] || echo "unknown command: $cmd" >&2; exit 2 ;;
esac
