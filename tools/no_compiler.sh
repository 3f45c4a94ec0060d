#!/usr/bin/env bash
# Fill DIR with one failing script per C/C++ compiler PATH has (cc, gcc, g++-12,
# x86_64-linux-gnu-gcc, clang, ...), so that DIR first on PATH leaves no compiler that runs: what a
# CPU server without one looks like to pip and to kime (tools/test_wheel.sh, tools/test_wheels.sh).
#
#   tools/no_compiler.sh DIR
set -euo pipefail
dir=${1:?usage: tools/no_compiler.sh DIR}
mkdir -p "$dir"
for name in cc c++ gcc g++ clang clang++ \
        $(compgen -c | grep -E '^((x86_64|aarch64)-linux-gnu-)?(gcc|g\+\+|cc|c\+\+|clang|clang\+\+)(-[0-9.]+)?$' | sort -u); do
    printf '#!/bin/sh\necho "%s: no compiler on this machine (kime wheel test)" >&2\nexit 127\n' \
        "$name" >"$dir/$name"
    chmod +x "$dir/$name"
done
