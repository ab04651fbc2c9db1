#!/usr/bin/env bash
# hack/local-helm.sh: helm (and the helm-unittest plugin) for the chart in charts/trainguard,
# compiled once from the Go module registry and cached outside the repository, like the
# Kubernetes binaries. The repository's copy is .local/bin/helm (a symbolic link to the cache).
#
#   hack/local-helm.sh build     build (or reuse) helm, link .local/bin/helm
#   hack/local-helm.sh unittest  also build (or reuse) the helm-unittest plugin
#   hack/local-helm.sh path      build helm if needed, print the path of .local/bin/helm
#   hack/local-helm.sh env       print HELM_* variables that make `helm unittest` find the plugin
#
# Settings (environment):
#   TG_HELM_CACHE   ${XDG_CACHE_HOME:-$HOME/.cache}/trainguard/helm   compiled binaries
#
# helm-unittest cannot be built with `go install module@version` (its go.mod has replace
# directives), so its module is downloaded into the module cache and built from a copy of it.
# The plugin lives in a helm data directory of our own (<cache>/data), never in the user's.
set -euo pipefail
TG_SCRIPT_NAME=local-helm
# shellcheck source=hack/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"

usage() { sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; }

HELM_VERSION=v3.22.0
HELM_MODULE=helm.sh/helm/v3/cmd/helm
UNITTEST_VERSION=v1.1.2
UNITTEST_MODULE=github.com/helm-unittest/helm-unittest
CACHE_ROOT=${TG_HELM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/trainguard/helm}
HELM_BIN=$CACHE_ROOT/$HELM_VERSION/helm
DATA_HOME=$CACHE_ROOT/data
PLUGIN_DIR=$DATA_HOME/plugins/unittest
UNITTEST_BIN=$CACHE_ROOT/helm-unittest-$UNITTEST_VERSION/helm-unittest
LOCAL_BIN=$TG_REPO_ROOT/.local/bin

need_go() { command -v go >/dev/null || tg_die "the Go toolchain is needed to build $1 (go on PATH)"; }

# lock: one build at a time per machine (fd 8); binaries appear only when their build succeeded.
lock() { mkdir -p "$CACHE_ROOT"; exec 8>"$CACHE_ROOT/.build.lock"; flock 8; }
unlock() { exec 8>&-; }

cmd_build() {
  if [ ! -x "$HELM_BIN" ]; then
    need_go helm
    lock
    if [ ! -x "$HELM_BIN" ]; then
      local tmp log=$CACHE_ROOT/build-helm-$HELM_VERSION.log start
      tmp=$(mktemp -d "$CACHE_ROOT/.build.XXXXXX")
      start=$(date +%s)
      tg_log "building helm $HELM_VERSION (go install, a few minutes cold; log: $log)"
      # Plain flags (no -trimpath/-ldflags/CGO change): they would change every package's build id
      # and miss the Go build cache that an earlier build of the same module filled.
      if ! (cd "$tmp" && GOBIN=$tmp GOTOOLCHAIN=local GOFLAGS="-buildvcs=false -p=2" \
          nice -n 10 go install "$HELM_MODULE@$HELM_VERSION") >"$log" 2>&1; then
        rm -rf "$tmp"
        tg_die "go install $HELM_MODULE@$HELM_VERSION failed" "$log"
      fi
      mkdir -p "${HELM_BIN%/*}"
      mv "$tmp/helm" "$HELM_BIN"
      rm -rf "$tmp"
      tg_log "built in $(($(date +%s) - start)) s: $HELM_BIN"
    fi
    unlock
  fi
  mkdir -p "$LOCAL_BIN"
  ln -sfn "$HELM_BIN" "$LOCAL_BIN/helm"
}

cmd_unittest() {
  cmd_build
  if [ ! -x "$UNITTEST_BIN" ] || ! grep -qs '^command: "$HELM_PLUGIN_DIR/untt"$' "$PLUGIN_DIR/plugin.yaml"; then
    need_go helm-unittest
    lock
    if [ ! -x "$UNITTEST_BIN" ]; then
      local tmp log=$CACHE_ROOT/build-helm-unittest-$UNITTEST_VERSION.log dir start
      tmp=$(mktemp -d "$CACHE_ROOT/.build.XXXXXX")
      start=$(date +%s)
      tg_log "building helm-unittest $UNITTEST_VERSION (about two minutes cold; log: $log)"
      dir=$(GOTOOLCHAIN=local go mod download -json "$UNITTEST_MODULE@$UNITTEST_VERSION" 2>>"$log" |
        python3 -c 'import json,sys; d=json.load(sys.stdin); print(d.get("Dir") or sys.exit(d.get("Error","no Dir")))') ||
        { rm -rf "$tmp"; tg_die "go mod download $UNITTEST_MODULE@$UNITTEST_VERSION failed" "$log"; }
      cp -r "$dir" "$tmp/src"
      chmod -R u+w "$tmp/src"
      if ! (cd "$tmp/src" && GOTOOLCHAIN=local GOFLAGS="-buildvcs=false -p=2" \
          nice -n 10 go build -o "$tmp/helm-unittest" ./cmd/helm-unittest) >>"$log" 2>&1; then
        rm -rf "$tmp"
        tg_die "go build of helm-unittest failed" "$log"
      fi
      mkdir -p "${UNITTEST_BIN%/*}"
      mv "$tmp/helm-unittest" "$UNITTEST_BIN"
      rm -rf "$tmp"
      tg_log "built in $(($(date +%s) - start)) s: $UNITTEST_BIN"
    fi
    # The plugin: a manifest of our own that runs the binary we built (the upstream one names
    # per-platform release binaries and install hooks that download them).
    mkdir -p "$PLUGIN_DIR"
    printf '%s\n' 'name: "unittest"' "version: \"${UNITTEST_VERSION#v}\"" \
      'usage: "unittest for helm charts"' 'description: "helm-unittest, built from source by hack/local-helm.sh"' \
      'ignoreFlags: false' 'command: "$HELM_PLUGIN_DIR/untt"' > "$PLUGIN_DIR/plugin.yaml"
    ln -sfn "$UNITTEST_BIN" "$PLUGIN_DIR/untt"
    unlock
  fi
}

case "${1:-}" in
  build) cmd_build ;;
  unittest) cmd_unittest ;;
  path) cmd_build; echo "$LOCAL_BIN/helm" ;;
  env) echo "export HELM_DATA_HOME=$DATA_HOME" ;;
  -h|--help|help) usage ;;
  *) usage >&2; exit 2 ;;
esac
