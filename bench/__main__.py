"""`python -m bench`: see `bench/__init__.py`.

OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE slow a current OpenBLAS and are read when NumPy loads
it, so when either is set the bench starts itself again without them before importing NumPy.
"""
import os
import sys

from .peers import UNSET_ENV

if any(v in os.environ for v in UNSET_ENV) and not os.environ.get("KIME_BENCH_REEXEC"):
    env = {k: v for k, v in os.environ.items() if k not in UNSET_ENV}
    env["KIME_BENCH_REEXEC"] = ",".join(v for v in UNSET_ENV if v in os.environ)
    sys.stderr.write("[bench] restarting without %s\n" % env["KIME_BENCH_REEXEC"])
    sys.stderr.flush()
    os.execve(sys.executable, [sys.executable, "-m", "bench"] + sys.argv[1:], env)

from .run import main  # after the re-exec, so NumPy loads OpenBLAS without them

sys.exit(main())
