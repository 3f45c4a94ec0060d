"""Record what laya 0.4.15's tool selector (`laya.integrations.tools`: `LayaToolSelector`,
`ToolRouteDecision`) answers: `tests/goldens/integrations_tools.json`. Run ONLY with the oracle
environment (the real laya and torch, fastapi and uvicorn for laya serve):

    .oracle/bin/python tools/goldens_tools.py

The cases and their runner are `tests/integrations/tools_cases.py`, which imports neither
library, so kime's test plays exactly these calls. The agents are laya's own: `Agent` on the
committed `tiny` and `multilingual-tiny` checkpoints and a `Router` over both. `<stub>` is a
loopback server answering fixed malformed bodies, `<serve>` laya serve under uvicorn on loopback
(a Router whose every model is `tiny`), `<closed>` a port nothing listens on.

Each case is written with `result` (or null) and `error` (`{"type", "message"}`, plus
`confidence`/`threshold` for `LayaLowConfidenceError`, or null). Checkpoint paths are written
`<tiny>` / `<ml>`, URLs `<stub>` / `<serve>` / `<closed>`.
"""
from __future__ import annotations

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

from tests.integrations import tools_cases as tc  # noqa: E402  (needs ROOT on the path)

GOLDENS = ROOT / "tests" / "goldens"
OUT = GOLDENS / "integrations_tools.json"
TINY = str(GOLDENS / "checkpoints" / "tiny")
ML = str(GOLDENS / "checkpoints" / "multilingual-tiny")
MODELS = {"english": TINY, "multilingual": ML, "typed-decisions": TINY}
CLOSED = "http://127.0.0.1:1"


def scrub(value: Any, urls: Dict[str, str]) -> Any:
    """Checkpoint paths and loopback URLs as placeholders, so the file is the same each run."""
    text = json.dumps(value, ensure_ascii=False).replace(ML, "<ml>").replace(TINY, "<tiny>")
    for name in ("<stub>", "<serve>", "<closed>"):
        text = text.replace(urls[name], name)
    return json.loads(text)


def record(play: Callable[[], Any], urls: Dict[str, str], case: Dict[str, Any]) -> Dict[str, Any]:
    out = dict(case, result=None, error=None)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            out["result"] = scrub(play(), urls)
        except Exception as exc:  # every refusal is recorded, whatever its type
            out["error"] = scrub(tc.error_of(exc), urls)
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
    import laya.integrations.tools as mod

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        agents = {"tiny": laya.Agent(TINY, device="cpu"), "ml": laya.Agent(ML, device="cpu"),
                  "router": laya.Router(models=MODELS, device="cpu")}
    stub = tc.StubServer()
    server, serve_url = start_laya_serve(laya)
    urls = {"<stub>": stub.url, "<serve>": serve_url, "<closed>": CLOSED}
    try:
        recorded = [record(lambda c=case: tc.run_case(mod, agents, c, urls), urls, case)
                    for case in tc.cases()]
    finally:
        stub.stop()
        server.should_exit = True
    data = {"laya_version": laya.__version__, "cases": recorded}
    OUT.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    errors = sum(1 for c in recorded if c["error"])
    print("wrote %s: %d cases, %d refusals" % (OUT.relative_to(ROOT), len(recorded), errors))
    return 0


if __name__ == "__main__":
    sys.exit(main())
