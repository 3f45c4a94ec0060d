"""Tokenizing from many threads must not grow memory with the thread count.

The `tokenizers` library keeps a private match cache of several MB in every thread that
tokenizes, for that thread's life. kime's server lays requests out on many threads, so
`kime.tokenizer.Tokenizer` hands its texts to the library's own fixed pool instead. This test is
about threads on purpose: it pins that pool to 2 threads (RAYON_NUM_THREADS) so the comparison
is the same on any machine, and runs each side in a fresh process so neither sees the other's
memory.
"""
import json
import os
import subprocess
import sys

import pytest

from ..paths import ROOT, TINY

TOKENIZER = TINY / "tokenizer"

CHILD = r"""
import json, random, sys, threading
from kime.tokenizer import Tokenizer
tok = Tokenizer(sys.argv[1])
encode = tok.encode if sys.argv[2] == "kime" else (
    lambda text: tok._tok.encode(text, add_special_tokens=False).ids)
words = ("the a customer billing refund invoice card payment server crash urgent please help "
         "account").split()

def rss_kb():
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS"))

measured = threading.Barrier(int(sys.argv[3]) + 1)
done = threading.Barrier(int(sys.argv[3]) + 1)


def work(seed):
    rng = random.Random(seed)
    for _ in range(40000 // n_threads):
        encode(" ".join(rng.choice(words) for _ in range(rng.randint(10, 60)))
               + " %d %s" % (rng.randrange(10 ** 9),
                             "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(8))))
    done.wait()  # alive until measured: a thread's cache is freed when the thread ends
    measured.wait()


n_threads = int(sys.argv[3])
before = rss_kb()
threads = [threading.Thread(target=work, args=(i,)) for i in range(n_threads)]
for t in threads:
    t.start()
done.wait()
growth = rss_kb() - before
measured.wait()
for t in threads:
    t.join()
print(json.dumps({"growth_kb": growth}))
"""


def _growth(which: str, threads: int) -> int:
    env = dict(os.environ, RAYON_NUM_THREADS="2", TOKENIZERS_PARALLELISM="true")
    out = subprocess.run([sys.executable, "-c", CHILD, str(TOKENIZER), which, str(threads)],
                         env=env,
                         cwd=str(ROOT), capture_output=True, text=True, timeout=300, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])["growth_kb"]


@pytest.mark.slow  # two fresh processes tokenize on 32 threads each
@pytest.mark.timeout(600)  # its own: over a minute on a shared machine
def test_tokenizing_on_32_threads_costs_about_what_2_do():
    """What 30 more tokenizing threads add to RSS: kime's tokenizer against the library's own
    `encode` (measured on a 2-core Zen: about 8 MB against 38 MB)."""
    raw = _growth("raw", 32) - _growth("raw", 2)
    ours = _growth("kime", 32) - _growth("kime", 2)
    assert ours < raw / 3, ("30 more threads cost kime's tokenizer %d kB, the library's own "
                            "encode %d kB" % (ours, raw))
