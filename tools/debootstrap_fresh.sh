#!/usr/bin/env bash
# debootstrap into a fresh root, for tools/retry.sh to run again when a download is cut short:
#
#   bash tools/debootstrap_fresh.sh SUITE ROOT MIRROR [DEBOOTSTRAP_OPTION...]
#
# runs `debootstrap OPTION... SUITE ROOT MIRROR` after unmounting whatever is mounted below ROOT
# (an emulated second stage cut short leaves /proc there) and removing ROOT, so a second attempt
# never meets the first one's half-made tree (tools/arm64_chroot.sh, tools/sid_chroot.sh).
set -euo pipefail

[[ $# -ge 3 ]] || { echo "usage: tools/debootstrap_fresh.sh SUITE ROOT MIRROR [OPTION...]" >&2; exit 2; }
suite=$1 root=$2 mirror=$3
shift 3
[[ "$root" == /* && "$root" != / ]] || { echo "debootstrap_fresh: ROOT must be an absolute path, not /" >&2; exit 2; }
root=${root%/}

awk -v r="$root/" 'index($2, r) == 1 { print $2 }' /proc/mounts | sort -r | while read -r m; do
    umount -l "$m" || true
done
rm -rf "$root"
mkdir -p "$(dirname "$root")"
exec debootstrap "$@" "$suite" "$root" "$mirror"
