#!/usr/bin/env bash
# Build kime's aarch64 wheel in the arm64 Debian chroot under qemu-user (issue 25) and repair it
# into a manylinux tag with auditwheel:
#
#   tools/build_wheel_arm64.sh [OUTDIR]      (default: dist-arm64/)
#
# Creates the chroot first if it is missing (tools/arm64_chroot.sh create; KIME_ARM64_ROOT picks
# it). The wheel is built from a clean copy of this tree: the files git tracks, plus the ones it
# does not ignore, never a build folder, a .so or Cython's generated C. `pip wheel` runs without
# build isolation, with the chroot venv's Cython, setuptools and numpy (downloading them again
# into an isolated environment costs minutes under emulation). auditwheel picks the most widely
# compatible manylinux policy the built code allows on bookworm's glibc 2.36; nothing forces a
# tag. The last line printed is the repaired wheel's path.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
repo=$PWD
out="$(mkdir -p "${1:-dist-arm64}" && cd "${1:-dist-arm64}" && pwd)"
chroot_sh="$repo/tools/arm64_chroot.sh"
root=${KIME_ARM64_ROOT:-/work/arm64/chroot}
step() { printf '== %s\n' "$*"; }
since() { echo "$(( $(date +%s) - $1 )) s"; }

if [[ ! -e "$root/.kime-venv-done" ]]; then
    step "create the arm64 chroot at $root"
    bash "$chroot_sh" create
fi

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

start=$(date +%s)
step "pip wheel (aarch64, under qemu-user)"
bash "$chroot_sh" run "$work" -- python -m pip wheel --no-deps --no-build-isolation \
    -w "$work/raw" "$work/src" 2>&1 | tail -n 3
raw=("$work"/raw/kime-*.whl)
[[ -f "${raw[0]}" ]] || { echo "build_wheel_arm64: pip wrote no wheel" >&2; exit 1; }
echo "built $(basename "${raw[0]}") in $(since "$start")"

start=$(date +%s)
step "auditwheel repair"
bash "$chroot_sh" run "$work" -- auditwheel repair --strip --wheel-dir "$work/out" "${raw[0]}" \
    > "$work/repair.log" 2>&1 || { cat "$work/repair.log"; exit 1; }
grep -E "^Fixed-up wheel" "$work/repair.log" || true
fixed=("$work"/out/kime-*manylinux*aarch64*.whl)
[[ -f "${fixed[0]}" ]] || { cat "$work/repair.log"; echo "build_wheel_arm64: no manylinux aarch64 wheel" >&2; exit 1; }
bash "$chroot_sh" run "$work" -- auditwheel show "${fixed[0]}"
echo "repaired in $(since "$start")"

name=$(basename "${fixed[0]}")
rm -f "$out"/kime-*aarch64*.whl
cp "${fixed[0]}" "$out/$name"
# The wheel holds the six extensions, each with the C kernels linked in, and the OpenMP runtime.
python3 - "$out/$name" <<'EOF'
import fnmatch, sys, zipfile
names = zipfile.ZipFile(sys.argv[1]).namelist()
so = fnmatch.filter(names, "kime/_cpu/_*.cpython-*-aarch64-linux-gnu.so")
problems = [] if len(so) >= 6 else ["aarch64 extensions: %s" % so]
if not fnmatch.filter(names, "kime.libs/libgomp*"):
    problems.append("no bundled OpenMP runtime (kime.libs/libgomp*)")
if problems:
    sys.exit("build_wheel_arm64: " + "; ".join(problems))
print("check: %d aarch64 extensions, OpenMP bundled" % len(so))
EOF
echo "$out/$name"
