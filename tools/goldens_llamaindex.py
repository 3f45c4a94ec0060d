"""Record what laya 0.4.15's LlamaIndex integration (`LayaSingleSelector`, `LayaMultiSelector`,
`LayaQueryRouter`) answers: `tests/goldens/integrations_llamaindex.json`. Run ONLY with the
oracle environment (the real laya and torch, llama-index-core 0.14, fastapi and uvicorn):

    .oracle/bin/python tools/goldens_llamaindex.py

The cases and their runner are `tests/integrations/llamaindex_cases.py`, which imports neither
library, so kime's test plays exactly these calls. The agents are laya's own: `Agent` on the
committed `tiny` and `multilingual-tiny` checkpoints and a `Router` over both. `<stub>` is a
loopback server answering fixed malformed bodies, `<serve>` laya serve under uvicorn on
loopback (a Router whose every model is `tiny`), `<closed>` a port nothing listens on.

`signatures` holds each class's constructor parameters, in order, with their defaults' repr.
Each case is written with `result` (or null), `error` (`{"type", "message"}` or null). The
`engine` cases put the selectors under LlamaIndex's own `RouterQueryEngine`, where laya 0.4.15
fails (its stand-in `SelectorResult` has no `inds`): recorded as laya's error, with
`laya_fault` set, and beside it `selection`, what the same selector picks called directly (what
the engine must route by). Checkpoint paths are written `<tiny>` / `<ml>`, URLs `<stub>` / `<serve>`.
"""
from __future__ import annotations

import inspect
import json
import socket
import sys
import threading
import time
import warnings
from pathlib import Path
from typing import Any, Callable, Dict

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.integrations import llamaindex_cases as li  # noqa: E402  (needs ROOT on the path)

GOLDENS = ROOT / "tests" / "goldens"
OUT = GOLDENS / "integrations_llamaindex.json"
TINY = str(GOLDENS / "checkpoints" / "tiny")
ML = str(GOLDENS / "checkpoints" / "multilingual-tiny")
MODELS = {"english": TINY, "multilingual": ML, "typed-decisions": TINY}
CLOSED = "http://127.0.0.1:1"


def scrub(value: Any, urls: Dict[str, str]) -> Any:
    """Checkpoint paths and loopback URLs as placeholders, so the file is the same each run."""
    text = json.dumps(value, ensure_ascii=False).replace(ML, "<ml>").replace(TINY, "<tiny>")
    for name in ("<stub>", "<serve>"):
        text = text.replace(urls[name], name)
    return json.loads(text)


def record(play: Callable[[], Any], urls: Dict[str, str], case: Dict[str, Any]) -> Dict[str, Any]:
    out = dict(case, result=None, error=None)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            out["result"] = scrub(play(), urls)
        except Exception as exc:  # every refusal is recorded, whatever its type
            out["error"] = scrub({"type": type(exc).__name__, "message": str(exc)}, urls)
    return out


def start_laya_serve(laya: Any) -> Any:
    import uvicorn

    import laya.serve

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    router = laya.Router(models=dict.fromkeys(MODELS, TINY), device="cpu")
    server = uvicorn.Server(uvicorn.Config(laya.serve.create_app(router=router), host="127.0.0.1",
                                           port=port, log_level="error"))
    threading.Thread(target=server.run, daemon=True).start()
    end = time.monotonic() + 60
    while not server.started:
        if time.monotonic() > end:
            raise SystemExit("laya serve did not start")
        time.sleep(0.05)
    return server, "http://127.0.0.1:%d" % port


def main() -> int:
    import laya
    import laya.integrations.llamaindex as mod
    from llama_index.core import __version__ as llama_index_version
    from llama_index.core.schema import QueryBundle
    from llama_index.core.tools import ToolMetadata

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        agents = {"tiny": laya.Agent(TINY, device="cpu"), "ml": laya.Agent(ML, device="cpu"),
                  "router": laya.Router(models=MODELS, device="cpu")}
    stub = li.StubServer()
    server, serve_url = start_laya_serve(laya)
    urls = {"<stub>": stub.url, "<serve>": serve_url, "<closed>": CLOSED}
    try:
        recorded = [record(lambda c=case: li.run_case(mod, agents, c, urls, ToolMetadata,
                                                      QueryBundle), urls, case)
                    for case in li.cases()]
        engine = [record(lambda c=case: li.run_engine_case(mod, agents["tiny"], c), urls,
                         dict(case, laya_fault="laya's stand-in SelectorResult has no inds",
                              selection=li.engine_selection(mod, agents["tiny"], case,
                                                            ToolMetadata)))
                  for case in li.ENGINE_CASES]
    finally:
        stub.stop()
        server.should_exit = True
    signatures = {name: [[p.name, None if p.default is p.empty else repr(p.default)]
                         for p in inspect.signature(getattr(mod, name)).parameters.values()]
                  for name in ("LayaSingleSelector", "LayaMultiSelector", "LayaQueryRouter")}
    data = {"laya_version": laya.__version__, "llama_index_core_version": llama_index_version,
            "signatures": signatures, "cases": recorded, "engine": engine}
    OUT.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    errors = sum(1 for c in recorded if c["error"])
    print("wrote %s: %d cases, %d refusals, %d RouterQueryEngine cases (%d fail on laya)"
          % (OUT.relative_to(ROOT), len(recorded), errors, len(engine),
             sum(1 for c in engine if c["error"])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
