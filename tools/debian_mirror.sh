#!/usr/bin/env bash
# Print the Debian mirror for debootstrap: the argument (the chroot scripts pass KIME_ARM64_MIRROR
# or KIME_SID_MIRROR) when given, else the one this host's apt uses, else
# deb.debian.org (tools/arm64_chroot.sh, tools/sid_chroot.sh).
set -euo pipefail
if [[ -n "${1:-}" ]]; then echo "$1"; exit 0; fi
uri=$(grep -hs -E '^(URIs:|deb )' /etc/apt/sources.list /etc/apt/sources.list.d/*.sources \
        /etc/apt/sources.list.d/*.list 2>/dev/null \
      | grep -o 'https\?://[^ ]*/debian/\?$' | head -n1 || true)
echo "${uri:-http://deb.debian.org/debian}"
