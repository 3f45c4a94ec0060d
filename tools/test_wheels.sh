#!/usr/bin/env bash
# Test kime's x86-64 wheel set (tools/build_wheel.sh DIST) on every CPython it claims besides the
# one tools/test_wheel.sh runs the whole suite on (issue 34):
#
#   tools/test_wheels.sh DIST [TARGET...]     TARGET: 3.10 3.12 3.13 3.14 floors bullseye
#                                             (default: all but bullseye)
#
#   3.10, 3.12, 3.13  pyenv's newest release of that minor version
#   3.14              Debian sid's CPython 3.14 in a chroot with no compiler (tools/sid_chroot.sh,
#                     KIME_SID_ROOT; made here when missing, which needs root)
#   floors            CPython 3.10 with every runtime and serve requirement at the lowest version
#                     pyproject.toml allows (`name>=X` installed as `name==X`), and httpx too,
#                     which the serve tests reach through Starlette's TestClient
#   bullseye          the abi3 wheel on Debian 11's glibc 2.31, the oldest here, with CPython 3.11
#                     built in a chroot (tools/bullseye_chroot.sh, KIME_BULLSEYE_ROOT; made here
#                     when missing, which needs root and compiles CPython: many minutes, so it is
#                     asked for by name, not run by default)
# Each target gets a fresh venv with no compiler on PATH (tools/no_compiler.sh; the chroot has
# none), kime's runtime and serve requirements and the test tools as binary wheels only, then the
# kime wheel that the target's own pip picks from DIST (`pip download --no-index --find-links
# DIST`), then `pip check`. From a copy of tests/ outside the repository it runs the installed-
# wheel subset KIME_WHEELS_SUBSET (pytest arguments; default below: the import and its files, the
# wheel's tag, `kime doctor` and `kime decide` under every ISA level, the answers to the bit
# against the reference interpreter, Laya's parity goldens, the kernels' output bits, the
# server's tests on loopback, and the public names).
#
# The reference is tests/wheel_answers.py's record from PYTHON (default .venv/bin/python: CPython
# 3.11 importing kime), made here unless KIME_WHEEL_REFERENCE names one. A target whose
# interpreter is missing is reported and the others still run; the exit status is 1 when a
# target failed, else 3 when one could not run, else 0. A table of the targets ends the output.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
repo=$PWD
[[ $# -ge 1 && -d "$1" ]] || { echo "usage: $0 DIST [TARGET...]" >&2; exit 2; }
dist="$(realpath "$1")"
shift
targets=("$@")
[[ ${#targets[@]} -gt 0 ]] || targets=(3.10 3.12 3.13 3.14 floors)
python=${PYTHON:-$repo/.venv/bin/python}
subset=${KIME_WHEELS_SUBSET:-tests/project/test_wheel.py tests/core/test_golden.py \
tests/core/test_output_bits.py tests/serve/test_server.py tests/core/test_public_names.py}
sid_root=${KIME_SID_ROOT:-/work/sid/chroot}
bullseye_root=${KIME_BULLSEYE_ROOT:-/work/bullseye/chroot}
version="$("$python" -c 'import ast
tree = ast.parse(open("kime/_version.py").read())
print(next(n.value.value for n in tree.body if isinstance(n, ast.Assign)
           and n.targets[0].id == "__version__"))')"

work="$(mktemp -d /var/tmp/kime-wheels.XXXXXX)"
inside_root=""
cleanup() { rm -rf "$work"; [[ -z "$inside_root" ]] || rm -rf "$inside_root"; }
trap cleanup EXIT
bash tools/no_compiler.sh "$work/no-compiler"
mkdir "$work/src"
cp -r tests "$work/src/tests"
# pytest's settings (markers, timeout; no package is found there), and the download retry
cp pyproject.toml tools/retry.sh "$work/src/"
find "$work/src" -name __pycache__ -prune -exec rm -rf {} +

# requirements KIND: kime's runtime and serve requirements (at their floors for KIND=floors) and
# the test tools, one a line, from pyproject.toml.
requirements() {
    "$python" - "$1" <<'EOF'
import re
import sys
import tomllib

project = tomllib.load(open("pyproject.toml", "rb"))["project"]
extras = project["optional-dependencies"]
needed = project["dependencies"] + extras["serve"]
if sys.argv[1] == "floors":
    floored = []
    for req in needed:
        if not re.match(r"^[A-Za-z0-9_.\-\[\]]+>=[^,;]+(;.*)?$", req):
            sys.exit("test_wheels: %r has no single floor (name>=X) to install at" % req)
        floored.append(req.replace(">=", "==", 1))
    needed = floored
tools = [d for d in extras["dev"] if re.split(r"[<>=;\[ ]", d)[0]
         in ("pytest", "pytest-timeout", "hypothesis", "httpx")]
if sys.argv[1] == "floors":  # httpx meets the serve extra in Starlette's TestClient: floor it too
    tools = [d.replace(">=", "==", 1) if d.startswith("httpx>=") else d for d in tools]
print("\n".join(needed + tools))
EOF
}

reference=${KIME_WHEEL_REFERENCE:-}
if [[ -z "$reference" ]]; then
    reference="$work/reference.json"
    echo "== the reference answers, from $python"
    "$python" tests/wheel_answers.py tests/goldens/checkpoints/tiny "$reference"
fi
cp "$reference" "$work/src/reference.json"
mkdir "$work/src/dist"
cp "$dist"/kime-"$version"-*.whl "$work/src/dist/"

# The steps inside a target's environment: a venv, the requirements, the wheel its pip picks,
# the subset. Run on the host (pip reaches the registries) or in the chroot (WHEELHOUSE: every
# requirement already downloaded for it, nothing fetched).
cat > "$work/src/inside.sh" <<'EOF'
set -euo pipefail
interp=$1 here=$2 label=$3 version=$4 wheelhouse=${5:-}
cd "$here"
venv="$here/venv-$label"
"$interp" -m venv "$venv"
export VIRTUAL_ENV="$venv" PATH="$venv/bin:$PATH"
unset PYTHONPATH
index=()
[[ -z "$wheelhouse" ]] || index=(--no-index --find-links "$wheelhouse")
fetch=(bash "$here/retry.sh")  # on the host pip downloads, again after a pause when cut short
[[ -z "$wheelhouse" ]] || fetch=()
"${fetch[@]}" python -m pip install -q --disable-pip-version-check --only-binary :all: "${index[@]}" \
    -r "requirements-$label.txt"
rm -rf "picked-$label"
python -m pip --isolated download -q --disable-pip-version-check --no-index --find-links dist \
    --only-binary :all: --no-deps -d "picked-$label" "kime==$version"
wheel=$(ls "$here/picked-$label"/kime-*.whl)
python -m pip install -q --disable-pip-version-check --no-index --no-deps "$wheel"
python -m pip check
if cc --version >/dev/null 2>&1; then echo "test_wheels: a compiler runs in $label" >&2; exit 1; fi
python - "$wheel" <<'PY' | tee "$here/facts-$label.txt"
import platform, sys
from importlib import metadata
import numpy, kime
print("%s, %s | %s | numpy %s, tokenizers %s, pydantic %s" % (
    sys.version.split()[0], " ".join(platform.libc_ver()), sys.argv[1].rsplit("/", 1)[-1],
    numpy.__version__, metadata.version("tokenizers"), metadata.version("pydantic")))
PY
eval "args=($KIME_WHEELS_SUBSET)"
KIME_WHEEL="$wheel" KIME_WHEEL_REFERENCE="$here/reference.json" \
    python -m pytest -q -p no:cacheprovider "${args[@]}"
EOF
export KIME_WHEELS_SUBSET="$subset"

pyenv_python() {  # pyenv_python 3.12: pyenv's newest 3.12 interpreter, or nothing
    local root
    root="$(pyenv root 2>/dev/null || echo "${PYENV_ROOT:-$HOME/.pyenv}")"
    ls -d "$root"/versions/"$1".*/bin/python"$1" 2>/dev/null | sort -V | tail -n 1 || true
}

host_target() {  # host_target LABEL INTERPRETER KIND
    local label=$1 interp=$2 kind=$3
    requirements "$kind" > "$work/src/requirements-$label.txt"
    PATH="$work/no-compiler:$(tr ':' '\n' <<<"$PATH" | grep -vxF "${VIRTUAL_ENV:-/nonexistent}/bin" | paste -sd:)" \
        bash "$work/src/inside.sh" "$interp" "$work/src" "$label" "$version"
}

chroot_target() {  # chroot_target LABEL KIND: in the sid or bullseye chroot, with a wheelhouse the
    local label=$1 kind=$2 root interp pyver glibc minor  # host fetched
    if [[ "$kind" == sid ]]; then root=$sid_root; export KIME_SID_ROOT="$sid_root"
    else root=$bullseye_root; export KIME_BULLSEYE_ROOT="$bullseye_root"; fi
    [[ -e "$root/.kime-$kind-done" ]] || bash "tools/${kind}_chroot.sh" create
    interp=$(bash "tools/${kind}_chroot.sh" python)
    pyver=${interp##*python}
    inside_root="$root/kime-wheels"
    rm -rf "$inside_root"
    cp -a "$work/src" "$inside_root"
    requirements default > "$inside_root/requirements-$label.txt"
    glibc=$(sed -n '/^Package: libc6$/,/^$/s/^Version: 2\.\([0-9]*\).*/\1/p' "$root/var/lib/dpkg/status")
    local -a platforms=(--platform linux_x86_64 --platform manylinux2014_x86_64)
    for minor in $(seq 5 "$glibc"); do platforms+=(--platform "manylinux_2_${minor}_x86_64"); done
    bash tools/retry.sh "$python" -m pip download -q --disable-pip-version-check --only-binary :all: \
        --python-version "$pyver" --implementation cp "${platforms[@]}" \
        -d "$inside_root/wheelhouse" -r "$inside_root/requirements-$label.txt"
    bash "tools/${kind}_chroot.sh" run -- bash /kime-wheels/inside.sh "$interp" /kime-wheels \
        "$label" "$version" /kime-wheels/wheelhouse
    cp "$inside_root/facts-$label.txt" "$work/src/" 2>/dev/null || true
}

declare -a table=()
failed=0 missing=0
for target in "${targets[@]}"; do
    start=$(date +%s)
    echo "==== $target"
    rc=0
    case "$target" in
        3.1[0-9])
            if [[ "$target" == 3.14 ]]; then
                if [[ ! -e "$sid_root/.kime-sid-done" && $(id -u) -ne 0 ]]; then
                    echo "test_wheels: no sid chroot at $sid_root and not root to make one; 3.14 not tested" >&2
                    rc=-1
                else
                    chroot_target py314 sid || rc=$?
                fi
            else
                interp="$(pyenv_python "$target")"
                if [[ -z "$interp" ]]; then
                    echo "test_wheels: no CPython $target here (pyenv); not tested" >&2; rc=-1
                else
                    host_target "py${target/./}" "$interp" default || rc=$?
                fi
            fi ;;
        bullseye)
            if [[ ! -e "$bullseye_root/.kime-bullseye-done" && $(id -u) -ne 0 ]]; then
                echo "test_wheels: no bullseye chroot at $bullseye_root and not root to make one; not tested" >&2
                rc=-1
            else
                chroot_target bullseye bullseye || rc=$?
            fi ;;
        floors)
            interp="$(pyenv_python 3.10)"
            if [[ -z "$interp" ]]; then
                echo "test_wheels: no CPython 3.10 here (pyenv) for the floors; not tested" >&2; rc=-1
            else
                host_target floors "$interp" floors || rc=$?
            fi ;;
        *) echo "test_wheels: unknown target $target" >&2; exit 2 ;;
    esac
    label=${target/./}; [[ "$target" == floors || "$target" == bullseye ]] || label="py$label"
    facts=$(cat "$work/src/facts-$label.txt" 2>/dev/null || echo "-")
    case $rc in
        0) result=passed ;;
        -1) result="NOT RUN (no interpreter)"; missing=1 ;;
        *) result="FAILED (rc $rc)"; failed=1 ;;
    esac
    table+=("$(printf '%-7s | %-26s | %5d s | %s' "$target" "$result" $(( $(date +%s) - start )) "$facts")")
done
echo "==== the wheel on each interpreter (target | result | time | Python, libc | wheel | versions)"
printf '  %s\n' "${table[@]}"
[[ $failed == 0 ]] || exit 1
[[ $missing == 0 ]] || exit 3
