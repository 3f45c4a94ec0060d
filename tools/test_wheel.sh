#!/usr/bin/env bash
# Install a built kime wheel the way a CPU server without a compiler would, and run the test suite
# against the installed package, not the source tree:
#
#   tools/test_wheel.sh WHEEL        (tools/build_wheel.sh prints WHEEL's path)
#
# A fresh venv; every C/C++ compiler on PATH shadowed by a script that fails; only binary wheels
# (`--only-binary :all:`, so nothing can be built either). First without the serve extra (its
# tests in tests/project/test_wheel.py only), then with it (under KIME_ISA=avx2: the kernels, the
# engine core and the wheel's answers, fast and slow, and a smoke of each surface), each from a
# copy of tests/ outside the repository, so `import kime` can only find the installed wheel.
# PYTHON picks the interpreter for the venv (default: python3).
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
retry="$PWD/tools/retry.sh"  # downloads run again after a pause when cut short
install() { bash "$retry" python -m pip install -q --disable-pip-version-check --only-binary :all: "$@"; }

mkdir "$work/src"
cp -r tests "$work/src/tests"
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

echo "== the wheel with the serve extra: what depends on the build, from the installed package"
install "kime[dev,serve] @ file://$wheel"
python -c 'import kime; print("kime from", kime.__file__)'
# The suite runs once, in .ci/run's editable run, on this machine's own level (AVX-512 here). This
# run caps kime at AVX2 and runs from the wheel only what the build or the instruction set can
# change: the kernels and the engine core, fast and slow (the parity goldens, determinism, the
# parallel layout, the output bits), the wheel's own tests (its files, `kime doctor` and
# `kime decide` under each ISA cap, the answers to the bit against the editable build's record);
# and a smoke of each surface over the installed engine (Laya's Agent, the CLI, the server, the
# jobs). The rest is the same Python at every ISA and build, and ran in the editable run.
# This workplace's OPENBLAS_CORETYPE/OPENBLAS_L2_SIZE stay as they are (never unset here).
echo "== with KIME_ISA=avx2: kernels, core and the wheel's answers, then a smoke of each surface"
avx2() { KIME_WHEEL="$wheel" KIME_ISA=avx2 "$@"; }
avx2 python -m pytest -q -p no:cacheprovider -ra tests/kernels tests/core tests/project/test_wheel.py
avx2 python -m pytest -q -p no:cacheprovider -ra -m "not slow" tests/laya/test_laya_agent.py \
    tests/cli/test_cli.py tests/serve/test_server.py tests/jobs/test_jobs_score.py
