# shellcheck shell=bash
# hack/lib/common.sh: small helpers shared by the hack/ scripts (sourced, never run).
#
# The local-service scripts (local-slurm.sh, local-postgres.sh) start real daemons for
# development and for the integration tests. They share: logging with the script's name,
# a fatal error that shows the tail of the relevant log, package installation through
# apt-get that never starts system daemons, pid-file bookkeeping, and atomic writes of
# the env files that tests and developers `source`.

# Repository root (hack/lib/../..), used by the scripts that source this file.
# shellcheck disable=SC2034
TG_REPO_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
TG_SCRIPT_NAME=${TG_SCRIPT_NAME:-$(basename "$0" .sh)}

tg_log() { echo "[$TG_SCRIPT_NAME $(date +%T)] $*" >&2; }

# tg_die MESSAGE [LOGFILE...]: print the message and the last lines of each log, exit 1.
tg_die() {
  local msg=$1 f
  shift
  echo "[$TG_SCRIPT_NAME] ERROR: $msg" >&2
  for f in "$@"; do
    [ -s "$f" ] || continue
    echo "----- last lines of $f -----" >&2
    tail -n 25 "$f" >&2
    echo "-----" >&2
  done
  exit 1
}

tg_need_root() {
  [ "$(id -u)" = 0 ] || tg_die "must run as root (it installs packages and starts daemons as other users)"
}

# tg_apt_install PKG...: install the packages that are missing, without starting any
# system service (temporary policy-rc.d that answers 101 "action forbidden"). Calls are serialised
# by a lock: CI builds the Slurm 24.11 root in the background while the first tier installs its
# tools, and two installs at once would race on dpkg's lock and on the policy-rc.d file (one
# removing it while the other's packages still start their daemons).
tg_apt_install() {
  mkdir -p /var/lock
  ( flock 9 && _tg_apt_install_locked "$@" ) 9>/var/lock/trainguard-apt.lock ||
    tg_die "installing $* failed"
}

_tg_apt_install_locked() {
  local p missing=() prc=0
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  command -v apt-get >/dev/null || tg_die "missing packages ${missing[*]} and no apt-get to install them"
  tg_log "installing ${missing[*]}"
  apt-get -o DPkg::Lock::Timeout=600 update -qq || tg_die "apt-get update failed"
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d
    chmod +x /usr/sbin/policy-rc.d
    prc=1
  fi
  local rc=0
  DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends "${missing[@]}" >/dev/null || rc=$?
  [ $prc = 1 ] && rm -f /usr/sbin/policy-rc.d
  [ $rc = 0 ] || tg_die "apt-get install ${missing[*]} failed (exit $rc)"
}

# tg_alive PIDFILE: true when the file names a running process.
tg_alive() { [ -s "$1" ] && kill -0 "$(cat "$1" 2>/dev/null)" 2>/dev/null; }

# tg_stop_pidfiles FILE...: SIGTERM every live process named by the files at once, wait
# up to 15 s for all of them, then SIGKILL what is left. Removes the files.
tg_stop_pidfiles() {
  local f p pids=() left
  for f in "$@"; do
    [ -s "$f" ] || { rm -f "$f"; continue; }
    p=$(cat "$f" 2>/dev/null)
    if [[ "$p" =~ ^[0-9]+$ ]] && kill -0 "$p" 2>/dev/null; then
      kill "$p" 2>/dev/null && pids+=("$p")
    fi
    rm -f "$f"
  done
  [ ${#pids[@]} -eq 0 ] && return 0
  for _ in $(seq 150); do
    left=0
    for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && left=1; done
    [ $left = 0 ] && return 0
    sleep 0.1
  done
  for p in "${pids[@]}"; do
    kill -0 "$p" 2>/dev/null && { tg_log "pid $p ignored SIGTERM: SIGKILL"; kill -9 "$p" 2>/dev/null; }
  done
  return 0
}

# tg_write_atomic FILE [MODE]: write stdin to FILE through a temp file in the same directory
# and a rename, so a reader never sees half a file. MODE defaults to 644.
tg_write_atomic() {
  local dest=$1 mode=${2:-644} tmp
  tmp=$(mktemp "$dest.XXXXXX")
  cat > "$tmp"
  chmod "$mode" "$tmp"
  mv -f "$tmp" "$dest"
}

# tg_ensure_venv DIR: create the virtualenv DIR with python3 >= 3.11 if it does not exist
# (installing python3-venv when the module is missing and we are root).
tg_ensure_venv() {
  local venv=$1
  [ -x "$venv/bin/python" ] && return 0
  command -v python3 >/dev/null || tg_die "python3 is not installed (apt-get install python3)"
  python3 -c 'import sys; sys.exit(sys.version_info < (3, 11))' ||
    tg_die "Python >= 3.11 is needed, python3 is $(python3 -V 2>&1)"
  if ! python3 -c 'import ensurepip, venv' 2>/dev/null; then
    [ "$(id -u)" = 0 ] || tg_die "python3 has no venv module: apt-get install python3-venv (as root)"
    tg_apt_install python3-venv
  fi
  tg_log "creating $venv"
  python3 -m venv "$venv" || tg_die "python3 -m venv $venv failed"
}

# tg_workloads_site VENV: the test workloads' packages (the `workloads` extra of pyproject.toml:
# torch, numpy) installed once per machine into ~/.cache/trainguard/workloads/<key> with
# `pip install --target`, and put on VENV's path by a .pth file. torch's Linux wheels come with
# several GB of CUDA libraries: unpacking them into every fresh clone's virtualenv took 7-12 minutes
# of each CI run; a cached directory is reused in seconds. The key is the Python version and the
# extra's requirements, so a change of either installs afresh. VENV's own packages come first on
# its path, the cached ones after them.
tg_workloads_site() {
  local venv=$1 py spec key cache dir site
  py=$venv/bin/python
  spec=$("$py" -c 'import tomllib; print("\n".join(tomllib.load(open("pyproject.toml", "rb"))["project"]["optional-dependencies"]["workloads"]))') ||
    tg_die "cannot read the workloads extra from pyproject.toml"
  key=$( { "$py" -c 'import sys, sysconfig; print(sys.version_info[:2], sysconfig.get_platform())'; echo "$spec"; } |
    sha256sum | cut -c1-16)
  cache=${XDG_CACHE_HOME:-$HOME/.cache}/trainguard/workloads
  dir=$cache/$key
  mkdir -p "$cache"
  (
    flock 7
    if [ ! -e "$dir/.complete" ]; then
      tg_log "installing the test workloads' packages ($(tr '\n' ' ' <<<"$spec")) into $dir, once per machine (torch is a large download)"
      rm -rf "$dir.partial"
      # shellcheck disable=SC2086  # one requirement per line, none with spaces
      "$py" -m pip install -q --disable-pip-version-check --target "$dir.partial" $spec ||
        { rm -rf "$dir.partial"; exit 1; }
      touch "$dir.partial/.complete"
      rm -rf "$dir"
      mv "$dir.partial" "$dir"
    fi
  ) 7>"$cache/.lock" || tg_die "pip install --target $dir failed"
  site=$("$py" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  echo "$dir" > "$site/trainguard-workloads.pth"
}

# tg_in_root ROOT PATH: the file that PATH names inside the file tree ROOT, with symbolic links
# followed inside ROOT. Debian's alternatives are absolute links (/usr/sbin/slurmd ->
# /etc/alternatives/slurmd -> /usr/sbin/slurmd-wlm) that would lead to this host's files otherwise.
tg_in_root() {
  local root=$1 path=$2 target
  for _ in $(seq 20); do
    [ -L "$root$path" ] || { echo "$root$path"; return 0; }
    target=$(readlink "$root$path")
    case "$target" in
      /*) path=$target ;;
      *) path=$(dirname "$path")/$target ;;
    esac
  done
  tg_die "too many symbolic links from $path in $root"
}
