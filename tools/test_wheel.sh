#!/usr/bin/env bash
# Install a built kime wheel the way a CPU server without a compiler would, and run the test suite
# against the installed package, not the source tree:
#
#   tools/test_wheel.sh WHEEL        (tools/build_wheel.sh prints WHEEL's path)
#
# A fresh venv; every C/C++ compiler on PATH shadowed by a script that fails; only binary wheels
# (`--only-binary :all:`, so nothing can be built either). First without the serve extra (its
# tests in tests/project/test_wheel.py only), then with it (the whole suite), each from a copy of tests/
# (and bench/, which some tests drive) outside the repository, so `import kime` can only find the
# installed wheel. PYTHON picks the interpreter for the venv (default: python3).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
wheel="$(realpath "$1")"
python="${PYTHON:-python3}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# No compiler: shadow every one PATH has (cc, gcc, g++-12, x86_64-linux-gnu-gcc, clang, ...).
mkdir "$work/no-compiler"
for name in cc c++ gcc g++ clang clang++ \
        $(compgen -c | grep -E '^((x86_64|aarch64)-linux-gnu-)?(gcc|g\+\+|cc|c\+\+|clang|clang\+\+)(-[0-9.]+)?$' | sort -u); do
    printf '#!/bin/sh\necho "%s: no compiler on this machine (kime wheel test)" >&2\nexit 127\n' \
        "$name" >"$work/no-compiler/$name"
    chmod +x "$work/no-compiler/$name"
done

"$python" -m venv "$work/venv"
path="${PATH}"
[[ -n "${VIRTUAL_ENV:-}" ]] && path="$(tr ':' '\n' <<<"$path" | grep -vxF "$VIRTUAL_ENV/bin" | paste -sd:)"
export VIRTUAL_ENV="$work/venv"
export PATH="$work/no-compiler:$VIRTUAL_ENV/bin:$path"
unset PYTHONPATH
install() { python -m pip install -q --disable-pip-version-check --only-binary :all: "$@"; }

mkdir "$work/src"
cp -r tests "$work/src/tests"
[[ -d bench ]] && cp -r bench "$work/src/bench"
find "$work/src" -name __pycache__ -prune -exec rm -rf {} +
cd "$work/src"

echo "== the wheel without the serve extra (kime[dev]: the test tools)"
install "kime[dev] @ file://$wheel"
python -c 'import importlib.util, sys; sys.exit("fastapi is installed" if importlib.util.find_spec("fastapi") else 0)'
if cc --version >/dev/null 2>&1; then echo "test_wheel: a compiler still runs" >&2; exit 1; fi
python - <<'EOF'
import time
start = time.perf_counter()
import kime
print("kime %s from %s; import kime: %.2f s" % (kime.__version__, kime.__file__,
                                                time.perf_counter() - start))
EOF
KIME_WHEEL="$wheel" python -m pytest -q -p no:cacheprovider tests/project/test_wheel.py

echo "== the wheel with the serve extra: the whole suite from the installed package"
install "kime[dev,serve] @ file://$wheel"
python -c 'import kime; print("kime from", kime.__file__)'
# The other kernel path and BLAS: the first run (.ci/run's editable one) has the machine's
# environment as it is (AVX-512 here, this workplace's OPENBLAS_CORETYPE); this one caps kime at
# AVX2 and lets OpenBLAS pick its own kernel, so both paths pass on every stop.
echo "== with KIME_ISA=avx2 and OPENBLAS_CORETYPE/OPENBLAS_L2_SIZE unset"
KIME_WHEEL="$wheel" KIME_ISA=avx2 env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE \
    python -m pytest -q -p no:cacheprovider -ra tests
