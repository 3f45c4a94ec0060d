"""Record where laya 0.4.15's integrations fail open (`laya_fault`): its guards and pickers of
every framework (LangChain, agno, CrewAI, LlamaIndex, the tool selector) against a
laya-serve-compatible stub server on loopback that answers malformed replies:
`tests/goldens/integrations_faults.json`. Run ONLY with the oracle environment (the real laya,
langchain-core, agno and llama-index-core; laya's CrewAI module runs on its own stand-ins
without crewai, and reads a reply exactly as with it), like `tools/make_goldens.py`:

    .oracle/bin/python tools/goldens_faults.py

No model runs: every answer is the stub's. The cases and the runner are
`tests/integrations/faults_cases.py`, shared with kime's replay (`test_faults.py`), which
shows kime blocking or refusing each.
"""
from __future__ import annotations

import json
import os
import sys
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "integrations"))
import faults_cases as fc  # noqa: E402  (no kime import: the oracle never loads kime)

OUT = ROOT / "tests" / "goldens" / "integrations_faults.json"


def main() -> int:
    for key in [k for k in os.environ if k.startswith("LAYA_")]:
        del os.environ[key]
    os.environ["AGNO_TELEMETRY"] = "false"
    import laya

    stub = fc.StubServer()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            recorded = [dict(case, outcome=fc.run_case("laya", case, stub.url))
                        for case in fc.cases()]
    finally:
        stub.stop()
    for case in recorded:
        print(case["id"], "error" if "error" in case["outcome"] else "passed", flush=True)
    data = {"laya_version": laya.__version__, "bodies": fc.BODIES, "cases": recorded}
    OUT.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print("wrote %s: %d cases, %d laya faults" % (OUT.relative_to(ROOT), len(recorded),
                                                  sum("laya_fault" in c for c in recorded)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
