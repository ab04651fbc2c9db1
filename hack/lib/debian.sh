# hack/lib/debian.sh: building Debian file trees with debootstrap (sourced by hack/slurm-root.sh and
# hack/build-image.sh after hack/lib/common.sh).
#
# The Debian mirror is the one this machine's apt already uses (read from /etc/apt at run time),
# or TG_DEBIAN_MIRROR.

# The first http(s) mirror of this machine's apt configuration that serves Debian's main archive
# (deb822 .sources files and one-line sources.list entries; security and update suites skipped).
host_mirror() {
  local f
  for f in /etc/apt/sources.list.d/*.sources; do
    [ -r "$f" ] || continue
    awk '
      /^[[:space:]]*$/ { if (uri != "" && main) { print uri; done = 1; exit } uri = ""; main = 0; next }
      /^URIs:/ { uri = $2 }
      /^Suites:/ { for (i = 2; i <= NF; i++) if ($i !~ /-/) main = 1 }
      END { if (!done && uri != "" && main) print uri }
    ' "$f"
  done
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [ -r "$f" ] || continue
    awk '$1 == "deb" { for (i = 2; i <= NF; i++) if ($i ~ /^https?:/) { if ($(i + 1) !~ /-/) print $i; break } }' "$f"
  done
}

mirror() {
  if [ -n "${TG_DEBIAN_MIRROR:-}" ]; then echo "$TG_DEBIAN_MIRROR"; return; fi
  local m
  m=$(host_mirror | grep -E '^https?://' | grep -v -- '-security' | head -1 || true)
  [ -n "$m" ] || tg_die "no Debian mirror found in /etc/apt (set TG_DEBIAN_MIRROR=http://.../debian)"
  echo "${m%/}"
}

# Refuse to delete a tree something is mounted under (debootstrap mounts /proc and /sys while it
# runs): rm -rf would reach through the mount.
safe_remove() {
  local dir=$1
  [ -e "$dir" ] || return 0
  local m
  while read -r m; do
    umount -l "$m" 2>/dev/null || true
  done < <(awk -v d="$dir/" 'index($2, d) == 1 { print $2 }' /proc/mounts | sort -r)
  if awk -v d="$dir/" 'index($2, d) == 1 { found = 1 } END { exit !found }' /proc/mounts; then
    tg_die "something is still mounted under $dir: not deleting it"
  fi
  rm -rf --one-file-system "$dir"
}

