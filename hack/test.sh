#!/usr/bin/env bash
# hack/test.sh: the one command that runs Trainguard's whole test suite, on a fresh Debian
# machine (as root) or a developer's checkout.
#
#   hack/test.sh [PYTEST ARGS...]     e.g.  hack/test.sh -m unit     hack/test.sh -x tests/unit
#
# Steps: start the builds of the tools some tests need in the background (Kubernetes and the
# simulated cluster, helm, VictoriaLogs, Prometheus/VictoriaMetrics, the image: cached in
# ~/.cache/trainguard, a no-op when cached); create .venv if missing (python3 -m venv; installs
# python3-venv if needed), install the package with its dev extras (again only when pyproject.toml
# changed) and the test workloads' torch and numpy from a per-machine cache
# (~/.cache/trainguard/workloads, on the venv's path), then the gates ruff, mypy and lint-imports
# (each fails fast with its name), then pytest with the given arguments. A whole run (no arguments)
# on a machine where builds are still going runs the tests that need none of them first, beside the
# builds, and the others once they are done. The pytest fixtures start the real services the tests
# need (local Slurm, PostgreSQL, Kubernetes API) and stop what they started; if pytest dies before
# its teardown, the trap here stops services that pytest started and no other session still uses.
# A test whose call takes over 120 s fails unless marked slow with a reason (tests/support/budget.py).
#
# Environment: TG_SLURM_ROOT=DIR runs the Slurm tiers against the Slurm of a root made by
# hack/slurm-root.sh (Slurm 24.11; see hack/local-slurm.sh);
# TG_SKIP_SLURM=1 / TG_SKIP_POSTGRES=1 / TG_SKIP_MYSQL=1 / TG_SKIP_KUBE=1 / TG_SKIP_VLOGS=1 / TG_SKIP_PROMETHEUS=1 / TG_SKIP_ALERTMANAGER=1 / TG_SKIP_IMAGE=1 / TG_SKIP_HELM=1 skip those
# tiers (TG_SKIP_SIM_CLUSTER=1 only the simulated-cluster tests; TG_SKIP_REAL_NODE=1 / TG_SKIP_SLINKY=1 the real-node and slurm-operator tests); TG_KEEP_CLUSTER=1 keeps services running afterwards; TG_REINSTALL=1 forces the pip install; TG_SKIP_LINT=1 skips the
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

# ------------------------------------------------------------------ background builds
# The tools some tests need are compiled or unpacked once and cached outside the repository
# (~/.cache/trainguard): minutes each on a fresh machine, a no-op when cached. Each starts in the
# background here, beside the virtualenv, the gates and the first tests; each names the markers of
# the tests that need it. When the suite is run whole (no arguments) and some builds are still
# going when pytest is due, the tests that need none of them run first, while the builds finish,
# and the rest after (see "tests" below); otherwise everything is waited for before pytest.
BG_NAMES=() BG_PIDS=() BG_LOGS=() BG_MARKS=() BG_FAIL=() BG_STATE=()
bg_build() {   # bg_build NAME MARKERS FAILURE-MESSAGE LOG COMMAND...: start COMMAND in the background
  local name=$1 marks=$2 fail=$3 log=$4
  shift 4
  mkdir -p "$TG_REPO_ROOT/.local"
  "$@" </dev/null >"$log" 2>&1 &
  BG_NAMES+=("$name") BG_PIDS+=($!) BG_LOGS+=("$log") BG_MARKS+=("$marks") BG_FAIL+=("$fail") BG_STATE+=(running)
}
bg_finish() {   # bg_finish I: wait for build I; stop the run with its log if it failed
  local i=$1 rc=0
  [ "${BG_STATE[$i]}" = running ] || return 0
  wait "${BG_PIDS[$i]}" || rc=$?
  BG_STATE[i]=done
  [ $rc = 0 ] || tg_die "${BG_FAIL[$i]} (exit $rc)" "${BG_LOGS[$i]}"
}
bg_wait_all() {   # wait for every build, saying which one it waits for
  local i
  for i in "${!BG_PIDS[@]}"; do
    [ "${BG_STATE[$i]}" = running ] || continue
    tg_log "waiting for ${BG_NAMES[$i]} (started in the background; log ${BG_LOGS[$i]})"
    bg_finish "$i"
  done
}
PENDING=""
bg_pending_marks() {   # PENDING = the markers of the builds still running, joined by " or " (finished ones are checked)
  local i
  PENDING=""
  for i in "${!BG_PIDS[@]}"; do
    [ "${BG_STATE[$i]}" = running ] || continue
    if kill -0 "${BG_PIDS[$i]}" 2>/dev/null; then
      PENDING+="${PENDING:+ or }${BG_MARKS[$i]}"
    else
      bg_finish "$i"
    fi
  done
}
# The Kubernetes binaries (apiserver, etcd, kubectl) and the simulated cluster's (controller-manager,
# scheduler, kwok, JobSet, training-operator): about 10 minutes cold on 2 cores.
if [ "${TG_SKIP_KUBE:-0}" != 1 ] && [ -x hack/local-kube.sh ]; then
  if [ "${TG_SKIP_SIM_CLUSTER:-0}" != 1 ]; then
    # ... and, as root, the real node's kubelet, kube-proxy, CoreDNS and pause binary and its Debian
    # packages (containerd, runc, CNI plugins: tests marked real_node; TG_SKIP_REAL_NODE=1 skips them)
    sim_flags=(--cluster)
    [ "$(id -u)" != 0 ] || [ "${TG_SKIP_REAL_NODE:-0}" = 1 ] || sim_flags+=(--real-node)
    # ... and, as root, SchedMD's slurm-operator (tests marked slinky; TG_SKIP_SLINKY=1 skips them):
    # slurm-operator v1.0.1 compiled from the Go module registry with the cluster's other Go builds
    # (about 2 minutes more cold), and Slurm 26.05, which it needs, from Debian's unstable suite in a
    # root of its own (hack/slurm-root.sh build 26.05: debootstrap, a few minutes cold, cached in
    # /var/cache/trainguard; a build of its own, beside the cluster's). Their tests run once both are
    # done, in the simulated cluster's worker, last (tests/support/schedule.py).
    slinky=0
    [ "$(id -u)" != 0 ] || [ "${TG_SKIP_SLINKY:-0}" = 1 ] || { slinky=1; sim_flags+=(--slinky); }
    bg_build "hack/local-kube.sh build ${sim_flags[*]}" "kube or kube_cluster or real_node or slinky" \
      "building the simulated cluster failed (TG_SKIP_SIM_CLUSTER=1 skips those tests)" \
      "$TG_REPO_ROOT/.local/sim-cluster-build.log" hack/local-kube.sh build "${sim_flags[@]}"
    if [ $slinky = 1 ]; then
      bg_build "hack/slurm-root.sh build 26.05" "slinky" \
        "building the Slurm 26.05 root failed (TG_SKIP_SLINKY=1 skips the slurm-operator tests)" \
        "$TG_REPO_ROOT/.local/slurm-root-26.05-build.log" hack/slurm-root.sh build 26.05
    fi
  else
    bg_build "hack/local-kube.sh build" "kube" \
      "building the local Kubernetes API failed (TG_SKIP_KUBE=1 skips those tests)" \
      "$TG_REPO_ROOT/.local/kube-build.log" hack/local-kube.sh build
  fi
fi
# helm and its helm-unittest plugin (the chart tests, charts/trainguard), linked at .local/bin/helm.
if [ "${TG_SKIP_HELM:-0}" != 1 ]; then
  bg_build "hack/local-helm.sh unittest" "helm" "building helm / helm-unittest failed (TG_SKIP_HELM=1 skips those tests)" \
    "$TG_REPO_ROOT/.local/helm-build.log" hack/local-helm.sh unittest
fi
# VictoriaLogs (the log store the log-source tests read job output from); the fixture starts its server.
if [ "${TG_SKIP_VLOGS:-0}" != 1 ]; then
  bg_build "hack/local-victorialogs.sh build" "victorialogs" "building VictoriaLogs failed (TG_SKIP_VLOGS=1 skips those tests)" \
    "$TG_REPO_ROOT/.local/victorialogs-build.log" hack/local-victorialogs.sh build
fi
# GPU evidence (signals/gpu_metrics.py): Debian's prometheus (its promtool checks the alerting rules
# too) and VictoriaMetrics compiled from the Go module registry; the fixtures start them.
if [ "${TG_SKIP_PROMETHEUS:-0}" != 1 ]; then
  bg_build "hack/local-prometheus.sh install" "prometheus or alertmanager" \
    "installing Prometheus/VictoriaMetrics failed (TG_SKIP_PROMETHEUS=1 skips those tests)" \
    "$TG_REPO_ROOT/.local/prometheus-install.log" hack/local-prometheus.sh install
fi

# ------------------------------------------------------------------ virtualenv
# Under a lock: .ci/run starts a second hack/test.sh (the Slurm 24.11 tier) beside the first.
mkdir -p "$TG_REPO_ROOT/.local"
exec 8>"$TG_REPO_ROOT/.local/venv.lock"
flock 8
tg_ensure_venv "$VENV"

# ------------------------------------------------------------------ container image build
# The image (tests marked image; hack/build-image.sh: debootstrap + umoci, cached in
# ~/.cache/trainguard/image) is mostly downloads and unpacking, several minutes cold; it starts once
# the venv exists (its pip fetches the locked wheels). Needs root: without it, or with
# TG_SKIP_IMAGE=1, the image tests skip.
if [ "${TG_SKIP_IMAGE:-0}" != 1 ] && [ "$(id -u)" = 0 ]; then
  bg_build "hack/build-image.sh build" "image or real_node" "building the container image failed (TG_SKIP_IMAGE=1 skips those tests)" \
    "$TG_REPO_ROOT/.local/image-build.log" hack/build-image.sh build
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
# One run, no automatic re-run of failed tests: a test that fails under load is a defect to fix
# (wait on conditions, never on time), not noise to retry away.
failed=()
run_pytest() {   # run_pytest WHAT ARGS...: pytest in the workers; a failure is reported at the end
  local what=$1 rc=0
  shift
  tg_log "pytest ${xdist[*]} $*"
  "$VENV/bin/pytest" "${xdist[@]}" "$@" || rc=$?
  case $rc in
    0) tg_log "$what: all tests passed" ;;
    5) failed+=("$what: pytest collected no tests (arguments: ${*:-none}): a selection that matches nothing is an error") ;;
    *) failed+=("$what: pytest failed (exit $rc)") ;;
  esac
}
[ $# = 0 ] && bg_pending_marks
if [ -n "$PENDING" ]; then
  # A fresh machine: builds still running. The tests that need none of them first, beside the builds;
  # then the others. (Two pytest sessions: each worker starts its services again for the second.)
  tg_log "builds still running (tests marked: $PENDING): the other tests run first, beside them"
  run_pytest "the tests that need no background build" -m "not ($PENDING)"
  bg_wait_all
  run_pytest "the tests that needed a background build" -m "$PENDING"
else
  bg_wait_all
  run_pytest "the selected tests" "$@"
fi
[ ${#failed[@]} = 0 ] || tg_die "$(printf '%s; ' "${failed[@]}")"
