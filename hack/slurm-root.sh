#!/usr/bin/env bash
# hack/slurm-root.sh: a Debian file tree with a newer Slurm than this machine's own packages
# (Debian 12 ships 22.05), so the local cluster and the tests can run it:
#   24.11 (the default): Debian 13 (trixie); slurmrestd v0.0.40-v0.0.42
#   26.05: Debian's unstable suite (sid); slurmrestd v0.0.42-v0.0.45, the v0.0.44 that SchedMD's
#          slurm-operator v1.x speaks (hack/local-kube.sh up --cluster --slinky)
#
#   hack/slurm-root.sh build [VERSION] [DIR]    debootstrap + Slurm packages into DIR (cached; idempotent)
#   hack/slurm-root.sh path [VERSION]           print the default DIR of VERSION
#   hack/slurm-root.sh remove [VERSION] [DIR]   delete DIR
#
# VERSION is 24.11 or 26.05 (else $TG_SLURM_VERSION, else the version DIR was built with, else
# 24.11). DIR defaults to $TG_SLURM_ROOT when no VERSION is named, else to
# /var/cache/trainguard/slurm-root-<suite>: not under root's home, which other users cannot enter,
# because slurmrestd (it refuses to run as root) loads its plugins from DIR as user nobody.
# The unstable suite moves: a 26.05 build checks that the Slurm it got is 26.05 and fails if not
# (the finished root is kept as built; `remove` then `build` takes the suite's current packages).
#
# The root is never entered with chroot and nothing is mounted into it: its Slurm and munge
# programs run on this host (hack/local-slurm.sh with TG_SLURM_ROOT=DIR links them into the
# cluster's bin/), so jobs still run on the host -- the test workloads need the host's Python and
# the repository's virtualenv -- while every daemon and client command is Slurm 24.11. For that,
# the build sets each of those programs' interpreter to the root's own dynamic loader and its
# library search path (DT_RPATH, which also covers the libraries and plugins they load) to the
# root's library directories, by absolute path (patchelf). Not a loader started by hand with
# --library-path: slurmctld starts its helper by executing /proc/self/exe, which must be
# slurmctld. Not LD_LIBRARY_PATH: the daemons pass their environment to the host programs they
# start (TaskProlog), which Debian 13's libc would break. So the root belongs where it was built
# and is rebuilt if moved (the path is part of its stamp).
# (Below, "24.11" and "Debian 13" read as the chosen VERSION and its suite.)
#
# The Debian mirror is the one this machine's apt already uses (read from /etc/apt at run time),
# or TG_DEBIAN_MIRROR. Needs root and debootstrap (installed when missing). A build that fails or
# is interrupted leaves no half root behind: it is assembled in DIR.partial and renamed at the end.
set -euo pipefail
TG_SCRIPT_NAME=slurm-root
# shellcheck source=hack/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"

usage() { sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; }

# VERSION: the first argument after the command when it looks like one
VERSION=${TG_SLURM_VERSION:-24.11}
cmd=${1:-}
[ $# -gt 0 ] && shift
VERSION_GIVEN=0
if [[ ${1:-} =~ ^[0-9]+\.[0-9]+$ ]]; then VERSION=$1; VERSION_GIVEN=1; shift; fi
case "$VERSION" in
  24.11) SUITE=trixie ;;
  26.05) SUITE=sid ;;
  *) tg_die "no Slurm root recipe for version $VERSION (known: 24.11, 26.05)" ;;
esac
PACKAGES=(slurmctld slurmd slurm-client slurmrestd munge slurm-wlm-jwt-plugin)
DAEMONS=(slurmctld slurmd slurmstepd slurmrestd munged)
COMMANDS=(scontrol squeue sbatch srun scancel sinfo salloc sattach sbcast sacct sprio sshare sstat sdiag strigger
  munge unmunge remunge)
DEFAULT_ROOT=/var/cache/trainguard/slurm-root-$SUITE

# The content of a finished root (and where it was built): another one is rebuilt.
stamp_text() { echo "suite=$SUITE packages=${PACKAGES[*]} programs=${DAEMONS[*]} ${COMMANDS[*]} at=$1 format=3"; }

# host_mirror, mirror, safe_remove: shared with hack/build-image.sh
# shellcheck source=hack/lib/debian.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/debian.sh"

cmd_build() {
  local root=$1 mirror_url started
  tg_need_root
  mkdir -p "$(dirname "$root")"
  runuser -u nobody -- test -x "$(dirname "$root")" ||
    tg_die "user nobody cannot enter $(dirname "$root") (slurmrestd runs as nobody): choose a DIR outside root's home"
  exec 8>"$root.lock"
  flock 8
  if [ -s "$root/.trainguard-root" ] && [ "$(cat "$root/.trainguard-root")" = "$(stamp_text "$root")" ]; then
    tg_log "ready: $root ($(slurm_version "$root"))"
    return 0
  fi
  command -v debootstrap >/dev/null || tg_apt_install debootstrap
  command -v patchelf >/dev/null || tg_apt_install patchelf
  [ -e "/usr/share/debootstrap/scripts/$SUITE" ] || tg_die "this debootstrap does not know $SUITE (upgrade debootstrap)"
  mirror_url=$(mirror)
  started=$(date +%s)
  safe_remove "$root.partial"
  tg_log "debootstrap $SUITE with ${PACKAGES[*]} into $root.partial (a few minutes)"
  local log=$root.build.log
  # --include resolves and installs the packages in the same pass; no daemon is started (no init,
  # and debootstrap replaces start-stop-daemon while it installs)
  if ! debootstrap --variant=minbase --include="$(IFS=,; echo "${PACKAGES[*]}")" \
      "$SUITE" "$root.partial" "$mirror_url" >"$log" 2>&1; then
    safe_remove "$root.partial"
    tg_die "debootstrap failed (log: $log)" "$log"
  fi
  if awk -v d="$root.partial/" 'index($2, d) == 1 { found = 1 } END { exit !found }' /proc/mounts; then
    tg_die "debootstrap left file systems mounted under $root.partial"
  fi
  # what the cluster script runs from the root must be there; resolved inside the root, since a
  # program may be an absolute link through the root's /etc/alternatives (trixie's slurmctld,
  # slurmd and slurmstepd are), which read from the host would find the host's own or nothing
  local f
  for f in usr/sbin/slurmctld usr/sbin/slurmd usr/sbin/slurmstepd usr/sbin/slurmrestd usr/sbin/munged \
      usr/bin/scontrol usr/bin/sbatch usr/bin/srun; do
    [ -x "$(tg_in_root "$root.partial" "/$f")" ] ||
      tg_die "the $SUITE root has no /$f after debootstrap (log: $log)" "$log"
  done
  # the programs' interpreter and library path: the root's, at the root's final path (see the top)
  local partial=$root.partial loader libdir name f
  loader=$(tg_in_root "$partial" "$(readelf -l "$(tg_in_root "$partial" /usr/sbin/slurmd)" |
    sed -n 's/.*interpreter: \(.*\)\]/\1/p')")
  libdir=$(dirname "$(find "$partial/usr/lib" -maxdepth 2 -name libc.so.6 -path '*-linux-gnu*' | head -1)")
  [ -x "$loader" ] && [ -d "$libdir/slurm-wlm" ] || tg_die "no loader or no Slurm libraries in $partial"
  for name in "${DAEMONS[@]}" "${COMMANDS[@]}"; do
    f=$(tg_in_root "$partial" "/usr/sbin/$name")
    [ -x "$f" ] || f=$(tg_in_root "$partial" "/usr/bin/$name")
    [ -x "$f" ] || tg_die "the $SUITE root has no $name"
    patchelf --set-interpreter "$root${loader#"$partial"}" --force-rpath \
      --set-rpath "$root${libdir#"$partial"}/slurm-wlm:$root${libdir#"$partial"}" "$f" || tg_die "patchelf $f failed"
  done
  case "$(slurm_version "$partial")" in
    "$VERSION".*) ;;
    *) tg_die "the $SUITE suite gave Slurm $(slurm_version "$partial"), not $VERSION (left in $partial)" ;;
  esac
  rm -rf "$root.partial/var/cache/apt/archives/"*.deb
  stamp_text "$root" > "$root.partial/.trainguard-root"
  safe_remove "$root"
  mv "$root.partial" "$root"
  tg_log "ready: $root ($(slurm_version "$root")) in $(( $(date +%s) - started )) s"
}

slurm_version() {   # slurm_version ROOT: the Debian version of the root's slurmd package
  sed -n '/^Package: slurmd$/,/^$/s/^Version: //p' "$1/var/lib/dpkg/status" | head -1
}

# a VERSION named here means its own root: never $TG_SLURM_ROOT, which may hold the other version's
if [ "$VERSION_GIVEN" = 1 ]; then root=${1:-$DEFAULT_ROOT}; else root=${1:-${TG_SLURM_ROOT:-$DEFAULT_ROOT}}; fi
# no VERSION named and DIR is a finished root: keep the version it was built with (a build through
# TG_SLURM_ROOT pointing at the 26.05 root must not turn it into a 24.11 one)
if [ "$VERSION_GIVEN" = 0 ] && [ -z "${TG_SLURM_VERSION:-}" ] && [ -s "$root/.trainguard-root" ]; then
  case "$(sed -n 's/^suite=\([a-z]*\) .*/\1/p' "$root/.trainguard-root")" in
    sid) VERSION=26.05 SUITE=sid ;;
    trixie) VERSION=24.11 SUITE=trixie ;;
  esac
fi
case "$cmd" in
  build) cmd_build "$root" ;;
  path) echo "$DEFAULT_ROOT" ;;
  remove) tg_need_root; safe_remove "$root"; rm -f "$root.lock" "$root.build.log"; tg_log "removed $root" ;;
  -h | --help | help) usage ;;
  *) usage >&2; [ -z "$cmd" ] || echo "unknown command: $cmd" >&2; exit 2 ;;
esac
