"""What kime answers on one checkpoint under every x86 ISA level this CPU has, as text to compare
between interpreters byte for byte (issue 34: every CPython's wheel answers as 3.11 does):

    python tests/wheel_answers.py CHECKPOINT OUT.json     (tools/test_wheels.sh, on 3.11)

For each level (portable, avx2, avx512 where the CPU has it, through KIME_ISA):
tests/output_bits.py's lines (RoPE tables; raw logits and act, FP32 and INT8) and
`kime decide --compact` on one state, FP32 and INT8, each in a child process, the way a user runs
it; and the C library, since the portable level's raw bits depend on its libm (see `libc`).
tests/project/test_wheel.py computes the same in the interpreter under test and compares it with
the file.
"""
from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

STATE = "I was charged twice, please refund one."
QUESTIONS = {
    "team": {"type": "choice", "instructions": "Which team should handle this?",
             "criteria": {"billing": "payments and invoices", "tech": "bugs and outages"}},
    "urgency": {"type": "score", "instructions": "How urgent is it?",
                "criteria": ["low", "normal", "high"]},
    "refund": {"type": "noul", "instructions": "Does the customer ask for a refund?"},
}
ISA_ORDER = ("portable", "avx2", "avx512")
BITS = Path(__file__).resolve().parent / "output_bits.py"


def _run(argv: list[str], isa: str, cache: str) -> str:
    env = {**os.environ, "KIME_ISA": isa, "KIME_CACHE": cache, "PYTHONWARNINGS": "ignore"}
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=300)
    if done.returncode != 0:
        raise RuntimeError("%s (KIME_ISA=%s) failed: %s"
                           % (" ".join(argv), isa, done.stderr[-2000:]))
    return done.stdout


def libc() -> str:
    """The C library's name and version ("glibc 2.36"): the portable level's GELU and softmax call
    its erff and expf, whose last bits differ between releases (glibc 2.41+ rounds erff
    correctly), so that level's raw bits are comparable only on the same libc."""
    return " ".join(platform.libc_ver())


def native_isa() -> str:
    """The widest level this CPU runs (`kime doctor`'s pick with no cap)."""
    env = {k: v for k, v in os.environ.items() if k != "KIME_ISA"}
    done = subprocess.run([sys.executable, "-m", "kime.cli", "doctor", "--json"], env=env,
                          capture_output=True, text=True, timeout=120, check=True)
    return str(json.loads(done.stdout)["cpu"]["isa"])


def answers(checkpoint: str | os.PathLike[str]) -> dict[str, str]:
    """`{"avx2 bits": ..., "avx2 decide fp32": ..., ...}` for every level up to this CPU's."""
    levels = ISA_ORDER[:ISA_ORDER.index(native_isa()) + 1]
    out: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="kime-answers-") as tmp:
        questions = Path(tmp) / "questions.json"
        questions.write_text(json.dumps(QUESTIONS))
        for isa in levels:
            cache = str(Path(tmp) / ("cache-" + isa))
            out[isa + " bits"] = _run([sys.executable, str(BITS), str(checkpoint)], isa, cache)
            for precision in ("fp32", "int8"):
                out["%s decide %s" % (isa, precision)] = _run(
                    [sys.executable, "-m", "kime.cli", "decide", "--model", str(checkpoint),
                     "--state", STATE, "--questions", str(questions), "--precision", precision,
                     "--threads", "1", "--compact"], isa, cache)
    return out


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python tests/wheel_answers.py CHECKPOINT OUT.json", file=sys.stderr)
        return 2
    record = {"python": sys.version.split()[0], "libc": libc(), "answers": answers(argv[0])}
    Path(argv[1]).write_text(json.dumps(record, indent=1) + "\n")
    print("wheel_answers: %d answers of Python %s in %s" % (len(record["answers"]),
                                                             record["python"], argv[1]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
