#!/usr/bin/env bash
# A Debian sid chroot (x86-64, native: no emulation) with CPython 3.14 and no compiler, for
# testing kime's abi3 wheel on the newest CPython where pyenv has none (issue 34). Needs root and
# debootstrap.
#
#   tools/sid_chroot.sh create            debootstrap --variant=minbase sid with python3.14 and its
#                                         venv module (about a minute); idempotent
#   tools/sid_chroot.sh run -- CMD...     CMD in the chroot, /proc, /dev and /dev/shm mounted in a
#                                         private mount namespace, the environment emptied but for
#                                         KIME_*, OMP_*, OPENBLAS_*, PYTHON*, HYPOTHESIS_*, PIP_NO_*
#   tools/sid_chroot.sh python            the chroot's interpreter (/usr/bin/python3.14)
#
# Environment: KIME_SID_ROOT (default /work/sid/chroot), KIME_SID_MIRROR (default: the mirror
# this host's apt uses, else deb.debian.org). Nothing in the chroot downloads: tools/test_wheels.sh
# fetches its packages with the host's pip for the chroot's Python and puts them inside.
set -euo pipefail

ROOT=${KIME_SID_ROOT:-/work/sid/chroot}
PYTHON_VERSION=3.14
PACKAGES="python$PYTHON_VERSION,python$PYTHON_VERSION-venv,ca-certificates"

log() { printf 'sid_chroot: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

mirror() { bash "$(dirname "${BASH_SOURCE[0]}")/debian_mirror.sh" "${KIME_SID_MIRROR:-}"; }

create() {
    if [[ -e "$ROOT/.kime-sid-done" ]]; then log "$ROOT: already made"; return; fi
    [[ $(id -u) -eq 0 ]] || die "create needs root (debootstrap)"
    command -v debootstrap >/dev/null || die "debootstrap missing: apt-get install debootstrap"
    local start here
    start=$(date +%s)
    here=$(dirname "${BASH_SOURCE[0]}")
    # a download cut short runs it again after a pause, on a fresh root
    bash "$here/retry.sh" bash "$here/debootstrap_fresh.sh" sid "$ROOT" "$(mirror)" \
        --variant=minbase --include="$PACKAGES"
    if run sh -c 'command -v cc gcc' >/dev/null 2>&1; then die "$ROOT has a C compiler; it must not"; fi
    touch "$ROOT/.kime-sid-done"
    log "ready: $ROOT ($(run "python$PYTHON_VERSION" --version)), $(( $(date +%s) - start )) s"
}

run() {
    [[ -x "$ROOT/usr/bin/python$PYTHON_VERSION" ]] || die "$ROOT is not made; run: $0 create"
    local -a env=(HOME=/root LANG=C.UTF-8 LC_ALL=C.UTF-8 TERM=dumb
                  PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin)
    local name
    while IFS= read -r name; do
        case "$name" in
            KIME_*|OMP_*|OPENBLAS_*|PYTHON*|HYPOTHESIS_*|PIP_NO_*) env+=("$name=${!name}") ;;
        esac
    done < <(compgen -e)
    # shellcheck disable=SC2016
    unshare --mount --propagation private -- bash -c '
        set -e
        root=$1; shift
        mount -t proc proc "$root/proc"
        mount --rbind /dev "$root/dev"
        mount -t tmpfs tmpfs "$root/dev/shm" 2>/dev/null || true
        exec chroot "$root" "$@"
    ' kime-sid "$ROOT" env -i "${env[@]}" "$@"
}

main() {
    local cmd=${1:-}
    shift || true
    case "$cmd" in
        create) create ;;
        run) [[ "${1:-}" == -- ]] && shift; [[ $# -gt 0 ]] || die "usage: $0 run -- CMD..."; run "$@" ;;
        python) echo "/usr/bin/python$PYTHON_VERSION" ;;
        -h|--help|help|"") sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' ;;
        *) die "unknown command $cmd (see --help)" ;;
    esac
}

main "$@"
