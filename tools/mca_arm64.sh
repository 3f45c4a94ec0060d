#!/usr/bin/env bash
# The aarch64 micro-kernels' inner loops under llvm-mca's Neoverse models: cycles per k-step and
# the FMA (or dot-product) utilisation against the model's peak, as the Markdown table of
# docs/arm64.md. Needs no ARM hardware: the C is cross-compiled to assembly, each kernel's
# hottest loop (the loop of its function holding the most of its instruction) is cut out, and
# llvm-mca runs it. The peak is measured the same way, on a stream of independent instructions
# of the same kind, so the percentages are the model's own.
#
#   tools/mca_arm64.sh [--cpus "neoverse-n1 neoverse-n2 neoverse-v1 neoverse-v2"]
#
# Environment: CC (aarch64-linux-gnu-gcc), MCA (llvm-mca-19; llvm-14 has no Neoverse models and
# answers the same for every -mcpu). Kernels are listed in KERNELS below as
# "file function mnemonic label" (label with - for spaces): add a line for a new kernel, here or
# in tools/mca_arm64_kernels.txt.
set -euo pipefail

CC=${CC:-aarch64-linux-gnu-gcc}
MCA=${MCA:-llvm-mca-19}
CPUS="neoverse-n1 neoverse-n2 neoverse-v1 neoverse-v2"
if [[ ${1:-} == --cpus ]]; then CPUS=$2; shift 2; fi
if [[ ${1:-} == -h || ${1:-} == --help ]]; then sed -n 2,15p "$0"; exit 0; fi

ROOT=$(cd "$(dirname "$0")/.." && pwd)
SRC=$ROOT/kime/_cpu/csrc
# file  function  mnemonic  what (one k-step = one trip of the loop)
KERNELS=(
  "gemm.c kernel_portable fmla FP32-portable-4x8-(GCC-auto-vectorised)"
  "gemm.c kernel_neon fmla FP32-NEON-12x8"
)
[[ -f $ROOT/tools/mca_arm64_kernels.txt ]] && mapfile -t -O ${#KERNELS[@]} KERNELS < <(grep -v '^#' "$ROOT/tools/mca_arm64_kernels.txt")

command -v "$CC" >/dev/null || { echo "mca_arm64: $CC not found (apt-get install gcc-aarch64-linux-gnu)" >&2; exit 2; }
command -v "$MCA" >/dev/null || { echo "mca_arm64: $MCA not found (apt-get install llvm-19)" >&2; exit 2; }

TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

# cycles per iteration of an assembly snippet on one CPU model
cycles() { "$MCA" -mtriple=aarch64 -mcpu="$2" -iterations=1000 "$1" 2>/dev/null |
           awk '/^Iterations:/ {it=$2} /^Total Cycles:/ {c=$3} END {printf "%.2f", c / it}'; }

# the loop of `function` in `asm` with the most `mnemonic` instructions: from a label to the
# conditional branch back to it
extract() {
  python3 - "$1" "$2" "$3" <<'EOF'
import re, sys
asm, fn, mnem = sys.argv[1:]
lines = open(asm).read().splitlines()
start = next(i for i, l in enumerate(lines) if l == fn + ":")
end = next(i for i in range(start, len(lines)) if lines[i].startswith("\t.size\t" + fn + ","))
body = lines[start:end]
best = None
for i, l in enumerate(body):
    m = re.match(r"^(\.L\w+):", l)
    if not m:
        continue
    for j in range(i + 1, len(body)):
        if re.match(r"^\s+b(\.ne|ne|\.lt|\.gt|\.le|\.ge|\.hi|\.lo|\.cc|\.cs|cc|cs|lt|gt|le|ge|hi|lo)\s+" + re.escape(m.group(1)) + r"$", body[j]) \
                or re.match(r"^\s+(cbnz|cbz|tbnz|tbz)\s.*," + re.escape(m.group(1)) + r"$", body[j]):
            loop = [x for x in body[i + 1:j + 1] if x.startswith("\t") and not x.startswith("\t.")]
            n = sum(1 for x in loop if x.split()[0] == mnem)
            if best is None or n > best[0]:
                best = (n, loop)
            break
if best is None:
    sys.exit("no loop in " + fn)
print("\n".join(best[1]))
EOF
}

# a stream of 24 independent instructions of the kernel's kind: the model's peak per cycle
peak_snippet() {
  local mnem=$1 out=$2
  : > "$out"
  for r in $(seq 0 23); do
    case $mnem in
      fmla) echo "  fmla v$r.4s, v28.4s, v29.s[0]" ;;
      sdot|udot) echo "  $mnem v$r.4s, v28.16b, v29.16b" ;;
      smmla|ummla|usmmla) echo "  $mnem v$r.4s, v28.16b, v29.16b" ;;
      bfmmla) echo "  bfmmla v$r.4s, v28.8h, v29.8h" ;;
      bfdot) echo "  bfdot v$r.4s, v28.8h, v29.8h" ;;
      *) echo "mca_arm64: no peak snippet for $mnem" >&2; exit 2 ;;
    esac >> "$out"
  done
}

declare -A ASM
echo "| kernel | CPU model | cycles / k-step | instructions / k-step | FMA-class / k-step | FMA-class / cycle | model peak / cycle | utilisation |"
echo "|---|---|---|---|---|---|---|---|"
for entry in "${KERNELS[@]}"; do
  read -r file fn mnem what <<<"$entry"
  if [[ -z ${ASM[$file]:-} ]]; then
    # the flags setup.py builds the file with (contraction, scheduling)
    flags=$(cd "$ROOT" && python3 -c 'import sys; from tests.toolchain import csrc_flags; print(" ".join(csrc_flags(sys.argv[1], "aarch64")))' "$file")
    # shellcheck disable=SC2086
    "$CC" -O3 -S $flags -I"$SRC" "$SRC/$file" -o "$TMP/${file%.c}.s"
    ASM[$file]=$TMP/${file%.c}.s
  fi
  loop=$TMP/$fn.s
  extract "${ASM[$file]}" "$fn" "$mnem" > "$loop"
  n=$(awk -v m="$mnem" '$1 == m' "$loop" | wc -l)
  total=$(wc -l < "$loop")
  peak_snippet "$mnem" "$TMP/peak_$mnem.s"
  for cpu in $CPUS; do
    if ! "$MCA" -mtriple=aarch64 -mcpu="$cpu" -iterations=1 "$loop" >/dev/null 2>&1; then
      echo "| ${what//-/ } | $cpu | - | - | - | - | - | the CPU lacks $mnem |"  # e.g. N1: no i8mm/bf16
      continue
    fi
    c=$(cycles "$loop" "$cpu")
    p=$(cycles "$TMP/peak_$mnem.s" "$cpu")
    awk -v what="${what//-/ }" -v cpu="$cpu" -v c="$c" -v n="$n" -v total="$total" -v p="$p" -v m="$mnem" 'BEGIN {
      peak = 24 / p; rate = n / c
      printf "| %s | %s | %.2f | %d | %d %s | %.2f | %.1f | %.0f%% |\n", what, cpu, c, total, n, m, rate, peak, 100 * rate / peak }'
  done
done
