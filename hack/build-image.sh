#!/usr/bin/env bash
# hack/build-image.sh: the Trainguard container image as an OCI image layout, built from Debian
# packages without a container runtime or a base image (neither is available on every build host;
# the Dockerfile is the build for hosts that have them: docs/image.md).
#
#   hack/build-image.sh build      build (cached) and print the layout's path and tag
#   hack/build-image.sh path       print the OCI layout directory
#   hack/build-image.sh lock       regenerate requirements.lock (runtime dependencies, pinned, hashed)
#   hack/build-image.sh remove     delete the cache
#
# Steps (each cached under ${TG_IMAGE_CACHE:-~/.cache/trainguard/image}, redone only when its
# inputs change): debootstrap a minimal Debian 12 (bookworm) root with python3 and python3-venv
# (base/); download the locked wheels (--require-hashes, binary only: nothing is compiled) and build
# Trainguard's own wheel (deps/, own/); copy base/ to rootfs/, create the venv /opt/trainguard in it
# from those wheels alone (chroot, --no-index), add the user trainguard (uid 10001); pack rootfs/
# with umoci (Debian's package) into oci/ as trainguard:VERSION, entrypoint
# /opt/trainguard/bin/trainguard, user 10001. Needs root (debootstrap, chroot).
set -euo pipefail
TG_SCRIPT_NAME=build-image
# shellcheck source=hack/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
# shellcheck source=hack/lib/debian.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/debian.sh"

usage() { sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; }

CACHE=${TG_IMAGE_CACHE:-$HOME/.cache/trainguard/image}
SUITE=bookworm
BASE_PACKAGES=(python3 python3-venv)
UID_GID=10001
LOCK=$TG_REPO_ROOT/requirements.lock
VERSION=$(sed -n 's/^version = "\(.*\)"/\1/p' "$TG_REPO_ROOT/pyproject.toml" | head -1)
TAG=$VERSION
PY=${TG_IMAGE_HOST_PYTHON:-$TG_REPO_ROOT/.venv/bin/python}
[ -x "$PY" ] || PY=python3

stamp_ok() { [ -s "$1" ] && [ "$(cat "$1")" = "$2" ]; }

build_base() {
  local base=$CACHE/base want
  want="suite=$SUITE packages=${BASE_PACKAGES[*]} format=1"
  stamp_ok "$base.stamp" "$want" && return 0
  command -v debootstrap >/dev/null || tg_apt_install debootstrap
  safe_remove "$base.partial"
  safe_remove "$base"
  tg_log "debootstrap $SUITE with ${BASE_PACKAGES[*]} into $base (a few minutes)"
  if ! debootstrap --variant=minbase --include="$(IFS=,; echo "${BASE_PACKAGES[*]}")" \
      "$SUITE" "$base.partial" "$(mirror)" >"$CACHE/base.log" 2>&1; then
    safe_remove "$base.partial"
    tg_die "debootstrap failed (log: $CACHE/base.log)" "$CACHE/base.log"
  fi
  rm -rf "$base.partial"/var/cache/apt/archives/*.deb "$base.partial"/var/lib/apt/lists/*
  mv "$base.partial" "$base"
  echo "$want" > "$base.stamp"
}

build_wheels() {   # the locked wheels (hash-checked, binary only), then our own wheel: cached apart
  local deps=$CACHE/deps own=$CACHE/own want
  want="lock=$(sha256sum "$LOCK" | cut -d' ' -f1)"
  if ! stamp_ok "$deps.stamp" "$want"; then
    rm -rf "$deps" && mkdir -p "$deps"
    tg_log "downloading the locked wheels"
    "$PY" -m pip download -q --disable-pip-version-check --only-binary=:all: --require-hashes --no-deps \
      -r "$LOCK" -d "$deps" || tg_die "pip download of requirements.lock failed"
    cp "$LOCK" "$deps/requirements.lock"
    echo "$want" > "$deps.stamp"
  fi
  want="src=$(src_hash)"
  if ! stamp_ok "$own.stamp" "$want"; then
    rm -rf "$own" && mkdir -p "$own"
    tg_log "building the trainguard wheel"
    "$PY" -m pip wheel -q --disable-pip-version-check --no-deps -w "$own" "$TG_REPO_ROOT" ||
      tg_die "pip wheel failed"
    echo "$want" > "$own.stamp"
  fi
}

src_hash() {   # what the trainguard wheel is built from
  (cd "$TG_REPO_ROOT" && git ls-files -z -- operator pyproject.toml README.md | sort -z |
    xargs -0 sha256sum 2>/dev/null | sha256sum | cut -d' ' -f1)
}

build_rootfs() {
  local root=$CACHE/rootfs want
  want="base=$(cat "$CACHE/base.stamp") deps=$(cat "$CACHE/deps.stamp") own=$(cat "$CACHE/own.stamp") uid=$UID_GID format=1"
  stamp_ok "$root.stamp" "$want" && return 0
  safe_remove "$root.partial"
  safe_remove "$root"
  tg_log "installing the venv into a copy of the base root"
  cp -a "$CACHE/base" "$root.partial"
  mkdir -p "$root.partial/tmp/wheels"
  cp "$CACHE/deps/"* "$CACHE/own/"* "$root.partial/tmp/wheels/"
  # No network in the root: pip sees only the downloaded wheels; the lock's hashes are checked again.
  chroot "$root.partial" /bin/sh -euc '
    python3 -m venv /opt/trainguard
    /opt/trainguard/bin/pip install -q --disable-pip-version-check --no-index --find-links /tmp/wheels \
      --require-hashes --only-binary=:all: -r /tmp/wheels/requirements.lock
    /opt/trainguard/bin/pip install -q --disable-pip-version-check --no-index --no-deps /tmp/wheels/trainguard-*.whl
    /opt/trainguard/bin/pip uninstall -q -y pip setuptools 2>/dev/null || true
    groupadd --system --gid '"$UID_GID"' trainguard
    useradd --system --uid '"$UID_GID"' --gid '"$UID_GID"' --home-dir /var/lib/trainguard --create-home \
      --shell /usr/sbin/nologin trainguard
  ' >"$CACHE/rootfs.log" 2>&1 || tg_die "installing into the root failed (log: $CACHE/rootfs.log)" "$CACHE/rootfs.log"
  rm -rf "$root.partial/tmp/wheels" "$root.partial/root/.cache" "$root.partial"/usr/share/doc/* \
    "$root.partial"/usr/share/man/* "$root.partial"/usr/share/info/*
  mv "$root.partial" "$root"
  echo "$want" > "$root.stamp"
}

pack() {
  local layout=$CACHE/oci bundle=$CACHE/bundle want
  want="rootfs=$(cat "$CACHE/rootfs.stamp") tag=$TAG format=1"
  stamp_ok "$layout.stamp" "$want" && return 0
  command -v umoci >/dev/null || tg_apt_install umoci
  rm -rf "$layout" "$bundle"
  tg_log "packing $layout:$TAG with umoci"
  umoci init --layout "$layout"
  umoci new --image "$layout:$TAG"
  umoci unpack --image "$layout:$TAG" "$bundle" >/dev/null
  cp -a "$CACHE/rootfs/." "$bundle/rootfs/"
  umoci repack --image "$layout:$TAG" "$bundle"
  umoci config --image "$layout:$TAG" --author "trainguard hack/build-image.sh" \
    --config.user "$UID_GID:$UID_GID" --config.workingdir /var/lib/trainguard \
    --config.entrypoint /opt/trainguard/bin/trainguard --config.cmd operator \
    --config.env PATH=/opt/trainguard/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    --config.env PYTHONDONTWRITEBYTECODE=1 --config.env TRAINGUARD_HOME=/var/lib/trainguard \
    --config.label "org.opencontainers.image.title=trainguard" \
    --config.label "org.opencontainers.image.version=$VERSION" \
    --config.label "org.opencontainers.image.licenses=Apache-2.0"
  umoci gc --layout "$layout"
  rm -rf "$bundle"
  echo "$want" > "$layout.stamp"
}

cmd_lock() {   # runtime dependencies with the mysql extra (the chart can use MySQL); no dev, no workloads
  # extra: torch is only for the test workloads
  local report
  report=$(mktemp)
  tg_log "resolving the runtime dependencies of $TG_REPO_ROOT"
  "$PY" -m pip install -q --disable-pip-version-check --dry-run --ignore-installed --only-binary=:all: \
    --report "$report" "$TG_REPO_ROOT[mysql]" || tg_die "pip could not resolve the runtime dependencies"
  "$PY" - "$report" "$LOCK" <<'EOF'
import json, sys
report, out = sys.argv[1], sys.argv[2]
lines = ["# Runtime dependencies of the trainguard image, pinned with their sha256 (generated by",
         "# `hack/build-image.sh lock`; CPython 3.11, Linux x86_64). Install with",
         "#   pip install --require-hashes --only-binary=:all: -r requirements.lock"]
for item in sorted(json.load(open(report))["install"], key=lambda i: i["metadata"]["name"].lower()):
    meta, info = item["metadata"], item.get("download_info", {})
    if meta["name"] == "trainguard":
        continue
    sha = info.get("archive_info", {}).get("hashes", {}).get("sha256") or info["archive_info"]["hash"].split("=")[1]
    lines.append(f"{meta['name'].lower()}=={meta['version']} \\\n    --hash=sha256:{sha}")
open(out, "w").write("\n".join(lines) + "\n")
EOF
  rm -f "$report"
  tg_log "wrote $LOCK"
}

cmd=${1:-}
case "$cmd" in
  build)
    tg_need_root
    mkdir -p "$CACHE"
    exec 8>"$CACHE/.lock"
    flock 8
    started=$(date +%s)
    build_base
    build_wheels
    build_rootfs
    pack
    tg_log "ready: $CACHE/oci:$TAG ($(($(date +%s) - started)) s)"
    echo "$CACHE/oci:$TAG"
    ;;
  path) echo "$CACHE/oci" ;;
  lock) cmd_lock ;;
  remove) tg_need_root; safe_remove "$CACHE/base"; safe_remove "$CACHE/rootfs"; rm -rf "$CACHE"; tg_log "removed $CACHE" ;;
  -h | --help | help) usage ;;
  *) usage >&2; [ -z "$cmd" ] || echo "unknown command: $cmd" >&2; exit 2 ;;
esac
