#!/usr/bin/env bash
# hack/demo.sh: Trainguard's main job, live, on this machine, with embedded defaults.
#
#   hack/demo.sh [--keep] [--nodes N]
#
# 1. creates .venv if missing and installs trainguard, and the training workload's torch and numpy
#    from a per-machine cache (~/.cache/trainguard/workloads; hack/lib/common.sh tg_workloads_site);
# 2. brings up the local Slurm cluster (hack/local-slurm.sh up), or reuses a running one;
# 3. starts `trainguard run --scheduler slurm-local --mode action --policy examples/recoverypolicy-demo.yaml`
#    (two keys: the switch and the demo's own Action-mode policy `demo`; the built-in default policy
#    is Monitor), SQLite audit log and runner log in .local/demo/<time>-<pid>/, linked as .local/demo/latest;
# 4. submits a real PyTorch training job on N nodes (default 3) that opts in with
#    `#SBATCH --comment="trainguard policy=demo"` and whose rank 1 dies with a GPU hardware error (Xid 79);
# 5. follows the audit log live: detection -> verdict -> advice -> requeue-hold, exclude the
#    node, release -> the job running again on the other nodes -> COMPLETED;
# 6. prints the final `scontrol show job` summary and the end of the job's output.
#
# The web console (and /api/v1, /metrics) is served by that `trainguard run` on TG_DEMO_HTTP
# (default 127.0.0.1:0, a free port); its URL is printed at the start and the end, and it stays
# reachable while the demo runs (with --keep, afterwards too: trainguard run stays up).
#
# Exit 0 when the job completed after exactly one requeue without the failing node; 1 with
# the reason otherwise. Always stops trainguard and cancels the demo job if it is still
# active; stops the cluster if this script started it, unless --keep (then everything stays up:
# `source .local/slurm/env`, `.venv/bin/trainguard audit --db sqlite:///.local/demo/latest/audit.db`).
#
# Environment: TG_SLURM_DIR and the other hack/local-slurm.sh settings; TG_DEMO_TIMEOUT (s, 300);
# TG_DEMO_HTTP (HOST:PORT of the console, default 127.0.0.1:0).
set -euo pipefail
# shellcheck disable=SC2034  # read by hack/lib/common.sh
TG_SCRIPT_NAME=demo
# shellcheck source=hack/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
cd "$TG_REPO_ROOT"

usage() { sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; }

KEEP=0
NODES=3
while [ $# -gt 0 ]; do
  case $1 in
    --keep) KEEP=1 ;;
    --nodes)
      [ $# -ge 2 ] || tg_die "--nodes needs a number"
      NODES=$2
      shift ;;
    -h | --help) usage; exit 0 ;;
    *) usage >&2; tg_die "unknown argument: $1" ;;
  esac
  shift
done
[[ "$NODES" =~ ^[2-9]$ ]] || tg_die "--nodes must be 2..9 (the job needs a node left over after one is excluded)"
TIMEOUT=${TG_DEMO_TIMEOUT:-300}
HTTP_LISTEN=${TG_DEMO_HTTP:-127.0.0.1:0}
[[ "$TIMEOUT" =~ ^[0-9]+$ ]] || tg_die "TG_DEMO_TIMEOUT must be a number of seconds, got '$TIMEOUT'"

VENV=$TG_REPO_ROOT/.venv
PY=$VENV/bin/python
TG=$VENV/bin/trainguard
SLURM_DIR=${TG_SLURM_DIR:-$TG_REPO_ROOT/.local/slurm}
# A directory per run: Slurm numbers jobs from 1 again on a fresh cluster, and the job appends
# to its output file and resumes from its checkpoint, so a reused directory would mix two runs.
DEMO=$TG_REPO_ROOT/.local/demo/$(date +%Y%m%d-%H%M%S)-$$
DB_URL="sqlite:///$DEMO/audit.db"
POLICY=$TG_REPO_ROOT/examples/recoverypolicy-demo.yaml
COMMENT="trainguard policy=demo"  # the job's opt-in: it names the demo's Action policy

bold() { if [ -t 1 ]; then printf '\033[1m%s\033[0m\n' "$*"; else printf '%s\n' "$*"; fi; }
say() { printf '%s  %s\n' "$(date +%T)" "$*"; }

# ------------------------------------------------------------------ 1. virtualenv
tg_ensure_venv "$VENV"
if [ ! -x "$TG" ] || ! "$PY" -c 'import trainguard' 2>/dev/null; then
  tg_log "installing trainguard into $VENV"
  "$PY" -m pip install -q --disable-pip-version-check -e . || tg_die "pip install -e . failed"
fi
# the training workload's torch and numpy: from the per-machine cache hack/test.sh uses too
# (~/.cache/trainguard/workloads, on the venv's path; a large download the first time only)
tg_workloads_site "$VENV"

# ------------------------------------------------------------------ cleanup, whatever happens
STARTED_CLUSTER=0
TG_PID=
JOB_ID=
CONSOLE_URL=
cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  if [ -n "$TG_PID" ] && kill -0 "$TG_PID" 2>/dev/null; then
    if [ $KEEP = 1 ]; then
      tg_log "--keep: trainguard run stays up (pid $TG_PID, log $DEMO/trainguard.log, console ${CONSOLE_URL:-?})"
    else
      kill -TERM "$TG_PID" 2>/dev/null || true
      for _ in $(seq 400); do kill -0 "$TG_PID" 2>/dev/null || break; sleep 0.1; done
      kill -0 "$TG_PID" 2>/dev/null && { tg_log "trainguard run ignored SIGTERM: SIGKILL"; kill -9 "$TG_PID" 2>/dev/null; }
      wait "$TG_PID" 2>/dev/null || true
    fi
  fi
  if [ -n "$JOB_ID" ] && [ $KEEP = 0 ]; then
    scancel "$JOB_ID" >/dev/null 2>&1 || true
  fi
  if [ $STARTED_CLUSTER = 1 ] && [ $KEEP = 0 ]; then
    tg_log "stopping the local Slurm cluster this demo started"
    hack/local-slurm.sh down >/dev/null 2>&1 || tg_log "WARNING: hack/local-slurm.sh down failed"
  fi
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ------------------------------------------------------------------ 2. the cluster
if hack/local-slurm.sh status >/dev/null 2>&1; then
  tg_log "using the running local Slurm cluster ($SLURM_DIR)"
else
  STARTED_CLUSTER=1
  hack/local-slurm.sh up || tg_die "hack/local-slurm.sh up failed"
fi
# shellcheck source=/dev/null
source "$SLURM_DIR/env"
have=$(sinfo -h -N -p debug -o '%N' 2>/dev/null | sort -u | wc -l)
[ "${have:-0}" -gt "$NODES" ] ||
  tg_die "the cluster has ${have:-0} nodes; the demo needs more than $NODES (hack/local-slurm.sh up --nodes $((NODES + 1)))"
CLUSTER=$(scontrol show config | sed -n 's/^ClusterName *= *//p')

# ------------------------------------------------------------------ 3. trainguard run
mkdir -p "$DEMO/jobs"
ln -sfn "$DEMO" "$TG_REPO_ROOT/.local/demo/latest"
bold "== trainguard run --scheduler slurm-local --mode action --policy ${POLICY#"$TG_REPO_ROOT"/} --db $DB_URL"
# --http-listen 127.0.0.1:0 (TG_DEMO_HTTP): the console, /api/v1 and /metrics on a free port (named in
# the log), so the demo never collides with a runner already serving the default 127.0.0.1:8080
"$TG" run --scheduler slurm-local --mode action --policy "$POLICY" --db "$DB_URL" --http-listen "$HTTP_LISTEN" \
  >"$DEMO/trainguard.log" 2>&1 &
TG_PID=$!
for _ in $(seq 600); do
  grep -q 'trainguard run: scheduler' "$DEMO/trainguard.log" && break
  kill -0 "$TG_PID" 2>/dev/null || tg_die "trainguard run exited at start" "$DEMO/trainguard.log"
  sleep 0.1
done
grep -q 'trainguard run: scheduler' "$DEMO/trainguard.log" || tg_die "trainguard run is not ready after 60 s" "$DEMO/trainguard.log"
say "trainguard is watching opted-in jobs (pid $TG_PID; log $DEMO/trainguard.log)"
CONSOLE_URL=$(sed -n 's/.*HTTP endpoints on \(http:[^ ]*\) .*/\1/p' "$DEMO/trainguard.log" | head -1)
CONSOLE_URL=${CONSOLE_URL:+$CONSOLE_URL/}
if [ -n "$CONSOLE_URL" ]; then
  bold "== web console: $CONSOLE_URL  (open it now: the job appears live)"
fi

# ------------------------------------------------------------------ 4. the training job
script=$DEMO/jobs/demo-job.sh
"$PY" tests/workloads/jobs.py --nodes "$NODES" --steps 150 --fault xid --fault-rank 1 --fault-step 30 \
  --comment "$COMMENT" --workdir "$DEMO/jobs" >"$script" || tg_die "could not write the demo job script"
# srun inside a Slurm 22.05 job fails if the job inherits SLURM_JWT: submit without it
JOB_ID=$(env -u SLURM_JWT sbatch --parsable --chdir="$DEMO/jobs" --job-name=trainguard-demo "$script") ||
  tg_die "sbatch failed"
JOB_ID=${JOB_ID%%;*}
WORKLOAD="slurm/$CLUSTER/$JOB_ID"
OUT=$DEMO/jobs/slurm-$JOB_ID.out
bold "== job $JOB_ID: $NODES-node PyTorch training (gloo, CPU), #SBATCH --comment=\"$COMMENT\""
say "rank 1 will report a GPU hardware failure (Xid 79) at step 30; output: $OUT"

# ------------------------------------------------------------------ 5. follow it live
job_field() { sed -n "s/.*[[:space:]]$1=\([^[:space:]]*\).*/\1/p" <<<"$2"; }
printed=0
last_state=
xid_shown=0
resumed_shown=0
start=$SECONDS
final=
failed_at=
while :; do
  line=$(scontrol -o show job "$JOB_ID" 2>/dev/null) || tg_die "job $JOB_ID vanished from slurmctld"
  state=$(job_field JobState "$line")
  now="$state restarts=$(job_field Restarts "$line") nodes=$(job_field NodeList "$line") excluded=$(job_field ExcNodeList "$line")"
  if [ $xid_shown = 0 ] && [ -f "$OUT" ] && grep -q 'NVRM: Xid' "$OUT"; then
    say "job:     $(grep -m1 'NVRM: Xid' "$OUT")"
    xid_shown=1
  fi
  mapfile -t records < <("$TG" audit --db "$DB_URL" --workload "$WORKLOAD" --format text 2>/dev/null || true)
  while [ $printed -lt ${#records[@]} ]; do
    # "<time>  <kind> <workload> #<attempt>  <summary>  [<decided by>]" -> "<hh:mm:ss.mmm>  <kind>  <summary>"
    rec=${records[$printed]}
    kind=$(awk '{print $2}' <<<"$rec")
    stamp=$(cut -c12-23 <<<"$rec")
    text=${rec#*"#"}
    attempt=${text%% *}
    text=${text#* }
    printf '%s  %-8s attempt %s  %s\n' "$stamp" "$kind" "$attempt" "${text#"${text%%[! ]*}"}"
    printed=$((printed + 1))
  done
  if [ "$now" != "$last_state" ]; then
    say "slurm:   job $JOB_ID $now"
    last_state=$now
  fi
  if [ $resumed_shown = 0 ] && [ -f "$OUT" ] && grep -q 'batch attempt 1' "$OUT"; then
    say "job:     $(grep -m1 'batch attempt 1' "$OUT")"
    resumed_shown=1
  fi
  case $state in
    COMPLETED) final=$state; break ;;
    FAILED | CANCELLED | TIMEOUT | OUT_OF_MEMORY | BOOT_FAIL)
      # a failed attempt is the moment trainguard acts: only a failure that stays is final
      failed_at=${failed_at:-$SECONDS}
      if [ $((SECONDS - failed_at)) -ge 30 ]; then final=$state; break; fi ;;
    *) failed_at= ;;
  esac
  if [ $((SECONDS - start)) -ge "$TIMEOUT" ]; then final=TIMEOUT; break; fi
  sleep 1
done

# ------------------------------------------------------------------ 6. result
line=$(scontrol -o show job "$JOB_ID")
bold "== scontrol show job $JOB_ID"
for key in JobState ExitCode Restarts NodeList ExcNodeList; do
  printf '  %-12s %s\n' "$key" "$(job_field "$key" "$line")"
done
# the comment holds a space, which job_field's one-word match would cut: squeue prints it whole
printf '  %-12s %s\n' Comment "$(squeue -h -j "$JOB_ID" -t all -o %k 2>/dev/null)"
bold "== last lines of $OUT"
tail -n 8 "$OUT" | sed 's/^/  /'

bad=$(sed -n 's/^1: .* \(node[0-9]*\) kernel: NVRM: Xid.*/\1/p' "$OUT" | head -1)
excluded=$(job_field ExcNodeList "$line")
nodelist=$(job_field NodeList "$line")
restarts=$(job_field Restarts "$line")
problem=
if [ "$final" != COMPLETED ]; then
  problem="the job did not complete (last state ${final}; see $DEMO/trainguard.log)"
elif [ "$restarts" != 1 ]; then
  problem="expected exactly one requeue, Slurm says Restarts=$restarts"
elif [ -z "$bad" ] || [[ ",$(scontrol show hostnames "$excluded" | paste -sd,)," != *",$bad,"* ]]; then
  problem="the failing node '${bad:-?}' is not in ExcNodeList=$excluded"
elif [[ ",$(scontrol show hostnames "$nodelist" | paste -sd,)," == *",$bad,"* ]]; then
  problem="the job ran again on the failing node $bad (NodeList=$nodelist)"
fi
if [ -n "$problem" ]; then
  echo "demo FAILED: $problem" >&2
  exit 1
fi
bold "== demo OK: hardware failure on $bad detected, job requeued without it, completed on $nodelist in $((SECONDS - start)) s"
say "full audit trail: .venv/bin/trainguard audit --db $DB_URL --workload $WORKLOAD"
if [ -n "$CONSOLE_URL" ]; then
  if [ $KEEP = 1 ]; then
    say "web console (stays up with --keep): ${CONSOLE_URL}#/workload/$WORKLOAD"
  else
    say "web console: ${CONSOLE_URL}#/workload/$WORKLOAD (stops with the demo; --keep keeps it up)"
  fi
fi
