#!/usr/bin/env bash
# hack/local-slurm.sh: a real, private, multi-node Slurm cluster on this one machine, for
# development and for the integration tests of the Slurm adapters and the executor.
#
#   hack/local-slurm.sh up [--nodes N]   start (installs Slurm + munge if missing); idempotent
#   hack/local-slurm.sh status           daemons and sinfo; exit 1 when the cluster is not up
#   hack/local-slurm.sh down [--wipe]    cancel jobs, stop every daemon we started; --wipe
#                                        also deletes state, logs and job output
#
# Nodes node1..nodeN (partition debug) are N `slurmd -N nodeX` on 127.0.0.1, one port each.
# The timings are tuned for tests: a requeued job runs again after ~6 s (cred_expire=5,
# sched_interval=2), a dead slurmd is noticed after ~30 s (SlurmdTimeout=10). Also starts
# slurmrestd on 127.0.0.1 with JWT auth. Works with Slurm 22.05 (Debian 12), 24.11 and 26.05 (roots).
#
# Settings (environment), so that several clusters can run side by side:
#   TG_SLURM_ROOT            (unset)               run Slurm from this root instead of the host's
#                                                  packages (hack/slurm-root.sh build [26.05] makes
#                                                  one with Slurm 24.11 [26.05]); see "Slurm from a root" below
#   TG_SLURM_DIR             <repo>/.local/slurm   all state: conf, keys, spool, logs, pids, jobs/
#                                                  (<repo>/.local/slurm-root with TG_SLURM_ROOT)
#   TG_SLURM_NODES           4                     number of nodes (--nodes wins)
#   TG_SLURM_CTLD_PORT       16817                 slurmctld
#   TG_SLURM_NODE_PORT_BASE  17000                 node i listens on base+i
#   TG_SLURM_REST_PORT       16820                 slurmrestd (127.0.0.1 only)
#   TG_SLURM_CPUS / TG_SLURM_MEM   2 / 1000        CPUs and MB advertised per node
#   TG_SLURM_JOB_REQUEUE     1                     slurm.conf JobRequeue (0: a cluster the loop
#                                                  cannot requeue on, for `trainguard doctor` tests)
#   TG_SLURM_CONF_EXTRA      (unset)               lines appended to slurm.conf (same purpose)
#   TG_SLURM_NODE_PREFIX     node                  node names PREFIX<i> ...
#   TG_SLURM_NODE_FIRST      1                     ... for i = FIRST .. FIRST+N-1 (slinky-0..2 for
#                                                  slurm-operator's NodeSet pods: hack/lib/slinky.sh)
#   TG_SLURM_USER            root                  slurm.conf SlurmUser (slurm-operator's JWT names
#                                                  user slurm, which must be privileged: SlurmUser=slurm)
#
# After `up`:  source .local/slurm/env; sinfo
#   (exports SLURM_CONF, SLURMRESTD_URL, SLURM_JWT, SLURM_API_VERSION, SLURM_VERSION, TG_SLURM_NODES)
#
# Slurm from a root (TG_SLURM_ROOT=DIR): DIR is a Debian file tree (hack/slurm-root.sh). Its
# binaries run on this host, not in a chroot, through the root's own dynamic loader and
# libraries: `up` links each command into $TG_SLURM_DIR/bin (scontrol, squeue, sbatch, srun,
# ..., the daemons, slurmstepd) and the env file puts that directory first on PATH
# (TG_SLURM_BIN). So every daemon and client command, the adapters' and srun's inside jobs
# included, is the root's Slurm, while jobs themselves run on the host (with the host's Python).
set -euo pipefail
TG_SCRIPT_NAME=local-slurm
# shellcheck source=hack/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"

usage() { sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; }

ROOT=${TG_SLURM_ROOT:-}
# a cluster from a root has its own state: slurmctld cannot read state written by a newer Slurm
B=${TG_SLURM_DIR:-$TG_REPO_ROOT/.local/slurm${ROOT:+-root}}
NODES=${TG_SLURM_NODES:-4}
NODE_PREFIX=${TG_SLURM_NODE_PREFIX:-node}
NODE_FIRST=${TG_SLURM_NODE_FIRST:-1}
SLURM_USER=${TG_SLURM_USER:-root}
CTLD_PORT=${TG_SLURM_CTLD_PORT:-16817}
NODE_PORT_BASE=${TG_SLURM_NODE_PORT_BASE:-17000}
REST_PORT=${TG_SLURM_REST_PORT:-16820}
CPUS=${TG_SLURM_CPUS:-2}
JOB_REQUEUE=${TG_SLURM_JOB_REQUEUE:-1}
MEM=${TG_SLURM_MEM:-1000}
JWT_LIFESPAN=604800   # 7 days: a developer's shell that sourced the env file keeps working
CONF=$B/etc/slurm.conf
ENV_FILE=$B/env
export SLURM_CONF=$CONF

[[ "$NODE_PREFIX" =~ ^[a-z][a-z0-9-]*$ ]] || tg_die "TG_SLURM_NODE_PREFIX must be a DNS label prefix, got '$NODE_PREFIX'"
[[ "$SLURM_USER" =~ ^[a-z_][a-z0-9_-]*$ ]] || tg_die "TG_SLURM_USER must be a user name, got '$SLURM_USER'"
for v in CTLD_PORT NODE_PORT_BASE REST_PORT CPUS MEM JOB_REQUEUE NODE_FIRST; do
  [[ "${!v}" =~ ^[0-9]+$ ]] || tg_die "TG_SLURM_$v must be a number, got '${!v}'"
done

# ------------------------------------------------------------------ Slurm from a root
BIN=$B/bin
ROOT_PLUGINS=""
STEPD_ARGS=()
ROOT_PROGRAMS=(scontrol squeue sbatch srun scancel sinfo salloc sattach sbcast sacct sprio sshare sstat sdiag
  strigger munge unmunge remunge slurmctld slurmd slurmstepd slurmrestd munged)

# link_root_programs: $BIN/<name> -> the root's <name>. hack/slurm-root.sh gave those programs
# the root's loader and libraries, so they run as they are, with nothing added to the
# environment (sbatch and srun copy theirs into jobs). The link carries the program's own name:
# the root's daemons are files named slurmctld-wlm etc., and Slurm tells its daemons apart by
# program name.
link_root_programs() {
  local name path
  mkdir -p "$BIN"
  for name in "${ROOT_PROGRAMS[@]}"; do
    path=$(tg_in_root "$ROOT" "/usr/sbin/$name")
    [ -x "$path" ] || path=$(tg_in_root "$ROOT" "/usr/bin/$name")
    [ -x "$path" ] || tg_die "$ROOT has no $name (rebuild it: hack/slurm-root.sh build $ROOT)"
    ln -sfn "$path" "$BIN/$name"
  done
}

if [ -n "$ROOT" ]; then
  [ -s "$ROOT/.trainguard-root" ] ||
    tg_die "TG_SLURM_ROOT=$ROOT is not a finished root (build one: hack/slurm-root.sh build $ROOT)"
  ROOT_PLUGINS=$(dirname "$(find "$ROOT/usr/lib" -maxdepth 2 -name libc.so.6 -path '*-linux-gnu*' | head -1)")/slurm-wlm
  [ -d "$ROOT_PLUGINS" ] || tg_die "no Slurm plugins in $ROOT_PLUGINS"
  # slurmd starts slurmstepd from a compiled-in path (this host's own) unless told otherwise
  STEPD_ARGS=(-d "$BIN/slurmstepd")
  # this script's own sinfo/scontrol/squeue/scancel, and the daemons, are the root's
  export PATH=$BIN:$PATH
fi

# ------------------------------------------------------------------ helpers
node_names() {   # node_names [N]: the names of the cluster's N (default $NODES) nodes, one a line
  local i
  for i in $(seq "$NODE_FIRST" $((NODE_FIRST + ${1:-$NODES} - 1))); do echo "$NODE_PREFIX$i"; done
}

version_ge() {   # version_ge A B: A >= B (dotted)
  [ "$(printf '%s\n%s\n' "$1" "$2" | sort -V | head -1)" = "$2" ]
}

ctld_ok() { [ -f "$CONF" ] && timeout 10 scontrol ping 2>/dev/null | grep -q 'is UP'; }

# Every daemon we start carries our slurm.conf (or munge socket) path on its command line,
# so leftovers whose pid file is gone are still found, and only ours are.
# slurmctld's helper (cmdline ": slurmscriptd") is found by the SLURM_CONF we export to it.
our_daemon_pids() {
  local p cmd
  for p in /proc/[0-9]*; do
    cmd=$(tr '\0' '\n' 2>/dev/null < "$p/cmdline") || continue
    if grep -qxF -e "$CONF" -e "--socket=$B/run/munge.socket" <<<"$cmd"; then
      echo "${p#/proc/}"
    elif [[ "$cmd" == *slurmscriptd* ]] && tr '\0' '\n' 2>/dev/null < "$p/environ" | grep -qxF "SLURM_CONF=$CONF"; then
      echo "${p#/proc/}"
    fi
  done
}

# Job processes left behind (a slurmstepd killed with -9 orphans them): their environment
# names our slurm.conf and a job id. Never this script or its parents.
our_job_pids() {
  local p pid env mine=" $$ $PPID "
  for p in /proc/[0-9]*; do
    pid=${p#/proc/}
    [[ "$mine" == *" $pid "* ]] && continue
    env=$(tr '\0' '\n' 2>/dev/null < "$p/environ") || continue
    grep -qxF "SLURM_CONF=$CONF" <<<"$env" && grep -q '^SLURM_JOB_ID=' <<<"$env" && echo "$pid"
  done
}

# ------------------------------------------------------------------ down
stop_cluster() {
  if ctld_ok; then
    local jobs
    jobs=$(timeout 10 squeue -h -o %i 2>/dev/null | tr '\n' ' ' || true)
    if [ -n "${jobs// /}" ]; then
      tg_log "cancelling jobs $jobs"
      # shellcheck disable=SC2086  # job ids are digits from squeue, split on purpose
      timeout 10 scancel $jobs 2>/dev/null || true
      for _ in $(seq 75); do
        [ -z "$(timeout 10 squeue -h -o %i 2>/dev/null)" ] && break
        sleep 0.2
      done
    fi
  fi
  # each daemon takes ~2 s (slurmctld ~5 s) to exit after SIGTERM: stop them together
  tg_stop_pidfiles "$B"/run/slurmrestd.pid "$B"/run/slurmd-*.pid "$B/run/slurmctld.pid"
  # step daemons left behind (e.g. their slurmd was killed): only ours, by their cwd ($B/log)
  local p
  for p in /proc/[0-9]*; do
    [ "$(cat "$p/comm" 2>/dev/null)" = slurmstepd ] || continue
    case "$(readlink "$p/cwd" 2>/dev/null)" in "$B"/*) kill -9 "${p#/proc/}" 2>/dev/null || true ;; esac
  done
  for p in $(our_job_pids); do kill -9 "$p" 2>/dev/null || true; done
  tg_stop_pidfiles "$B/run/munged.pid"
  local left
  left=$(our_daemon_pids)
  if [ -n "$left" ]; then
    tg_log "stopping leftover daemons without pid file: $left"
    for p in $left; do kill "$p" 2>/dev/null || true; done
    sleep 2
    for p in $(our_daemon_pids); do kill -9 "$p" 2>/dev/null || true; done
  fi
  rm -f "$B/run/munge.socket" "$B/run/munge.socket.lock"
}

cmd_down() {
  local wipe=$1
  tg_need_root
  if [ ! -d "$B" ]; then tg_log "nothing under $B"; return 0; fi
  stop_cluster
  # pytest's fixtures mark a cluster they started (tests/support/services.py); it is gone now
  rm -f "$B/.started-by-pytest"
  if [ "$wipe" = 1 ]; then
    rm -rf "$B/state" "$B/spool" "$B/log" "$B/jobs" "$B/run" "$B/leases" "$B/bin" "$ENV_FILE"
    tg_log "stopped; wiped state under $B"
  else
    tg_log "stopped"
  fi
}

# ------------------------------------------------------------------ up
write_conf() {   # write_conf VERSION -> prints 1 when slurm.conf changed
  local ver=$1 tmp plugins="# the plugins of the Slurm that runs the daemons (the default)"
  # Slurm from a root: its plugins, not those of the host's own Slurm at the compiled-in path
  [ -n "$ROOT" ] && plugins="PluginDir=$ROOT_PLUGINS"
  tmp=$(mktemp "$CONF.XXXXXX")
  cat > "$tmp" <<CONF
# Generated by hack/local-slurm.sh: a private test cluster on one machine. Do not edit.
ClusterName=trainguard
# localhost alone hangs every client where "localhost" does not resolve
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort=$CTLD_PORT
SlurmUser=$SLURM_USER
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
# cred_expire=5 (the minimum) makes a requeued job eligible after ~6 s instead of ~121 s
AuthInfo=socket=$B/run/munge.socket,cred_expire=5
AuthAltTypes=auth/jwt
AuthAltParameters=jwt_key=$B/etc/jwt_hs256.key
StateSaveLocation=$B/state
SlurmdSpoolDir=$B/spool/%n
SlurmctldPidFile=$B/run/slurmctld.pid
SlurmdPidFile=$B/run/slurmd-%n.pid
SlurmctldLogFile=$B/log/slurmctld.log
SlurmdLogFile=$B/log/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
MailProg=/bin/true
# jobs must not inherit SLURM_JWT from the env file: slurmd has no auth/jwt, srun would fail
TaskProlog=$B/etc/task-prolog.sh
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
# a scheduler pass every 1-2 s: state changes show up in seconds, not minutes
SchedulerParameters=sched_interval=2,bf_interval=1
JobRequeue=$JOB_REQUEUE
MpiDefault=none
# a node whose slurmd comes back is usable again at once
ReturnToService=2
SlurmdParameters=config_overrides
$plugins
MinJobAge=300
KillWait=5
InactiveLimit=0
SlurmctldTimeout=30
SlurmdTimeout=10
NodeName=$NODE_PREFIX[$NODE_FIRST-$((NODE_FIRST + NODES - 1))] NodeHostname=localhost NodeAddr=127.0.0.1 Port=[$((NODE_PORT_BASE + 1))-$((NODE_PORT_BASE + NODES))] CPUs=$CPUS RealMemory=$MEM State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
CONF
  if [ -n "${TG_SLURM_CONF_EXTRA:-}" ]; then printf '%s\n' "$TG_SLURM_CONF_EXTRA" >> "$tmp"; fi
  chmod 644 "$tmp"
  printf '#!/bin/sh\n# written by hack/local-slurm.sh: see TaskProlog in slurm.conf\necho "unset SLURM_JWT"\n' |
    tg_write_atomic "$B/etc/task-prolog.sh" 755
  if version_ge "$ver" 23.11; then
    # newer slurmd autodetect a cgroup plugin otherwise; nothing here uses cgroups
    echo "CgroupPlugin=disabled" | tg_write_atomic "$B/etc/cgroup.conf"
  fi
  if cmp -s "$tmp" "$CONF"; then
    rm -f "$tmp"
    echo 0
  else
    mv -f "$tmp" "$CONF"
    echo 1
  fi
}

start_munged() {
  tg_alive "$B/run/munged.pid" && return 0
  rm -f "$B/run/munge.socket" "$B/run/munge.socket.lock"
  munged --force --key-file="$B/munge/munge.key" --socket="$B/run/munge.socket" \
    --pid-file="$B/run/munged.pid" --log-file="$B/log/munged.log" --seed-file="$B/munge/munged.seed" \
    </dev/null >>"$B/log/munged.stderr" 2>&1 9>&- || tg_die "munged did not start" "$B/log/munged.stderr" "$B/log/munged.log"
  for _ in $(seq 50); do [ -S "$B/run/munge.socket" ] && return 0; sleep 0.1; done
  tg_die "munged started but its socket $B/run/munge.socket did not appear" "$B/log/munged.log"
}

start_slurmctld() {
  if tg_alive "$B/run/slurmctld.pid" && ctld_ok; then return 0; fi
  # Two attempts: once, right after a restart with a changed node count, 22.05 died at start
  # with "AuthType change requires restart" and came up fine when started again.
  local attempt
  for attempt in 1 2; do
    tg_stop_pidfiles "$B/run/slurmctld.pid"
    slurmctld -f "$CONF" </dev/null >>"$B/log/slurmctld.stderr" 2>&1 9>&- ||
      tg_die "slurmctld did not start" "$B/log/slurmctld.stderr" "$B/log/slurmctld.log"
    for _ in $(seq 150); do
      ctld_ok && break
      [ -s "$B/run/slurmctld.pid" ] && ! tg_alive "$B/run/slurmctld.pid" && break
      sleep 0.1
    done
    if ctld_ok; then
      tg_log "slurmctld pid $(cat "$B/run/slurmctld.pid" 2>/dev/null) on port $CTLD_PORT"
      return 0
    fi
    [ "$attempt" = 1 ] && tg_log "slurmctld did not come up: starting it once more"
  done
  tg_die "slurmctld does not answer on port $CTLD_PORT (port in use?)" \
    "$B/log/slurmctld.stderr" "$B/log/slurmctld.log"
}

start_slurmds() {
  local i n started=()
  for n in $(node_names); do
    tg_alive "$B/run/slurmd-$n.pid" && continue
    mkdir -p "$B/spool/$n"
    slurmd -f "$CONF" -N "$n" "${STEPD_ARGS[@]}" </dev/null >>"$B/log/slurmd-$n.stderr" 2>&1 9>&- ||
      tg_die "slurmd for $n did not start" "$B/log/slurmd-$n.stderr" "$B/log/slurmd-$n.log"
    started+=("$n")
  done
  [ ${#started[@]} -gt 0 ] && tg_log "started slurmd for ${started[*]}"
  # ready: every node answers (no '*'), none unknown or down
  local states=""
  for _ in $(seq 120); do
    states=$(timeout 10 sinfo -h -N -o '%N %T' 2>/dev/null | sort -u || true)
    if [ "$(wc -l <<<"$states")" -ge "$NODES" ] && ! grep -qE '\*|unknown|down|not_responding|future' <<<"$states"; then
      return 0
    fi
    sleep 0.5
  done
  local bad logs=()
  bad=$(grep -E '\*|unknown|down|not_responding|future' <<<"$states" | awk '{print $1}' | sort -u || true)
  for i in $bad; do logs+=("$B/log/slurmd-$i.stderr" "$B/log/slurmd-$i.log"); done
  tg_die "nodes not ready after 60 s: $(tr '\n' ' ' <<<"$states")" "${logs[@]}" "$B/log/slurmctld.log"
}

start_slurmrestd() {
  local ver=$1 specs
  if version_ge "$ver" 23.11; then
    specs=openapi/slurmctld
  elif version_ge "$ver" 23.02; then
    specs=openapi/v0.0.39
  else
    specs=openapi/v0.0.38,openapi/v0.0.37,openapi/v0.0.36
  fi
  if ! tg_alive "$B/run/slurmrestd.pid"; then
    # by number: Slurm 26.05's slurmrestd cannot resolve a user name at that point ("Unable to
    # resolve user: nobody"; it does not even read /etc/passwd)
    (cd / && SLURM_JWT=daemon exec setsid slurmrestd -f "$CONF" -a rest_auth/jwt -s "$specs" \
      -u "$(id -u nobody)" -g "$(id -g nobody)" "127.0.0.1:$REST_PORT") </dev/null >>"$B/log/slurmrestd.log" 2>&1 9>&- &
    echo $! > "$B/run/slurmrestd.pid"
  fi
  for _ in $(seq 100); do
    tg_alive "$B/run/slurmrestd.pid" || break
    curl -s -o /dev/null "http://127.0.0.1:$REST_PORT/openapi/v3" && return 0
    sleep 0.1
  done
  tg_die "slurmrestd does not answer on 127.0.0.1:$REST_PORT (port in use?)" "$B/log/slurmrestd.log"
}

newest_api_version() {   # newest_api_version JWT -> e.g. v0.0.38 (22.05), v0.0.42 (24.11)
  curl -s -H "X-SLURM-USER-NAME: root" -H "X-SLURM-USER-TOKEN: $1" "http://127.0.0.1:$REST_PORT/openapi/v3" |
    grep -oE 'slurm\\?/v0\.0\.[0-9]+' | grep -oE 'v0\.0\.[0-9]+' | sort -uV | tail -1 || true
}

cmd_up() {
  tg_need_root
  if ! [[ "$NODES" =~ ^[0-9]+$ ]] || [ "$NODES" -lt 1 ] || [ "$NODES" -gt 64 ]; then
    tg_die "node count must be 1..64, got '$NODES'"
  fi
  if [ -n "$ROOT" ]; then
    tg_apt_install curl
    link_root_programs
  else
    tg_apt_install slurmctld slurmd slurm-client munge slurmrestd slurm-wlm-jwt-plugin curl
  fi
  local ver
  ver=$(slurmd -V | awk '{print $2}')
  tg_log "Slurm $ver, $NODES nodes, state in $B"
  if ! version_ge "$ver" 23.11 && ! mountpoint -q /sys/fs/cgroup; then
    tg_die "Slurm $ver's slurmd needs something mounted on /sys/fs/cgroup (e.g. mount -t tmpfs cgroup /sys/fs/cgroup)"
  fi

  mkdir -p "$B"/{etc,state,spool,log,run,munge,jobs}
  chmod 755 "$B" "$B/etc"
  chmod 700 "$B/munge" "$B/state"
  chmod 1777 "$B/jobs"
  [ -s "$B/munge/munge.key" ] || { head -c 1024 /dev/urandom > "$B/munge/munge.key"; chmod 400 "$B/munge/munge.key"; }
  [ -s "$B/etc/jwt_hs256.key" ] || { head -c 32 /dev/urandom > "$B/etc/jwt_hs256.key"; chmod 600 "$B/etc/jwt_hs256.key"; }
  # slurmctld runs as SlurmUser: its state, logs, pid file and JWT key are that user's
  id -u "$SLURM_USER" >/dev/null 2>&1 || tg_die "TG_SLURM_USER=$SLURM_USER: no such user"
  chown "$SLURM_USER" "$B/state" "$B/log" "$B/run" "$B/etc/jwt_hs256.key"

  local changed
  changed=$(write_conf "$ver")
  if [ "$changed" = 1 ] && [ -n "$(our_daemon_pids)" ]; then
    tg_log "configuration changed (e.g. node count): restarting the cluster"
    stop_cluster
  fi
  if [ "$changed" = 1 ]; then
    # pid files of nodes beyond the new count must not linger
    rm -f "$B"/run/slurmd-*.pid
  fi

  # slurmrestd refuses root; it runs as nobody, which must be able to read slurm.conf
  runuser -u nobody -- test -r "$CONF" 2>/dev/null ||
    tg_die "user nobody cannot read $CONF: put TG_SLURM_DIR under a world-traversable path (e.g. /tmp)"

  start_munged
  start_slurmctld
  start_slurmds
  start_slurmrestd "$ver"

  local token api
  token=$(timeout 10 scontrol token username=root lifespan=$JWT_LIFESPAN 2>&1 | sed -n 's/^SLURM_JWT=//p')
  [ -n "$token" ] || tg_die "scontrol token gave no token (is AuthAltTypes=auth/jwt loaded?)" "$B/log/slurmctld.log"
  api=$(newest_api_version "$token")
  [ -n "$api" ] || tg_die "could not read the API versions from slurmrestd's /openapi/v3" "$B/log/slurmrestd.log"
  {
    echo "# Written by hack/local-slurm.sh. Source it: source $ENV_FILE"
    echo "export SLURM_CONF=$CONF"
    echo "export SLURM_VERSION=$ver"
    echo "export SLURMRESTD_URL=http://127.0.0.1:$REST_PORT"
    echo "export SLURM_API_VERSION=$api"
    echo "# root token for slurmrestd, valid $((JWT_LIFESPAN / 86400)) days from $(date -u +%FT%TZ)."
    echo "# With it set, client commands authenticate by JWT; srun OUTSIDE a job then fails"
    echo "# (slurmd has no auth/jwt): use 'env -u SLURM_JWT srun ...'. Jobs drop it (TaskProlog)."
    echo "export SLURM_JWT=$token"
    echo "export TG_SLURM_DIR=$B"
    echo "export TG_SLURM_NODES=$NODES"
    echo "export TG_SLURM_NODE_NAMES=\"$(node_names | tr '\n' ' ' | sed 's/ $//')\""
    echo "export TG_SLURM_JOBS_DIR=$B/jobs"
    if [ -n "$ROOT" ]; then
      echo "# Slurm from $ROOT: its commands (wrappers in $BIN) come first on PATH"
      echo "export TG_SLURM_ROOT=$ROOT"
      echo "export TG_SLURM_BIN=$BIN"
      echo "PATH=$BIN:\$PATH"
    fi
  } | tg_write_atomic "$ENV_FILE" 600
  tg_log "ready: $(timeout 10 sinfo -h -N -o '%N:%T' | tr '\n' ' ')(source $ENV_FILE)"
}

# ------------------------------------------------------------------ status
cmd_status() {
  local ok=0 f name nodes=0
  if [ ! -s "$ENV_FILE" ]; then
    echo "no cluster: $ENV_FILE is missing (run: $0 up)"
    ok=1
  else
    nodes=$(sed -n 's/^export TG_SLURM_NODES=//p' "$ENV_FILE")
  fi
  local expected=("$B/run/munged.pid" "$B/run/slurmctld.pid" "$B/run/slurmrestd.pid")
  local names
  names=$(sed -n 's/^export TG_SLURM_NODE_NAMES="\(.*\)"$/\1/p' "$ENV_FILE" 2>/dev/null || true)
  [ -n "$names" ] || names=$(node_names "${nodes:-0}")
  for i in $names; do expected+=("$B/run/slurmd-$i.pid"); done
  for f in "${expected[@]}"; do
    name=$(basename "$f" .pid)
    if tg_alive "$f"; then
      printf '%-14s running (pid %s)\n' "$name" "$(cat "$f")"
    else
      printf '%-14s NOT RUNNING\n' "$name"
      ok=1
    fi
  done
  if ctld_ok; then
    echo "cluster: $B (Slurm $(sed -n 's/^export SLURM_VERSION=//p' "$ENV_FILE" 2>/dev/null)), env file $ENV_FILE"
    timeout 10 sinfo -N -o '%N %P %T %E' || ok=1
  else
    echo "slurmctld does not answer (SLURM_CONF=$CONF)"
    ok=1
  fi
  return $ok
}

# ------------------------------------------------------------------ main
# one up/down at a time per cluster directory (fd 9; daemons are started with 9>&-)
tg_lock() { mkdir -p "$B"; exec 9>"$B/.lock"; flock 9; }

cmd=${1:-}
[ $# -gt 0 ] && shift
case "$cmd" in
  up)
    while [ $# -gt 0 ]; do
      case "$1" in
        --nodes) [ $# -ge 2 ] || tg_die "--nodes needs a number"; NODES=$2; shift 2 ;;
        --nodes=*) NODES=${1#--nodes=}; shift ;;
        *) tg_die "unknown option for up: $1 (see $0 --help)" ;;
      esac
    done
    tg_lock
    cmd_up ;;
  down)
    wipe=0
    case "${1:-}" in
      "") ;;
      --wipe) wipe=1 ;;
      *) tg_die "unknown option for down: $1 (see $0 --help)" ;;
    esac
    tg_lock
    cmd_down "$wipe" ;;
  status) cmd_status ;;
  -h | --help | help) usage ;;
  *) usage >&2; [ -z "$cmd" ] || echo "unknown command: $cmd" >&2; exit 2 ;;
esac
