#!/usr/bin/env bash
# A Debian 11 bullseye chroot (x86-64, native: no emulation): glibc 2.31, the oldest glibc the
# Debian mirror still serves, with CPython 3.11 and no compiler, for testing kime's
# manylinux_2_28 abi3 wheel where Ubuntu 20.04's and Debian 11's users run it (issue 54). Needs
# root and debootstrap.
#
#   tools/bullseye_chroot.sh create          debootstrap --variant=minbase bullseye; CPython 3.11
#                                            built inside from the source of Debian 12's
#                                            python3.11 (`apt-get source`, signed and checked),
#                                            installed in /opt/python3.11; then the compiler is
#                                            purged (many minutes: the CPython build); idempotent
#   tools/bullseye_chroot.sh run -- CMD...   CMD in the chroot, /proc, /dev and /dev/shm mounted
#                                            in a private mount namespace, the environment emptied
#                                            but for KIME_*, OMP_*, OPENBLAS_*, PYTHON*,
#                                            HYPOTHESIS_*, PIP_NO_*
#   tools/bullseye_chroot.sh python          the chroot's interpreter (/opt/python3.11/bin/python3.11)
#
# Why build CPython: bullseye's own Python is 3.9, which kime does not support, and a CPython
# built on a newer glibc does not start on 2.31. Debian ships no 3.10 source any more, so the
# cp310 wheel (built the same way, against the same glibc) is tested on the host's 3.10 only.
# Environment: KIME_BULLSEYE_ROOT (default /work/bullseye/chroot), KIME_BULLSEYE_MIRROR (default:
# the mirror this host's apt uses, else deb.debian.org). Nothing in the chroot downloads when
# tests run: tools/test_wheels.sh fetches their packages with the host's pip and puts them inside.
set -euo pipefail

ROOT=${KIME_BULLSEYE_ROOT:-/work/bullseye/chroot}
PYTHON_VERSION=3.11
PREFIX=/opt/python$PYTHON_VERSION
# CPython's build needs: the compiler, and the libraries of the modules pip and the tests import
# (ssl, zlib, ctypes, bz2, lzma, sqlite3 for hypothesis' database)
BUILD_PACKAGES="build-essential dpkg-dev pkg-config libssl-dev zlib1g-dev libffi-dev libbz2-dev
liblzma-dev libsqlite3-dev uuid-dev xz-utils"
RUNTIME_PACKAGES="ca-certificates libssl1.1 zlib1g libffi7 libbz2-1.0 liblzma5 libsqlite3-0 libuuid1"

log() { printf 'bullseye_chroot: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

mirror() { bash "$(dirname "${BASH_SOURCE[0]}")/debian_mirror.sh" "${KIME_BULLSEYE_MIRROR:-}"; }

inside() {  # inside CMD...: CMD in the chroot as it is (no check that Python is there)
    local -a env=(HOME=/root LANG=C.UTF-8 LC_ALL=C.UTF-8 TERM=dumb DEBIAN_FRONTEND=noninteractive
                  PATH=$PREFIX/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin)
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
        cp -f /etc/resolv.conf "$root/etc/resolv.conf" 2>/dev/null || true
        exec chroot "$root" "$@"
    ' kime-bullseye "$ROOT" env -i "${env[@]}" "$@"
}

create() {
    if [[ -e "$ROOT/.kime-bullseye-done" ]]; then log "$ROOT: already made"; return; fi
    [[ $(id -u) -eq 0 ]] || die "create needs root (debootstrap)"
    command -v debootstrap >/dev/null || die "debootstrap missing: apt-get install debootstrap"
    local start mirror_url
    start=$(date +%s)
    mirror_url=$(mirror)
    if [[ ! -e "$ROOT/.kime-debootstrap-done" ]]; then
        # a download cut short runs it again after a pause, on a fresh root
        bash "$(dirname "${BASH_SOURCE[0]}")/retry.sh" \
            bash "$(dirname "${BASH_SOURCE[0]}")/debootstrap_fresh.sh" bullseye "$ROOT" "$mirror_url" \
            --variant=minbase
        touch "$ROOT/.kime-debootstrap-done"
    fi
    # bookworm's sources only, for python3.11's source package (apt checks its signature and sums)
    printf 'deb %s bullseye main\ndeb-src %s bookworm main\n' "$mirror_url" "$mirror_url" \
        > "$ROOT/etc/apt/sources.list"
    # shellcheck disable=SC2086
    inside bash -c "apt-get update -qq && apt-get install -y -qq --no-install-recommends \
        $(echo $BUILD_PACKAGES $RUNTIME_PACKAGES) >/dev/null"
    inside bash -c "set -e; rm -rf /build && mkdir /build && cd /build
        apt-get source -qq --download-only python$PYTHON_VERSION
        tar -xf python${PYTHON_VERSION}_*.orig.tar.*
        cd Python-$PYTHON_VERSION.*/
        ./configure -q --prefix=$PREFIX --without-ensurepip >/dev/null
        make -s -j\$(nproc) >/dev/null 2>&1
        make -s altinstall >/dev/null 2>&1"
    inside "$PREFIX/bin/python$PYTHON_VERSION" -c 'import ssl, zlib, ctypes, bz2, lzma, sqlite3, venv'
    # shellcheck disable=SC2086
    inside bash -c "rm -rf /build && apt-get purge -y -qq --auto-remove $(echo $BUILD_PACKAGES) \
        >/dev/null && apt-get clean"
    if inside sh -c 'command -v cc gcc' >/dev/null 2>&1; then die "$ROOT still has a C compiler"; fi
    touch "$ROOT/.kime-bullseye-done"
    log "ready: $ROOT (glibc $(inside ldd --version | sed -n '1s/.* //p'), $(inside "$PREFIX/bin/python$PYTHON_VERSION" --version)), $(( $(date +%s) - start )) s"
}

run() {
    [[ -e "$ROOT/.kime-bullseye-done" ]] || die "$ROOT is not made; run: $0 create"
    inside "$@"
}

main() {
    local cmd=${1:-}
    shift || true
    case "$cmd" in
        create) create ;;
        run) [[ "${1:-}" == -- ]] && shift; [[ $# -gt 0 ]] || die "usage: $0 run -- CMD..."; run "$@" ;;
        python) echo "$PREFIX/bin/python$PYTHON_VERSION" ;;
        -h|--help|help|"") sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' ;;
        *) die "unknown command $cmd (see --help)" ;;
    esac
}

main "$@"
