"""kime's tool selector (`kime.integrations.tools`) against laya 0.4.15's.

- Every case of `tests/goldens/integrations_tools.json` (recorded by `tools/goldens_tools.py`
  from `tools_cases.py`) replayed on kime agents, a kime Router, the same stub server and a real
  `kime serve` over a Router on loopback: the selected tool, its confidence and probabilities,
  the raw decision, the reason and every refusal as laya's, numbers within 1e-4; where laya's
  answer is a fault (`laya_fault`), what kime does instead.
- A bearer key on `kime serve`; `as_runnable` without LangChain; the constructor's signature as
  laya's; properties: any tool reads as a name and description, and any decision body either
  selects, falls back or raises one of the selector's own errors.
"""
from __future__ import annotations

import inspect
import json
import re
import socket
import subprocess
import sys
import threading
import time
import warnings
from typing import Any, Dict, Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import kime
from kime.integrations import LayaLowConfidenceError, ToolRouteDecision
from kime.integrations import tools as mod

from .. import paths
from ..laya_replay import assert_same
from ..paths import GOLDENS
from . import tools_cases as tc

GOLDEN = json.loads((GOLDENS / "integrations_tools.json").read_text(encoding="utf-8"))
CASES = {case["id"]: case for case in GOLDEN["cases"]}
TINY = str(paths.TINY)
ML = str(paths.MULTILINGUAL_TINY)
MODELS = {"english": TINY, "multilingual": ML, "typed-decisions": TINY}
CLOSED = "http://127.0.0.1:1"
KEY = "tools-test-key"
NUMBER = re.compile(r"-?\d+\.\d+")


@pytest.fixture(scope="module")
def agents() -> Dict[str, Any]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return {"tiny": kime.load(TINY, device="cpu", threads=1),
                "ml": kime.load(ML, device="cpu", threads=1),
                "router": kime.Router(models=MODELS, device="cpu")}


class RouterServer:
    """`kime serve`'s app over a Router whose every model is `tiny` (what the goldens' laya serve
    ran), under uvicorn on a free loopback port; with `api_keys`, it asks for a bearer key."""

    def __init__(self, **settings: Any) -> None:
        import uvicorn

        from kime.serve import Settings, create_app

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            router = kime.Router(models=dict.fromkeys(MODELS, TINY), device="cpu")
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        self.url = "http://127.0.0.1:%d" % port
        app = create_app(router, Settings(model=[], workers=2, **settings))
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port,
                                                    log_level="error"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        end = time.monotonic() + 60
        while not self.server.started:
            if time.monotonic() > end:
                raise AssertionError("kime serve did not start")
            time.sleep(0.02)

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=30)


@pytest.fixture(scope="module")
def urls() -> Iterator[Dict[str, str]]:
    """The stub server and `kime serve` over a Router on loopback."""
    pytest.importorskip("uvicorn", reason="kime serve needs its extra: pip install 'kime[serve]'")
    serve = RouterServer()
    stub = tc.StubServer()
    try:
        yield {"<stub>": stub.url, "<serve>": serve.url, "<closed>": CLOSED}
    finally:
        stub.stop()
        serve.stop()


def _scrub(value: Any, urls: Dict[str, str]) -> Any:
    text = json.dumps(value, ensure_ascii=False).replace(ML, "<ml>").replace(TINY, "<tiny>")
    for name in ("<stub>", "<serve>", "<closed>"):
        text = text.replace(urls[name], name)
    return json.loads(text)


def _same_reason(ours: str, theirs: str) -> None:
    """The same words, and each number (printed to three places from a decision that agrees to
    1e-4) within one unit of the third place."""
    assert NUMBER.split(ours) == NUMBER.split(theirs), (ours, theirs)
    for a, b in zip(NUMBER.findall(ours), NUMBER.findall(theirs)):
        assert abs(float(a) - float(b)) <= 1e-3 + 1e-9, (ours, theirs)


def _play(case: Dict[str, Any], agents: Dict[str, Any], urls: Dict[str, str]) -> Dict[str, Any]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return {"result": _scrub(tc.run_case(mod, agents, case, urls), urls), "error": None}
        except Exception as exc:
            error = _scrub(tc.error_of(exc), urls)
            # kime's refusals of bad arguments are `kime.InvalidRequest`, a ValueError
            names = [k.__name__ for k in type(exc).__mro__]
            return {"result": None, "error": error, "kinds": names}


def _same(ours: Dict[str, Any], case: Dict[str, Any]) -> None:
    theirs = case["result"]
    if case["error"]:
        assert ours["error"] is not None, ours["result"]
        error = dict(ours["error"])
        _same_reason(error.pop("message"), case["error"]["message"])
        assert case["error"]["type"] in ours["kinds"], (ours["kinds"], case["error"])
        error["type"] = case["error"]["type"]
        assert_same(error, {k: v for k, v in case["error"].items() if k != "message"})
        return
    assert ours["error"] is None, ours["error"]
    mine = dict(ours["result"])
    if "reason" in theirs:
        _same_reason(mine.pop("reason"), theirs["reason"])
    assert_same(mine, {k: v for k, v in theirs.items() if k != "reason"})


FAULTS = {
    # a JSON list as `choice` is an unknown choice: raised, or the fallback
    "stub_choice-list": {"error": {"type": "RuntimeError", "message":
                                   "Unknown or missing tool decision from Laya: choice "
                                   "['tool_0'] not in candidate tools."}},
    "stub_choice-list_fallback": {"tool_name": "human", "is_fallback": True, "reason":
                                  "Unknown or missing tool decision ['tool_0']; routed to "
                                  "fallback tool"},
    # a choice answer without its distribution (none, or a list) is malformed: raised, or the
    # fallback (laya selects, reporting {})
    **{"stub_%s" % name: {"error": {"type": "RuntimeError", "message":
                                    "Malformed probability in decision answer from Laya: %s"
                                    % shown}}
       for name, shown in (("probabilities-list", "[0.5, 0.5]"),
                           ("only-entropy-confidence", "None"), ("low-confidence", "None"),
                           ("low_gated", "None"))},
    **{"stub_%s_fallback" % name: {"tool_name": "human", "is_fallback": True, "reason":
                                   "Malformed probability in decision answer; routed to "
                                   "fallback tool"}
       for name in ("probabilities-list", "only-entropy-confidence", "low-confidence",
                    "direct")},
    # a min_confidence map: the runner's verdict (`low_confidence`) and the threshold it applied
    "min_confidence_map_flagged": {"error": {"type": "LayaLowConfidenceError", "message":
                                             "Laya tool selection confidence 0.424 is below "
                                             "threshold 0.99", "threshold": 0.99}},
    "min_confidence_map_bucket": {"tool_name": "human", "is_fallback": True, "reason":
                                  "Confidence 0.424 below threshold 0.99; routed to fallback "
                                  "tool"},
    "min_confidence_map_passes": {"tool_name": "tech", "is_fallback": False, "reason":
                                  "Selected tool 'tech' with confidence 0.424"},
}
"""What kime does where laya's recorded answer is a fault (`laya_fault` in the golden)."""


def test_the_goldens_cover_what_the_brief_asks() -> None:
    cases = GOLDEN["cases"]
    assert len(cases) >= 60
    assert {c["call"] for c in cases} == {"select", "aselect", "call", "runnable", "chain",
                                          "construct"}
    errors = {c["error"]["type"] for c in cases if c["error"]}
    assert {"ValueError", "RuntimeError", "LayaLowConfidenceError", "TypeError"} <= errors
    assert {c["id"] for c in cases if c.get("laya_fault")} == set(FAULTS)
    assert sum(1 for c in cases if "<serve>" in json.dumps(c["kwargs"])) >= 3
    assert {c["agent"] for c in cases} == {"tiny", "ml", "router", None}


@pytest.mark.parametrize("case_id", list(CASES))
def test_replays_laya(case_id: str, agents: Dict[str, Any], urls: Dict[str, str]) -> None:
    case = CASES[case_id]
    ours = _play(case, agents, urls)
    if case_id not in FAULTS:
        _same(ours, case)
        return
    expected = FAULTS[case_id]
    if "error" in expected:
        assert ours["error"] is not None, ours["result"]
        _same_reason(ours["error"]["message"], expected["error"]["message"])
        assert ours["error"]["type"] == expected["error"]["type"]
        if "threshold" in expected["error"]:
            assert ours["error"]["threshold"] == expected["error"]["threshold"]
        return
    assert ours["error"] is None, ours["error"]
    got = ours["result"]
    assert (got["tool_name"], got["is_fallback"]) == (expected["tool_name"],
                                                      expected["is_fallback"])
    _same_reason(got["reason"], expected["reason"])


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # the tiny checkpoint's temperatures
def test_a_bearer_key_reaches_kime_serve_and_a_wrong_one_is_its_401() -> None:
    pytest.importorskip("uvicorn", reason="kime serve needs its extra: pip install 'kime[serve]'")
    serve = RouterServer(api_keys=[KEY])
    try:
        tools = ["billing: payments and refunds", "tech: bugs and crashes"]
        good = mod.LayaToolSelector(tools, base_url=serve.url + "/", api_key=KEY)
        decision = good.select(tc.INVOICE)
        assert isinstance(decision, ToolRouteDecision) and not decision.is_fallback
        assert decision.raw_decision["routing"]["model"] in MODELS
        for key in (None, "wrong"):
            bad = mod.LayaToolSelector(tools, base_url=serve.url, api_key=key)
            with pytest.raises(RuntimeError, match=r"^Laya server error 401: .*bearer"):
                bad.select(tc.INVOICE)
    finally:
        serve.stop()


_NO_LANGCHAIN = """
import sys
sys.modules["langchain_core"] = None
import warnings; warnings.simplefilter("ignore")
import kime
from kime.integrations.tools import LayaToolSelector
sel = LayaToolSelector(["billing: payments", "tech: crashes"], agent=kime.load(%r, device="cpu"))
run = sel.as_runnable()
first = run.invoke("I want my money back")
chained = (run | (lambda d: d.tool_name) | str.upper).invoke("I want my money back")
print(type(run).__name__, first.tool_name, chained)
""" % (TINY,)


def test_as_runnable_without_langchain_invokes_and_chains() -> None:
    done = subprocess.run([sys.executable, "-c", _NO_LANGCHAIN], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    kind, name, chained = done.stdout.split()
    assert kind != "RunnableLambda" and chained == name.upper() and name in ("billing", "tech")


def test_as_runnable_with_langchain_is_a_runnable_lambda(agents: Dict[str, Any]) -> None:
    runnables = pytest.importorskip("langchain_core.runnables")
    run = mod.LayaToolSelector(["billing", "tech"], agent=agents["tiny"]).as_runnable()
    assert isinstance(run, runnables.RunnableLambda)
    assert run.invoke(tc.CRASH).tool_name in ("billing", "tech")


def test_the_signatures_are_layas() -> None:
    params = inspect.signature(mod.LayaToolSelector).parameters
    assert list(params)[:6] == ["tools", "instructions", "allow_direct_answer",
                                "direct_answer_description", "confidence_threshold",
                                "fallback_tool"]
    assert {"agent", "base_url", "api_key", "model", "max_len", "head_max_len", "lang",
            "min_confidence", "hooks", "on_predict_start", "on_predict_end", "hooks_raise",
            "hooks_timeout"} <= set(params)
    assert all(p.default is None for name, p in params.items()
               if name not in ("instructions", "allow_direct_answer",
                               "direct_answer_description"))
    assert issubclass(LayaLowConfidenceError, ValueError)
    assert mod.LayaLowConfidenceError is LayaLowConfidenceError


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner,
                                                                 max_size=3),
    max_leaves=8)


@given(json_values, st.integers(-3, 50))
def test_any_tool_reads_as_a_name_and_a_description(tool: Any, index: int) -> None:
    name, desc = mod.tool_metadata(tool, index)
    assert isinstance(name, str) and isinstance(desc, str)


class FixedBody:
    """A caller-supplied runner (laya takes any object with `predict`) answering one body."""

    def __init__(self, body: Any) -> None:
        self.body = body

    def predict(self, state: Any, questions: Dict[str, Any], **overrides: Any) -> Any:
        return self.body


answers = st.fixed_dictionaries({}, optional={
    "choice": st.sampled_from(["tool_0", "tool_1", "direct_answer", "nope"]) | json_values,
    "answer_confidence": st.floats(0, 1) | json_values,
    "confidence": st.floats(0, 1) | json_values,
    "probabilities": st.dictionaries(st.sampled_from(["tool_0", "tool_1", "x"]),
                                     st.floats(0, 1) | json_values, max_size=3) | json_values,
    "low_confidence": st.booleans() | json_values})
bodies = st.fixed_dictionaries({"answers": st.fixed_dictionaries({"tool_select": answers})
                                | json_values}) | json_values


@settings(max_examples=300, deadline=None)
@given(bodies, st.booleans(), st.none() | st.floats(0, 1))
def test_any_body_selects_falls_back_or_raises_the_selectors_own_error(
        body: Any, fallback: bool, threshold: Any) -> None:
    selector = mod.LayaToolSelector(["billing", "tech"], agent=FixedBody(body),
                                    fallback_tool="human" if fallback else None,
                                    confidence_threshold=threshold)
    try:
        decision = selector.select("anything")
    except LayaLowConfidenceError as e:
        assert not fallback and isinstance(e.confidence, float)
        return
    except RuntimeError as e:
        assert not fallback and "from Laya" in str(e)
        return
    assert decision.is_fallback or decision.tool_name in ("billing", "tech")
    assert isinstance(decision.confidence, float) and all(
        isinstance(v, float) for v in decision.probabilities.values())
    if not decision.is_fallback and threshold is not None:
        assert decision.confidence >= threshold
