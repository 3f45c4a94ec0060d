"""The bits of kime's forward pass on one checkpoint, one line per thing that must be equal across
CPUs and architectures, for tests/core/test_output_bits.py and the ARM64 job
(tools/test_wheel_arm64.sh), which compare these lines between runs:

    python tests/output_bits.py CHECKPOINT [--first]

- `rope`: the RoPE cos/sin tables (FP32) for the checkpoint's two thetas, as the backends get them;
- `f32`: the raw outputs (logits and act) of three requests (one bucket each) in FP32;
- `int8`: the same in INT8.

--first sends only the first, shortest request: for a run under qemu-user's x86-64 emulation,
whose FMA helpers take minutes over the three on a slow host, where what differs is the CPU that
picks the kernels, not the shapes they meet (the native runs cover every bucket at every level).

The kernels are whatever KIME_ISA and KIME_QGEMM pick here, on one thread. What must be equal:
every SIMD level of the FP32 kernels (x86 AVX2 and AVX-512, aarch64 NEON) gives the same `f32`
line, every SIMD INT8 kernel set (exact INT32 sums, one quantization and one dequantization) the
same `int8` line, and the portable C level the same lines on every x86-64 CPU. Packed weights go
to a fresh cache (KIME_CACHE) unless the caller sets one.
"""
from __future__ import annotations

import hashlib
import os
import sys
import tempfile
import warnings

STATE = "I was charged twice for my subscription this month, please refund one of them. "
QUESTIONS = {
    "team": {"type": "choice", "instructions": "Which team?",
             "criteria": {"billing": "payments", "tech": "bugs"}},
    "urgency": {"type": "score", "instructions": "How urgent?",
                "criteria": ["low", "normal", "high"]},
    "refund": {"type": "noul", "instructions": "Does the customer ask for a refund?"},
}
REPEATS = (1, 3, 9)  # one bucket each


def lines(checkpoint: str, repeats: tuple[int, ...] = REPEATS) -> list[str]:
    """`name sha256` per line, as the module docstring lists them, over the requests of
    `repeats` (the state repeated that many times)."""
    import kime
    from kime.checkpoint import load_checkpoint
    from kime.graph import rope_half_tables

    graph = load_checkpoint(checkpoint).graph
    digest = hashlib.sha256()
    for theta in (graph.spec.global_theta, graph.spec.local_theta):
        for table in rope_half_tables(graph.max_positions, graph.spec.head_dim, theta):
            digest.update(table.tobytes())
    out = ["rope " + digest.hexdigest()]
    for precision in ("f32", "int8"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the test checkpoints' out-of-range temperatures
            engine = kime.Kime(checkpoint, device="cpu", precision=precision, threads=1)
        digest = hashlib.sha256()
        for n in repeats:
            response = engine.decide({"state": STATE * n, "questions": QUESTIONS}, cache=False)
            for q in QUESTIONS:
                digest.update(response[q].logits.tobytes())
                digest.update(response[q].act.tobytes())
        out.append("%s %s" % (precision, digest.hexdigest()))
    return out


def main(argv: list[str]) -> int:
    first = "--first" in argv
    args = [a for a in argv if a != "--first"]
    if len(args) != 1 or args[0].startswith("-"):
        print("usage: python tests/output_bits.py CHECKPOINT [--first]", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="kime-bits-") as cache:
        os.environ.setdefault("KIME_CACHE", cache)
        print("\n".join(lines(args[0], REPEATS[:1] if first else REPEATS)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
