#!/usr/bin/env bash
# hack/test.sh: the one command that runs Trainguard's whole test suite, on a fresh Debian
# machine (as root) or a developer's checkout.
#
#   hack/test.sh [PYTEST ARGS...]     e.g.  hack/test.sh -m unit     hack/test.sh -x tests/unit
#
# Steps: create .venv if missing (python3 -m venv; installs python3-venv if needed), install
# the package with its dev extras (again only when pyproject.toml changed) and the test workloads'
# torch and numpy from a per-machine cache (~/.cache/trainguard/workloads, on the venv's path), then the gates
# ruff, mypy and lint-imports (each fails fast with its name), then pytest with the given
# arguments. The pytest fixtures start the real services the tests need (local Slurm,
# PostgreSQL, Kubernetes API) and stop what they started; if pytest dies before its teardown, the trap here
# stops services that pytest started and no other session still uses.
#
# Environment: TG_SLURM_ROOT=DIR runs the Slurm tiers against the Slurm of a root made by
# hack/slurm-root.sh (Slurm 24.11; see hack/local-slurm.sh);
# TG_SKIP_SLURM=1 / TG_SKIP_POSTGRES=1 / TG_SKIP_MYSQL=1 / TG_SKIP_KUBE=1 / TG_SKIP_VLOGS=1 / TG_SKIP_PROMETHEUS=1 / TG_SKIP_ALERTMANAGER=1 / TG_SKIP_IMAGE=1 / TG_SKIP_HELM=1 skip those
# tiers (TG_SKIP_SIM_CLUSTER=1 only the simulated-cluster tests); TG_KEEP_CLUSTER=1 keeps services running afterwards; TG_REINSTALL=1 forces the pip install; TG_SKIP_LINT=1 skips the
# gates (for quick local loops only; CI never sets it). TG_TEST_WORKERS=N (default 2) runs pytest in N
# pytest-xdist workers, each with its own services; TG_TEST_SLOT=S shifts every worker's services
# to slots S, S+1, ... (another run beside this one: tests/support/workers.py).
set -euo pipefail
TG_SCRIPT_NAME="test"
# shellcheck source=hack/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
cd "$TG_REPO_ROOT"

VENV=$TG_REPO_ROOT/.venv
PY=$VENV/bin/python

# ------------------------------------------------------------------ simulated cluster build
# The simulated cluster's Go builds (hack/local-kube.sh build --cluster: about 10 minutes cold on
# 2 cores, a no-op when cached) run in the background while the virtualenv installs and the
# gates run; the build block further down waits for them and shows the log if they failed.
SIM_BUILD_PID=
SIM_BUILD_LOG=$TG_REPO_ROOT/.local/sim-cluster-build.log
if [ "${TG_SKIP_KUBE:-0}" != 1 ] && [ "${TG_SKIP_SIM_CLUSTER:-0}" != 1 ] && [ -x hack/local-kube.sh ]; then
  mkdir -p "$TG_REPO_ROOT/.local"
  hack/local-kube.sh build --cluster </dev/null >"$SIM_BUILD_LOG" 2>&1 &
  SIM_BUILD_PID=$!
fi
# helm and its helm-unittest plugin (the chart tests): a few minutes of Go compile cold, a no-op when
# cached; in the background too, waited for before pytest.
HELM_BUILD_PID=
HELM_BUILD_LOG=$TG_REPO_ROOT/.local/helm-build.log
if [ "${TG_SKIP_HELM:-0}" != 1 ]; then
  mkdir -p "$TG_REPO_ROOT/.local"
  hack/local-helm.sh unittest </dev/null >"$HELM_BUILD_LOG" 2>&1 &
  HELM_BUILD_PID=$!
fi

# ------------------------------------------------------------------ virtualenv
# Under a lock: .ci/run starts a second hack/test.sh (the Slurm 24.11 tier) beside the first.
mkdir -p "$TG_REPO_ROOT/.local"
exec 8>"$TG_REPO_ROOT/.local/venv.lock"
flock 8
tg_ensure_venv "$VENV"

# ------------------------------------------------------------------ container image build
# The image (tests marked image; hack/build-image.sh: debootstrap + umoci, cached in
# ~/.cache/trainguard/image) is mostly downloads and unpacking, several minutes cold: it is built
# in the background too (once the venv exists: its pip fetches the locked wheels), beside the Go
# builds and the pip install, and waited for before pytest. Needs root: without
# it, or with TG_SKIP_IMAGE=1, the image tests skip.
IMAGE_BUILD_PID=
IMAGE_BUILD_LOG=$TG_REPO_ROOT/.local/image-build.log
if [ "${TG_SKIP_IMAGE:-0}" != 1 ] && [ "$(id -u)" = 0 ]; then
  mkdir -p "$TG_REPO_ROOT/.local"
  hack/build-image.sh build </dev/null >"$IMAGE_BUILD_LOG" 2>&1 &
  IMAGE_BUILD_PID=$!
fi


stamp=$VENV/.trainguard-installed
want=$(sha256sum pyproject.toml | cut -d' ' -f1)
if [ "${TG_REINSTALL:-0}" = 1 ] || [ ! -s "$stamp" ] || [ "$(cat "$stamp")" != "$want" ] ||
  [ ! -x "$VENV/bin/pytest" ]; then
  tg_log "installing trainguard[dev] into $VENV"
  "$PY" -m pip install -q --disable-pip-version-check -e '.[dev]' ||
    tg_die "pip install -e '.[dev]' failed"
  echo "$want" > "$stamp"
fi
# the `workloads` extra (torch, numpy) from a per-machine cache, on the venv's path (common.sh)
tg_workloads_site "$VENV"
flock -u 8

# ------------------------------------------------------------------ gates
gate() {   # gate NAME COMMAND...: run it; on failure say which gate failed and stop
  local name=$1 rc=0
  shift
  tg_log "$name"
  "$@" || rc=$?
  [ $rc = 0 ] || tg_die "$name failed (exit $rc): fix the errors above; nothing else was run"
}
if [ "${TG_SKIP_LINT:-0}" != 1 ]; then
  lint_dirs=()
  for d in operator tests benchmarks; do [ -d "$d" ] && lint_dirs+=("$d"); done
  gate "ruff check ${lint_dirs[*]}" "$VENV/bin/ruff" check "${lint_dirs[@]}"
  gate "mypy" "$VENV/bin/mypy"
  gate "lint-imports" "$VENV/bin/lint-imports"
fi

# ------------------------------------------------------------------ safety net
# Services that pytest started carry a marker (tests/support/services.py) and every session
# holds a lease (a file named by its pid). If pytest was killed before its teardown, stop
# what it started, unless another live session still uses it.
cleanup_service() {   # cleanup_service SCRIPT STATE_DIR
  local script=$1 dir=$2 lease
  [ -e "$dir/.started-by-pytest" ] || return 0
  for lease in "$dir"/leases/*; do
    [ -e "$lease" ] || continue
    kill -0 "$(basename "$lease")" 2>/dev/null && return 0
  done
  tg_log "stopping a service pytest started and left running: $script"
  "$script" down >/dev/null 2>&1 || tg_log "WARNING: $script down failed"
}
stop_left_behind() {   # the services of one slot, its variables exported (tests/support/workers.py)
  cleanup_service hack/local-slurm.sh "${TG_SLURM_DIR:-$TG_REPO_ROOT/.local/slurm${TG_SLURM_ROOT:+-root}}"
  cleanup_service hack/local-postgres.sh "${TG_PG_DIR:-$TG_REPO_ROOT/.local/postgres}"
  # MySQL/MariaDB audit-store backend (hack/local-mysql.sh; the fixture installs and starts it)
  cleanup_service hack/local-mysql.sh "${TG_MYSQL_DIR:-$TG_REPO_ROOT/.local/mysql}"
  # Alertmanager for the alerting-rule tests (hack/local-alertmanager.sh; the fixture installs and starts it)
  cleanup_service hack/local-alertmanager.sh "${TG_AM_DIR:-$TG_REPO_ROOT/.local/alertmanager}"
  if [ -x hack/local-kube.sh ]; then
    cleanup_service hack/local-kube.sh "${TG_KUBE_DIR:-$TG_REPO_ROOT/.local/kube}"
    # the simulated cluster's own API (tests/support/kube_cluster.py: own state directory and ports)
    TG_KUBE_DIR=${TG_SIM_KUBE_DIR:-$TG_REPO_ROOT/.local/kube-sim} \
      TG_KUBE_API_PORT=$(( ${TG_SIM_PORT_BASE:-20250} + 30 )) TG_ETCD_PORT=$(( ${TG_SIM_PORT_BASE:-20250} + 31 )) \
      TG_ETCD_PEER_PORT=$(( ${TG_SIM_PORT_BASE:-20250} + 32 )) \
      cleanup_service hack/local-kube.sh "${TG_SIM_KUBE_DIR:-$TG_REPO_ROOT/.local/kube-sim}"
  fi
}
on_exit() {
  [ "${TG_KEEP_CLUSTER:-0}" = 1 ] && return 0
  local i slot_env
  for (( i = 0; i < 5; i++ )); do   # up to 5 workers per run (tests/support/workers.py)
    slot_env=$("$PY" -m tests.support.workers env $(( ${TG_TEST_SLOT:-0} + i ))) || continue
    ( eval "$slot_env"; stop_left_behind )
  done
}
trap on_exit EXIT

# ------------------------------------------------------------------ test tools
# Real components the tests use besides the services the fixtures start: ripgrep (the matcher is
# checked against it), an OpenSSH server (the slurm-ssh transport runs over a real sshd).
if [ "$(id -u)" = 0 ]; then
  command -v rg >/dev/null || tg_apt_install ripgrep
  [ -x /usr/sbin/sshd ] || tg_apt_install openssh-server
fi
# Chromium for the console's browser tests (Debian's package, driven by Playwright with
# executable_path: `playwright install` downloads browsers and is never run). If it cannot be
# installed, the browser tests skip and say why (tests/support/browser.py).
if [ "$(id -u)" = 0 ] && [ ! -x /usr/lib/chromium/chromium ]; then
  ( tg_apt_install chromium ) || tg_log "WARNING: apt-get install chromium failed: the browser tests will skip"
fi
# The Kubernetes binaries are compiled once from the Go module registry and cached outside the
# repository (minutes cold, instant afterwards): build them here, before pytest's per-test timeout.
if [ "${TG_SKIP_KUBE:-0}" != 1 ] && [ -x hack/local-kube.sh ]; then
  tg_log "hack/local-kube.sh build (cached after the first time)"
  hack/local-kube.sh build || tg_die "building the local Kubernetes API failed (TG_SKIP_KUBE=1 skips those tests)"
fi

# The simulated cluster (hack/local-kube.sh up --cluster: controller-manager, scheduler, kwok,
# JobSet and training-operator) for the tests marked kube_cluster: its build started in the
# background at the top; cached like the API (see docs/sim-cluster.md).
if [ -n "$SIM_BUILD_PID" ]; then
  tg_log "waiting for hack/local-kube.sh build --cluster (started in the background; log $SIM_BUILD_LOG)"
  wait "$SIM_BUILD_PID" ||
    tg_die "building the simulated cluster failed (TG_SKIP_SIM_CLUSTER=1 skips those tests)" "$SIM_BUILD_LOG"
  tail -n 6 "$SIM_BUILD_LOG" >&2
fi

# VictoriaLogs (the log store the log-source tests read job output from): compiled once from the
# Go module registry and cached like the Kubernetes binaries; the fixture starts its own server.
if [ "${TG_SKIP_VLOGS:-0}" != 1 ]; then
  tg_log "hack/local-victorialogs.sh build (cached after the first time)"
  hack/local-victorialogs.sh build || tg_die "building VictoriaLogs failed (TG_SKIP_VLOGS=1 skips those tests)"
fi

# GPU evidence (signals/gpu_metrics.py): Debian's prometheus and VictoriaMetrics, compiled once from
# the Go module registry into ~/.cache/trainguard/victoriametrics; the pytest fixtures start them.
if [ "${TG_SKIP_PROMETHEUS:-0}" != 1 ]; then
  tg_log "hack/local-prometheus.sh install (cached after the first time)"
  hack/local-prometheus.sh install || tg_die "installing Prometheus/VictoriaMetrics failed (TG_SKIP_PROMETHEUS=1 skips those tests)"
fi

# Container image: its build started in the background at the top.
if [ -n "$IMAGE_BUILD_PID" ]; then
  tg_log "waiting for hack/build-image.sh build (started in the background; log $IMAGE_BUILD_LOG)"
  wait "$IMAGE_BUILD_PID" ||
    tg_die "building the container image failed (TG_SKIP_IMAGE=1 skips those tests)" "$IMAGE_BUILD_LOG"
fi

# Helm and the helm-unittest plugin for the chart tests (charts/trainguard, marker helm): compiled
# once from the Go module registry into ~/.cache/trainguard/helm, linked at .local/bin/helm.
if [ -n "$HELM_BUILD_PID" ]; then
  tg_log "waiting for hack/local-helm.sh unittest (started in the background; log $HELM_BUILD_LOG)"
  wait "$HELM_BUILD_PID" ||
    tg_die "building helm / helm-unittest failed (TG_SKIP_HELM=1 skips those tests)" "$HELM_BUILD_LOG"
fi

# ------------------------------------------------------------------ tests
# Several pytest-xdist workers, each with its own services (tests/support/workers.py: state
# directories and ports by slot) and whole files at a time (tests/support/schedule.py): the tests
# wait on Slurm, the apiserver and Chromium far more than they compute. TG_TEST_WORKERS=1 runs
# them in one process; an explicit -n wins.
WORKERS=${TG_TEST_WORKERS:-2}
[[ $WORKERS =~ ^[1-5]$ ]] || tg_die "TG_TEST_WORKERS=$WORKERS: give a number of workers from 1 to 5"
xdist=()
if [ "$WORKERS" -gt 1 ]; then
  xdist=(-n "$WORKERS")
  for a in "$@"; do
    case $a in -n|-n[0-9]*|--numprocesses*|--dist*|-pno:xdist|no:xdist) xdist=() ;; esac
  done
fi
tg_log "pytest ${xdist[*]} $*"
# One run, no automatic re-run of failed tests: a test that fails under load is a defect to fix
# (wait on conditions, never on time), not noise to retry away.
rc=0
"$VENV/bin/pytest" "${xdist[@]}" "$@" || rc=$?
case $rc in
  0) tg_log "all tests passed" ;;
  5) tg_die "pytest collected no tests (arguments: ${*:-none}): a selection that matches nothing is an error" ;;
  *) tg_die "pytest failed (exit $rc)" ;;
esac
