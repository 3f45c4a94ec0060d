"""Record what Laya 0.4.15's `OptionStabilityHook` and its helpers return:
`tests/goldens/stability.json`. Run ONLY with the oracle environment (the real laya and torch),
like `tools/make_goldens.py`:

    .oracle/bin/python tools/goldens_stability.py

The cases and the runner live in `tests/laya/stability_cases.py`, which imports neither library,
so kime's test (`tests/laya/test_stability.py`) plays exactly these calls: predicts with the hook
over choice questions of every shape (dict and list criteria, one option, over 26 options,
over `rename_max_options`, descriptions None / empty / blank), each `variants` preset and
explicit lists, every `probes` spelling, `n_shuffles` 0..3, `relabel=False`, seeds given and
absent, a batch of states (seeded 'batch'), thresholds set and None, `option_layout` read from
`agent.config` (parallel, spelled oddly, unknown), `predict_batch`, a Router with the hook (its
own and per call), on both committed checkpoints; `make_variants`, `decide_reliability` and
`calibrate_reliability` on fixed inputs; and every constructor refusal.

Each case is written with `result` (or null), `error` (`{"type", "message"}` or null) and
`warnings` (the messages raised). Checkpoint paths are written `<tiny>` and `<ml>`.
"""
from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path
from typing import Any, Dict, List

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.laya.stability_cases import cases, run_case  # noqa: E402  (needs ROOT on the path)

GOLDENS = ROOT / "tests" / "goldens"
OUT = GOLDENS / "stability.json"
TINY = str(GOLDENS / "checkpoints" / "tiny")
ML = str(GOLDENS / "checkpoints" / "multilingual-tiny")
MODELS = {"english": TINY, "multilingual": ML, "typed-decisions": TINY}


def scrub(value: Any) -> Any:
    """Checkpoint paths as `<tiny>` / `<ml>`, so the file does not depend on the checkout."""
    text = json.dumps(value, ensure_ascii=False).replace(ML, "<ml>").replace(TINY, "<tiny>")
    return json.loads(text)


def record(laya: Any, agents: Dict[str, Any], case: Dict[str, Any]) -> Dict[str, Any]:
    def make_router(hooks: List[Any]) -> Any:
        return laya.Router(models=MODELS, device="cpu", hooks=hooks)

    out = dict(case, result=None, error=None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            out["result"] = scrub(run_case(laya.hooks, case, agents, make_router))
        except (TypeError, ValueError) as exc:
            out["error"] = {"type": type(exc).__name__, "message": str(exc)}
    out["warnings"] = [str(w.message) for w in caught
                       if not issubclass(w.category, (DeprecationWarning, FutureWarning))]
    return out


def main() -> int:
    import laya
    import laya.hooks

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        agents = {"tiny": laya.Agent(TINY, device="cpu"),
                  "multilingual-tiny": laya.Agent(ML, device="cpu")}
    recorded = [record(laya, agents, case) for case in cases(list(agents))]
    data = {"laya_version": laya.__version__, "cases": recorded}
    OUT.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    errors = sum(1 for c in recorded if c["error"])
    print("wrote %s: %d cases, %d refusals" % (OUT.relative_to(ROOT), len(recorded), errors))
    return 0


if __name__ == "__main__":
    sys.exit(main())
