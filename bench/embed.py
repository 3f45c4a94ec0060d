"""`python -m bench.embed`: embedding `--texts` texts (1,000 by default) with kime's
`embed_fn_from_agent` beside Laya's torch `embed_fn_from_agent`, in one run on one machine.

The texts are support-ticket sentences, one to four each (about 10 to 80 tokens), on a random
checkpoint of `--shape` (`base`, the published English shape). One timed call embeds them all,
with Laya's defaults on both sides (`max_length` 512, `batch_size` 32). kime runs them unpadded
in shared batches, its answer cache off; Laya pads each chunk of `batch_size` to its longest
text. Laya runs in the peer interpreter (`bench.peers`: `--peer-python`,
`$KIME_BENCH_PEER_PYTHON`, or the oracle environment), in a side process, so torch never enters
kime's; without one, kime runs alone and the report says why.

Prints the CPU, each side's median, p95 and worst call, texts per second, the ratio of medians,
and how far the two sides' vectors are apart (relative to their largest value).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from typing import Any, Dict, List, Optional

from .peers import UNSET_ENV, clean_env, find_peer_python

# Laya's side: reads one JSON request on stdin, answers one JSON object on stdout.
PEER = r"""
import json, sys, time, warnings
req = json.load(sys.stdin)
import torch
import laya
from laya.agent import Agent
from laya.shortlist import embed_fn_from_agent
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    agent = Agent(req["path"], device="cpu")
    fn = embed_fn_from_agent(agent, req["max_length"], req["batch_size"])
    seconds, out = [], None
    for i in range(req["warmup"] + req["repeat"]):
        t0 = time.perf_counter()
        out = fn(req["texts"])
        if i >= req["warmup"]:
            seconds.append(time.perf_counter() - t0)
json.dump({"seconds": seconds, "sample": out[::req["every"]].tolist(), "laya": laya.__version__,
           "torch": torch.__version__, "threads": torch.get_num_threads()}, sys.stdout)
"""


def texts_for(n: int) -> List[str]:
    """`n` texts of one to four support-ticket sentences, the same on every run."""
    from .workloads import source_text

    return [source_text(1000 + i, sentences=1 + i % 4) for i in range(n)]


def _line(name: str, s: Dict[str, Any], n: int) -> str:
    return "  %-14s p50 %8.1f ms   p95 %8.1f ms   max %8.1f ms   %7.1f texts/s   (n=%d)" % (
        name, s["p50"] * 1e3, s["p95"] * 1e3, s["max"] * 1e3, n / s["p50"], s["n"])


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.embed",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--shape", default="base")
    ap.add_argument("--texts", type=int, default=1000, help="texts per call (default 1000)")
    ap.add_argument("--max-length", type=int, default=512)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--repeat", type=int, default=3, help="timed calls per side")
    ap.add_argument("--warmup", type=int, default=1, help="untimed calls first")
    ap.add_argument("--threads", type=int, default=0, help="kime's threads (0: every core)")
    ap.add_argument("--precision", default="f32", help="kime's precision (f32, int8, bf16)")
    ap.add_argument("--peers", choices=("auto", "none"), default="auto")
    ap.add_argument("--peer-python", default=None)
    ap.add_argument("--cache-dir", default=None)
    ap.add_argument("--json", default=None, help="also write the numbers here")
    args = ap.parse_args(argv)

    import warnings

    import numpy as np

    import kime
    from kime.laya.embedding import embed_fn_from_agent

    from .machine import machine_info
    from .stats import summarize
    from .workloads import cached_checkpoint, tokenizer_encoder

    log = lambda s: print("[bench.embed] " + s, file=sys.stderr, flush=True)  # noqa: E731
    path = cached_checkpoint(args.shape, args.cache_dir, log=log)
    texts = texts_for(args.texts)
    encode = tokenizer_encoder(path)
    tokens = sum(min(len(encode(t)) + 2, args.max_length) for t in texts)
    every = max(1, args.texts // 50)
    info = machine_info()

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        agent = kime.load(path, device="cpu", threads=args.threads, precision=args.precision,
                          answer_cache=0)
    fn = embed_fn_from_agent(agent, args.max_length, args.batch_size)
    seconds: List[float] = []
    ours = np.zeros((0, 0), dtype=np.float32)
    for i in range(args.warmup + args.repeat):
        t0 = time.perf_counter()
        ours = fn(texts)
        if i >= args.warmup:
            seconds.append(time.perf_counter() - t0)
    out: Dict[str, Any] = {"machine": info, "shape": args.shape, "texts": args.texts,
                           "tokens": tokens, "hidden": int(ours.shape[1]),
                           "precision": args.precision, "kime": summarize(seconds),
                           "kime_version": kime.__version__,
                           "batches": agent.engine.scheduler.batches}
    agent.close()

    peer_note = "not run (--peers none)"
    if args.peers == "auto":
        python, why = find_peer_python(args.peer_python)
        if python is None:
            peer_note = "not run: " + why
        else:
            log("running Laya's torch embed_fn_from_agent with %s (%s)" % (python, why))
            r = subprocess.run([python, "-c", PEER], input=json.dumps(
                {"path": path, "texts": texts, "max_length": args.max_length,
                 "batch_size": args.batch_size, "warmup": args.warmup, "repeat": args.repeat,
                 "every": every}), capture_output=True, text=True, env=clean_env(), timeout=7200)
            if r.returncode != 0:
                raise RuntimeError("Laya's side failed (exit %d):\n%s"
                                   % (r.returncode, r.stderr[-3000:]))
            peer = json.loads(r.stdout)
            theirs = np.asarray(peer["sample"], dtype=np.float64)
            out["laya"] = summarize(peer["seconds"])
            out["laya_versions"] = {"laya": peer["laya"], "torch": peer["torch"],
                                    "torch_threads": peer["threads"]}
            out["max_rel_diff"] = float(np.abs(ours[::every] - theirs).max()
                                        / np.abs(theirs).max())
            peer_note = "laya %s, torch %s (%d threads)" % (peer["laya"], peer["torch"],
                                                            peer["threads"])

    print("embed_fn_from_agent: %d texts, %d tokens (max_length %d, batch_size %d), shape %s "
          "(hidden %d), kime %s" % (args.texts, tokens, args.max_length, args.batch_size,
                                    args.shape, out["hidden"], args.precision))
    print("CPU: %s, %d cores; kime %s (threads=%s, answer cache off); Laya: %s"
          % (info["cpu"], info["cores"], kime.__version__, args.threads or "all", peer_note))
    print(_line("kime", out["kime"], args.texts))
    if "laya" in out:
        print(_line("laya (torch)", out["laya"], args.texts))
        print("  kime is %.2fx Laya's speed (ratio of medians)"
              % (out["laya"]["p50"] / out["kime"]["p50"]))
        print("  vectors: largest difference %.2g of the largest value (every %dth text)"
              % (out["max_rel_diff"], every))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    if any(v in os.environ for v in UNSET_ENV) and not os.environ.get("KIME_BENCH_REEXEC"):
        # These slow a current OpenBLAS and are read when NumPy loads it: start again without.
        env = clean_env({"KIME_BENCH_REEXEC": "1"})
        os.execve(sys.executable, [sys.executable, "-m", "bench.embed"] + sys.argv[1:], env)
    sys.exit(main())
