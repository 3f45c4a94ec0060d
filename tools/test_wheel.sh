#!/usr/bin/env bash
# Install a built kime wheel the way a CPU server without a compiler would, and run the test suite
# against the installed package, not the source tree:
#
#   tools/test_wheel.sh WHEEL        (tools/build_wheel.sh prints WHEEL's path)
#
# A fresh venv; every C/C++ compiler on PATH shadowed by a script that fails; only binary wheels
# (`--only-binary :all:`, so nothing can be built either). First without the serve extra (its
# tests in tests/project/test_wheel.py only), then with it (under KIME_ISA=avx2: the fast tier,
# and the slow tests of the kernels, the engine core and the Laya layer), each from a copy of tests/
# (and bench/, which some tests drive) outside the repository, so `import kime` can only find the
# installed wheel. PYTHON picks the interpreter for the venv (default: python3).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
wheel="$(realpath "$1")"
python="${PYTHON:-python3}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# No compiler: shadow every one PATH has (tools/no_compiler.sh).
bash tools/no_compiler.sh "$work/no-compiler"

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

echo "== the wheel with the serve extra: the suite's kernel-facing part from the installed package"
install "kime[dev,serve] @ file://$wheel"
python -c 'import kime; print("kime from", kime.__file__)'
# The other kernel path and BLAS: the first run (.ci/run's editable one, the whole suite) has the
# machine's environment as it is (AVX-512 here, this workplace's OPENBLAS_CORETYPE); this one caps
# kime at AVX2 and lets OpenBLAS pick its own kernel, so both paths pass on every stop. It runs
# the fast tier whole, and of the slow tests those of the kernels and the engine core (parity
# goldens, determinism, the parallel layout), which depend on the kernel path; the slow servers,
# integrations, jobs and Ray tests are the same Python at every ISA and ran in the first run.
echo "== with KIME_ISA=avx2 and OPENBLAS_CORETYPE/OPENBLAS_L2_SIZE unset"
avx2() { KIME_WHEEL="$wheel" KIME_ISA=avx2 env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE "$@"; }
avx2 python -m pytest -q -p no:cacheprovider -ra -m "not slow" tests
avx2 python -m pytest -q -p no:cacheprovider -ra -m slow tests/kernels tests/core tests/laya
