#!/usr/bin/env bash
# Test kime's aarch64 wheel installed where there is no compiler, under every qemu-user CPU model
# that selects a different aarch64 kernel set (issue 25):
#
#   tools/test_wheel_arm64.sh WHEEL [X86_ANSWERS]
#
# It runs in ROOT-run, the chroot tools/arm64_chroot.sh create copies before the compiler goes in
# (KIME_ARM64_ROOT picks ROOT), so nothing can be compiled there; the script also checks that no
# cc/gcc/clang runs. The wheel goes into a fresh venv in the chroot's /tmp (a tmpfs that ends with
# the run), which sees the chroot venv's runtime packages through a .pth, so nothing is
# downloaded and /opt/venv stays as it was. Tests run from a copy of tests/ outside the source
# tree, so `import kime` finds the installed wheel only.
#
# Under each QEMU_CPU model in KIME_ARM64_CPUS (default: cortex-a57 neoverse-n1 a64fx max,sme=off:
# NEON; dotprod; SVE; i8mm, bf16 and SVE2; SME stays off, as OpenBLAS's SME kernels raise
# spurious divide-by-zero warnings under qemu 7.2):
#   - `kime doctor`'s kernel lines (which aarch64 set it picked);
#   - `kime decide` on tests/goldens/checkpoints/tiny, FP32 and INT8, against X86_ANSWERS (a JSON
#     file {"fp32": RESULT, "int8": RESULT}; without it they are computed here with PYTHON, default
#     .venv/bin/python, which must import kime): FP32 every number within 1e-4 (enforced), INT8
#     reported (its exactness is the INT32 sums, checked by tests/kernels);
#   - tests/kernels;
#   - the parity subset KIME_ARM64_PARITY (default: the goldens and the determinism tests; set it
#     to "" to skip, or to pytest arguments).
# Prints each step's time. Emulated timings are not ARM speed.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
repo=$PWD
[[ $# -ge 1 && -f "$1" ]] || { echo "usage: $0 WHEEL [X86_ANSWERS]" >&2; exit 2; }
wheel="$(realpath "$1")"
answers=${2:-}
chroot_sh="$repo/tools/arm64_chroot.sh"
root=${KIME_ARM64_ROOT:-/work/arm64/chroot}
cpus=${KIME_ARM64_CPUS:-cortex-a57 neoverse-n1 a64fx max,sme=off}
parity=${KIME_ARM64_PARITY-tests/core/test_golden.py tests/core/test_cpu_backend.py::test_bits_identical_across_threads_and_batches tests/core/test_cpu_backend.py::test_int8_is_close_to_fp32_and_deterministic}

[[ -e "$root-run/.kime-venv-done" ]] || bash "$chroot_sh" create

work="$(mktemp -d /tmp/kime-arm64-test.XXXXXX)"
trap 'rm -rf "$work"' EXIT
cp "$wheel" "$work/"
mkdir "$work/src"
cp -r tests "$work/src/tests"
find "$work/src" -name __pycache__ -prune -exec rm -rf {} +
state="I was charged twice, please refund one."
cat > "$work/questions.json" <<'EOF'
{"team":    {"type": "choice", "instructions": "Which team should handle this?",
             "criteria": {"billing": "payments and invoices", "tech": "bugs and outages"}},
 "urgency": {"type": "score", "instructions": "How urgent is it?", "criteria": ["low", "normal", "high"]},
 "refund":  {"type": "noul", "instructions": "Does the customer ask for a refund?"}}
EOF

if [[ -n "$answers" ]]; then
    cp "$answers" "$work/x86.json"
else
    python=${PYTHON:-$repo/.venv/bin/python}
    echo "== the x86 answers, from $python"
    for p in fp32 int8; do
        (cd "$work" && "$python" -W ignore -m kime.cli decide --model "$repo/tests/goldens/checkpoints/tiny" \
            --state "$state" --questions questions.json --precision "$p" --threads 1 --compact \
            > "$work/x86-$p.json")
    done
    "$python" -c 'import json, sys; json.dump({p: json.load(open(f"{sys.argv[1]}/x86-{p}.json"))
        for p in ("fp32", "int8")}, open(f"{sys.argv[1]}/x86.json", "w"))' "$work"
fi

cat > "$work/compare.py" <<'EOF'
"""Every key, string and bool equal, every number within 1e-4: an aarch64 answer against x86's."""
import json
import sys

def diff(a, b, where="result"):
    if isinstance(a, dict) and isinstance(b, dict):
        if list(a) != list(b):
            yield f"{where}: keys {list(a)} != {list(b)}"
        for k in a:
            if k in b:
                yield from diff(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            yield f"{where}: {len(a)} items != {len(b)}"
        for i, (x, y) in enumerate(zip(a, b)):
            yield from diff(x, y, f"{where}[{i}]")
    elif isinstance(a, (int, float)) and not isinstance(a, bool) and isinstance(b, (int, float)):
        if abs(a - b) > 1e-4:
            yield f"{where}: {a} != {b} (diff {abs(a - b):.2e})"
    elif a != b:
        yield f"{where}: {a!r} != {b!r}"

arm, x86, label = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))[sys.argv[3]], sys.argv[4]
problems = list(diff(arm, x86))
if problems:
    sys.exit(f"decide {label}: differs from x86:\n  " + "\n  ".join(problems))
print(f"decide {label}: the x86 answers within 1e-4")
EOF

cat > "$work/inside.sh" <<'EOF'
set -euo pipefail
work=$1 cpus=$2 parity=$3 state=$4
t() { local l=$1 s; shift; s=$(date +%s); "$@"; echo "   [$l: $(( $(date +%s) - s )) s]"; }
for c in cc gcc c++ g++ clang aarch64-linux-gnu-gcc; do
    if command -v "$c" >/dev/null 2>&1; then echo "test_wheel_arm64: $c exists in the test chroot" >&2; exit 1; fi
done
echo "== no compiler in the test chroot: $(uname -m), $(/usr/bin/python3 --version)"
/usr/bin/python3 -m venv --without-pip /tmp/venv
site=$(/tmp/venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
/opt/venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])' > "$site/kime-runtime-deps.pth"
echo "== install $(basename "$work"/kime-*.whl)"
t install /opt/venv/bin/python -m pip --python /tmp/venv/bin/python install -q --no-index --no-deps "$work"/kime-*.whl
/opt/venv/bin/python -m pip --python /tmp/venv/bin/python check
export PATH=/tmp/venv/bin:$PATH
cd "$work/src"
python -c 'import kime, sys; assert "/tmp/venv/" in kime.__file__, kime.__file__; print("kime", kime.__version__, "from", kime.__file__)'
failed=()
for cpu in $cpus; do
    export QEMU_CPU=$cpu
    echo "== QEMU_CPU=$cpu"
    kime doctor 2>&1 | grep -E 'platform|kernels' || { failed+=("$cpu: doctor"); }
    for p in fp32 int8; do
        (cd "$work" && python -W ignore -m kime.cli decide --model "$work/src/tests/goldens/checkpoints/tiny" \
            --state "$state" --questions questions.json --precision "$p" --threads 1 --compact > "arm-$p.json") ||
            { failed+=("$cpu: decide $p"); continue; }
        if [[ $p == fp32 ]]; then
            python "$work/compare.py" "$work/arm-$p.json" "$work/x86.json" "$p" "$cpu $p" || failed+=("$cpu: decide $p")
        else
            # INT8's rule is exact INT32 sums against the integer reference (tests/kernels); the
            # end-to-end answers may differ from x86's by the activation quantisation, so this
            # comparison is reported, not enforced.
            python "$work/compare.py" "$work/arm-$p.json" "$work/x86.json" "$p" "$cpu $p" ||
                echo "   (int8 against x86: reported only)"
        fi
    done
    t "kernel tests" python -m pytest -q -p no:cacheprovider tests/kernels || failed+=("$cpu: tests/kernels")
    if [[ -n "$parity" ]]; then
        # shellcheck disable=SC2086
        t "parity subset" python -m pytest -q -p no:cacheprovider $parity || failed+=("$cpu: parity")
    fi
done
if [[ ${#failed[@]} -gt 0 ]]; then
    printf 'test_wheel_arm64: FAILED: %s\n' "${failed[@]}" >&2
    exit 1
fi
echo "test_wheel_arm64: all passed under: $cpus"
EOF

start=$(date +%s)
bash "$chroot_sh" runrt "$work" -- bash "$work/inside.sh" "$work" "$cpus" "$parity" "$state"
echo "test_wheel_arm64: $(( $(date +%s) - start )) s"
