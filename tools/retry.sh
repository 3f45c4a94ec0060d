#!/usr/bin/env bash
# Run a command that downloads, again after a pause when it fails:
#
#   bash tools/retry.sh CMD...
#
# PyPI downloads on these machines are sometimes cut short for a while: on stop 60 ray's 79 MB
# wheel stopped at 29.6 MB six times in a row (pip resumes at once, with no pause) and the whole
# CI run ended after 16 s. So a failed CMD runs again after 30 s, then after 90 s (KIME_RETRIES
# attempts in all, default 3; KIME_RETRY_PAUSE scales the pauses, default 30 s); its last status
# is this script's. Only for idempotent commands (pip install and download are: finished wheels
# are in pip's cache). Each failure is named on stderr, so the log says why a step took minutes.
set -uo pipefail

[[ $# -gt 0 ]] || { echo "usage: tools/retry.sh CMD..." >&2; exit 2; }
attempts=${KIME_RETRIES:-3}
pause=${KIME_RETRY_PAUSE:-30}
[[ "$attempts" =~ ^[1-9][0-9]*$ && "$pause" =~ ^[0-9]+$ ]] || {
    echo "retry: KIME_RETRIES must be a positive integer and KIME_RETRY_PAUSE a whole number" \
        "of seconds (got '$attempts', '$pause')" >&2
    exit 2
}

for ((n = 1; ; n++)); do
    "$@"
    rc=$?
    [[ $rc -eq 0 || $n -ge $attempts ]] && exit "$rc"
    wait_s=$(( pause * (n * 2 - 1) ))  # 1, 3, 5... pauses: 30 s, then 90 s
    echo "retry: attempt $n of $attempts failed (rc $rc): $1 ... ${*: -1}; again in $wait_s s" >&2
    sleep "$wait_s"
done
