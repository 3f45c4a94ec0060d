"""Time the NumPy reference forward per question on a named shape at a given row length.

    python -m bench.reference --shape base --tokens 512 --questions 4 --repeat 5

Writes a random checkpoint of the shape once (cached under --dir), builds a state that fills the
row to --tokens, and prints the median, p95 and max seconds per question after one warm-up. This is
the baseline the compiled backends are measured against.
"""
from __future__ import annotations

import argparse
import os
import statistics
import time
import warnings

from kime.synthetic import write_checkpoint


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shape", default="base")
    ap.add_argument("--tokens", type=int, default=512)
    ap.add_argument("--questions", type=int, default=4)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--dir", default=os.path.expanduser("~/.cache/kime/bench"))
    args = ap.parse_args()

    import kime

    path = os.path.join(args.dir, "%s-seed0" % args.shape)
    if not os.path.isfile(os.path.join(path, "model.safetensors")):
        t = time.perf_counter()
        write_checkpoint(path, shape=args.shape, seed=0)
        print("wrote %s in %.1f s" % (path, time.perf_counter() - t))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t = time.perf_counter()
        engine = kime.Kime(path, device="cpu", threads=args.threads, answer_cache=0)
        print("load %.2f s, %s" % (time.perf_counter() - t, engine.device))
    questions = {"q%d" % i: {"type": "choice", "instructions": "Which option fits best?",
                             "criteria": ["alpha", "beta", "gamma", "delta"]}
                 for i in range(args.questions)}
    state = "The customer wrote again about the delayed shipment and the invoice. " * 200
    rows = engine.rows_for({"state": state, "questions": questions, "max_len": args.tokens})
    assert all(len(r.ids) == args.tokens for r in rows), [len(r.ids) for r in rows]
    request = {"state": state, "questions": questions, "max_len": args.tokens}
    engine.decide(request)
    times = []
    for _ in range(args.repeat):
        t = time.perf_counter()
        engine.decide(request)
        times.append((time.perf_counter() - t) / args.questions)
    times.sort()
    p95 = times[min(len(times) - 1, int(round(0.95 * (len(times) - 1))))]
    print("shape=%s tokens=%d questions=%d: per question median %.3f s, p95 %.3f s, max %.3f s"
          % (args.shape, args.tokens, args.questions, statistics.median(times), p95, times[-1]))


if __name__ == "__main__":
    main()
