"""`kime mcp`: laya-mcp-server's ten tools on kime, held to laya 0.4.15's own answers
(`tests/goldens/mcp.json`, from `tools/goldens_mcp.py`).

- the tool functions in process, over a kime Router on the committed checkpoints: every
  recorded case, answers and refusals;
- `kime mcp` as a subprocess driven by the SDK's stdio client: every tool and the bad inputs,
  and a line no JSON-RPC parser takes (a lone surrogate escape) leaving the server serving;
- `kime mcp --transport http` behind a bearer key: answered with it, 401 without;
- remote mode against a real `kime serve` on loopback: answers equal the in-process ones, the
  tournament answers there too, shortlist and predict_long refuse, HTTP errors keep laya's codes.
"""
from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import warnings
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import pytest

pytest.importorskip("mcp", reason="kime mcp needs the MCP SDK: pip install 'kime[mcp]'")

import anyio
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

import kime
from kime.mcp import status, tools, wide
from kime.mcp.remote import RemoteRouter
from kime.mcp.validate import ToolError

from .. import paths
from ..golden_cases import assert_same
from . import mcp_cases as mc

FUNCTIONS = {"laya_status": status.laya_status, "laya_preset": status.laya_preset,
             "laya_shortlist": wide.laya_shortlist, "laya_tournament": wide.laya_tournament}
MODEL_ARGS = [a for name, source in mc.MODELS.items()
              for a in ("--model", "%s=%s" % (name, source))]
BASE_ARGS = ["-m", "kime.cli", "mcp", *MODEL_ARGS, "--device", "cpu", "--threads", "1",
             "--preload-models", "english,multilingual", "--log-level", "warning"]
KEY = "mcp-test-key"
SURROGATE_CALL = ('{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"laya_predict",'
                  '"arguments":{"state":{"text":"a\\ud800b"},"questions":{"q":{"type":"noul",'
                  '"instructions":"The customer is angry."}}}}}')
WIRE_SKIPS = {
    # The SDK's Python client cannot encode a lone surrogate; the raw-line test sends one.
    "lone_surrogate",
    # batch_size=0 is the tool's "unset" over the wire (laya-mcp-server reads it so too).
    "predict_batch_bad_size",
    # The SDK validates arguments in pydantic's lax mode, which reads True as 1 for a number.
    "bad_head_max_len_bool", "predict_batch_bad_timeout",
}
WIRE_COERCED = {"decide_bad_min_confidence": ("got -1", "got -1.0")}
"""Refusals whose value the SDK converted to the schema's type first (an int to a float)."""
SDK_REFUSED = {"bad_lang": "lang", "bad_lang_guess": "lang_guess",
               "route_batch_not_a_list": "requests"}
"""Arguments the SDK refuses against the tool's schema before the tool runs (as it does for
laya-mcp-server's identical schema): an error naming the argument, not the tool's JSON."""


def _env(**extra: str) -> Dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KIME_", "LAYA_"))}
    env.update(extra)
    return env


def run_case(router: Any, case: Dict[str, Any]) -> Tuple[Any, Any]:
    fn = FUNCTIONS.get(case["tool"]) or getattr(tools, case["tool"])
    try:
        return tools.run_tool(fn, router=router, **mc.expand(case["args"])), None
    except ToolError as exc:
        return None, exc.payload()


@pytest.fixture(scope="module")
def router():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        r = kime.Router(models=mc.MODELS, device="cpu", agent_kwargs={"threads": 1})
        r.preload(["english", "multilingual"])
    yield r
    r.unload()


@pytest.mark.parametrize("case", mc.CASES, ids=[c["id"] for c in mc.CASES])
def test_goldens_in_process(router, case):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result, error = run_case(router, case)
    mc.check(case, result, error)


def test_goldens_cover_every_tool_and_the_bad_inputs():
    assert {c["tool"] for c in mc.CASES} == set(tools_names())
    ids = {c["id"] for c in mc.CASES}
    assert {"lone_surrogate", "choice_300_options", "decide_free_string",
            "state_over_limit", "tournament_300"} <= ids
    assert sum(1 for c in mc.CASES if c["error"]) >= 30


def tools_names() -> List[str]:
    from kime.mcp.server import TOOL_NAMES

    return TOOL_NAMES


def test_presets_listing_is_laya_s():
    assert status.get_available_presets() == mc.GOLDEN["presets"]


@pytest.mark.slow  # more than a second and a half (CONTRIBUTING.md's fast tier)
def test_long_state_goes_to_predict_long_not_predict(router):
    state = {"text": "The order arrived late and the box was damaged. " * 2000}
    questions = mc.CASES[1]["args"]["questions"]
    with pytest.raises(ToolError) as info:
        tools.laya_predict(state, questions, router=router)
    assert info.value.code == "invalid_state" and "too large" in info.value.message
    out = tools.laya_predict_long(state, questions, window=100, router=router)
    assert out["windows"] > 100 and set(out["answers"]) == set(questions)


# --- over the wire ------------------------------------------------------------------------------

def _payload(result: Any) -> Tuple[Any, Any]:
    """(result, error) from a CallToolResult: the JSON text, or the tool error's JSON."""
    text = result.content[0].text
    if not result.is_error:
        return json.loads(text), None
    prefix = "Error executing tool "
    if text.startswith(prefix):
        text = text.split(": ", 1)[1]
    return None, json.loads(text)


async def _every_case(session: ClientSession) -> None:
    listed = await session.list_tools()
    assert sorted(t.name for t in listed.tools) == sorted(tools_names())
    for case in mc.CASES:
        if case["id"] in WIRE_SKIPS:
            continue
        result = await session.call_tool(case["tool"], mc.expand(case["args"]))
        if case["id"] in SDK_REFUSED:
            assert result.is_error and SDK_REFUSED[case["id"]] in result.content[0].text
            continue
        if case["id"] in WIRE_COERCED:
            old, new = WIRE_COERCED[case["id"]]
            case = dict(case, error=dict(case["error"], message=case["error"][
                "message"].replace(old, new)))
        mc.check(case, *_payload(result))


@pytest.mark.slow
def test_stdio_every_tool_and_bad_input():
    params = StdioServerParameters(command=sys.executable, args=BASE_ARGS, env=_env(),
                                   cwd=str(paths.ROOT))

    async def main() -> None:
        with open(os.devnull, "w") as quiet:
            async with stdio_client(params, errlog=quiet) as (read, write):
                async with ClientSession(read, write) as session:
                    await session.initialize()
                    await _every_case(session)

    anyio.run(main)


@pytest.mark.slow
def test_stdio_survives_a_line_no_parser_takes():
    proc = subprocess.Popen([sys.executable, *BASE_ARGS], cwd=str(paths.ROOT), env=_env(),
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL)
    try:
        def send(line: str) -> None:
            proc.stdin.write(line.encode("utf-8") + b"\n")
            proc.stdin.flush()

        send(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "raw", "version": "0"}}}))
        assert json.loads(proc.stdout.readline())["id"] == 1
        send(json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        send(SURROGATE_CALL)
        call = json.loads(SURROGATE_CALL.replace("\\ud800", "-"))
        call["id"] = 3
        send(json.dumps(call))
        reply = json.loads(proc.stdout.readline())
        assert reply["id"] == 3 and not reply["result"].get("isError")
        assert proc.poll() is None
    finally:
        proc.kill()
        proc.wait()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class HttpMcp:
    """`kime mcp --transport http` on a loopback port, with `KEY` in `LAYA_API_KEY`."""

    def __init__(self, *args: str, env: Optional[Dict[str, str]] = None):
        self.port = _free_port()
        self.url = "http://127.0.0.1:%d/mcp" % self.port
        self.proc = subprocess.Popen(
            [sys.executable, *BASE_ARGS, "--transport", "http", "--port", str(self.port), *args],
            cwd=str(paths.ROOT), env=_env(**(env or {})), stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL)
        end = time.monotonic() + 120
        while time.monotonic() < end:
            if self.post(b"{}")[0] is not None:
                return
            time.sleep(0.2)
        self.stop()
        raise RuntimeError("kime mcp --transport http did not come up")

    def post(self, raw: bytes, key: Optional[str] = None) -> Tuple[Optional[int], bytes]:
        req = urllib.request.Request(self.url, data=raw, method="POST", headers={
            "content-type": "application/json", "accept": "application/json, text/event-stream"})
        if key is not None:
            req.add_header("authorization", "Bearer " + key)
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()
        except OSError:
            return None, b""

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


async def _http_session(url: str, key: Optional[str], body: Any) -> None:
    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    headers = {"Authorization": "Bearer " + key} if key else {}
    async with httpx2.AsyncClient(headers=headers, timeout=120) as client:
        async with streamable_http_client(url, http_client=client) as (read, write, *_):
            async with ClientSession(read, write) as session:
                await session.initialize()
                await body(session)


@pytest.mark.slow
def test_http_with_and_without_the_key():
    server = HttpMcp(env={"LAYA_API_KEY": KEY})
    try:
        async def some_cases(session: ClientSession) -> None:
            for case in mc.CASES:
                if case["id"] in ("predict_english", "route_german", "choice_300_options",
                                  "decide_free_string", "state_over_limit", "tournament_40"):
                    mc.check(case, *_payload(await session.call_tool(case["tool"],
                                                                     mc.expand(case["args"]))))

        anyio.run(_http_session, server.url, KEY, some_cases)
        for key in (None, "wrong-key"):
            code, body = server.post(b'{"jsonrpc":"2.0","id":1,"method":"tools/list"}', key)
            assert code == 401, (key, code, body)
        code, body = server.post(SURROGATE_CALL.encode(), KEY)
        assert code == 400 and json.loads(body)["error"]["code"] == -32700
        assert server.proc.poll() is None
    finally:
        server.stop()


@pytest.mark.slow
def test_http_open_without_keys():
    server = HttpMcp()
    try:
        async def one(session: ClientSession) -> None:
            case = next(c for c in mc.CASES if c["id"] == "predict_german")
            mc.check(case, *_payload(await session.call_tool(case["tool"], case["args"])))

        anyio.run(_http_session, server.url, None, one)
    finally:
        server.stop()


# --- the server's tools on its event loop --------------------------------------------------------

def _settings(**extra: Any) -> Any:
    from kime.serve import Settings

    return Settings(model=["%s=%s" % item for item in mc.MODELS.items()], device="cpu",
                    threads=1, **extra)


def test_an_internal_error_is_logged_with_its_cause(caplog, tmp_path):
    """A tool's `internal_error` (kime's fault or the deployment's, not the client's) reaches
    the client as its message and the server's log with its traceback."""
    from mcp.server.mcpserver.exceptions import ToolError as SdkToolError

    from kime.mcp.runner import Runner
    from kime.mcp.server import build_server

    broken = _settings(preload_models=["english"]).model_copy(
        update={"model": ["english=%s" % (tmp_path / "missing")]})
    server = build_server(Runner(broken))
    case = next(c for c in mc.CASES if c["id"] == "predict_english")
    with caplog.at_level("ERROR", logger="kime.mcp"):
        with pytest.raises(SdkToolError) as info:
            asyncio.run(server.call_tool(case["tool"], mc.expand(case["args"])))
    assert '"error": "internal_error"' in str(info.value), str(info.value)
    (record,) = [r for r in caplog.records if r.name == "kime.mcp"]
    assert "laya_predict failed: router construction failed" in record.getMessage()
    assert record.exc_info is not None


# --- remote: a real kime serve on loopback -------------------------------------------------------

@pytest.fixture(scope="module")
def served(tmp_path_factory):
    pytest.importorskip("fastapi")
    from ..serve.test_server import KEYS
    from ..serve.test_server_router import NAMED, Serve

    srv = Serve(tmp_path_factory.mktemp("mcp-remote"), *NAMED)
    srv.key = KEYS[0]
    yield srv
    srv.stop()


def _served_fields(answers: Dict[str, Any]) -> Dict[str, Any]:
    """A served answer less laya serve's Jev additions (`x_jev_confidence`), which the server
    adds and the MCP tools pass on, as laya-mcp-server's remote mode does."""
    return {q: {k: v for k, v in a.items() if not k.startswith("x_")}
            for q, a in answers.items()}


def _same_answers(remote: Dict[str, Any], local: Dict[str, Any]) -> None:
    from ..laya_replay import assert_same

    assert_same(_served_fields(remote["answers"]), local["answers"])
    assert remote["routing"]["model"] == local["routing"]["model"]


@pytest.mark.slow
def test_remote_answers_as_in_process(served, router):
    remote = RemoteRouter("http://127.0.0.1:%d" % served.port, api_key=served.key)
    by_id = {c["id"]: c for c in mc.CASES}
    for cid in ("predict_english", "predict_german", "predict_pinned_alias", "predict_budgets",
                "predict_min_confidence", "preset_triage_moved", "decide_schema"):
        args = mc.expand(by_id[cid]["args"])
        fn = FUNCTIONS.get(by_id[cid]["tool"]) or getattr(tools, by_id[cid]["tool"])
        there, here = fn(router=remote, **args), fn(router=router, **args)
        if "answers" in here:
            _same_answers(there, here)
        else:
            assert there["values"] == here["values"]
        assert "device" not in there  # nothing answers in this process
    batch = tools.laya_predict_batch(by_id["predict_batch"]["args"]["requests"], router=remote)
    local = tools.laya_predict_batch(by_id["predict_batch"]["args"]["requests"], router=router)
    for a, b in zip(batch["requests"], local["requests"]):
        _same_answers(a, b)
    assert batch["model_counts"] == local["model_counts"]
    # laya refuses the tournament remotely; its rounds are ordinary calls, answered there
    args = mc.expand(by_id["tournament_40"]["args"])
    there, here = wide.laya_tournament(router=remote, **args), wide.laya_tournament(
        router=router, **args)
    assert there["tournament"] == here["tournament"]
    _same_answers(there, here)
    for fn, cid in ((wide.laya_shortlist, "shortlist_30"), (tools.laya_predict_long,
                                                            "predict_long")):
        with pytest.raises(ToolError) as info:
            fn(router=remote, **mc.expand(by_id[cid]["args"]))
        assert info.value.code == "unsupported_remote"
    state = status.laya_status(router=remote)
    assert state["mode"] == "remote" and state["server"]["status"] == "ok"
    assert sorted(state["loaded"]) == sorted(mc.MODELS)


@pytest.mark.slow
def test_remote_async_reaches_the_server_and_loads_nothing(served, router, monkeypatch):
    """The remote router is a Router that only routes, composed with the one HTTP client; it
    is not a Router. Its async answers reach the server (sync and batch alike), with the Hub
    offline and no checkpoint in this process, where laya's subclass ran the local pipeline and
    raised ModelNotFound for convaiinnovations/laya."""
    from kime.laya.decider import Decider
    from kime.laya.options import CallOptions

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    remote = RemoteRouter("http://127.0.0.1:%d" % served.port, api_key=served.key)
    assert not isinstance(remote, kime.Router) and isinstance(remote, Decider)
    case = next(c for c in mc.CASES if c["id"] == "predict_english")
    state, questions = case["args"]["state"], case["args"]["questions"]
    options = CallOptions(model="english")
    one = asyncio.run(remote.answer_async(state, questions, options))
    two = asyncio.run(remote.answer_batch_async([state, {"text": "Zweite Nachricht"}], questions,
                                                options))
    here = router.predict(state, questions, model="english")
    for there in (one, two[0], remote.answer(state, questions, options)):
        assert_same(_served_fields(there["answers"]), here["answers"])
        assert there["routing"]["model"] == "english"
    assert len(two) == 2 and remote.resident() == {}


def test_remote_errors_keep_laya_s_codes(served):
    by_id = {c["id"]: c for c in mc.CASES}
    args = mc.expand(by_id["predict_english"]["args"])
    cases = [(RemoteRouter("http://127.0.0.1:%d" % served.port, api_key="nope"), "unauthorized"),
             (RemoteRouter("http://127.0.0.1:%d" % _free_port(), timeout=5), "unreachable")]
    for remote, code in cases:
        with pytest.raises(ToolError) as info:
            tools.laya_predict(router=remote, **args)
        assert info.value.code == code, info.value.message
    # a body laya serve refuses (too many options for one pass) is the caller's invalid_request
    remote = RemoteRouter("http://127.0.0.1:%d" % served.port, api_key=served.key)
    with pytest.raises(ToolError) as info:
        tools.run_tool(tools.laya_predict, router=remote, **mc.expand(
            by_id["choice_300_options"]["args"]))
    assert info.value.code == "invalid_request" and "too many choice options" in \
        info.value.message
    state = status.laya_status(router=cases[1][0])
    assert state["server"] is None and "server_error" in state


@pytest.mark.slow
def test_remote_over_stdio_with_laya_s_environment(served):
    env = _env(LAYA_BASE_URL="127.0.0.1:%d" % served.port, LAYA_API_KEY=served.key)
    params = StdioServerParameters(command=sys.executable, args=["-m", "kime.cli", "mcp"],
                                   env=env, cwd=str(paths.ROOT))
    by_id = {c["id"]: c for c in mc.CASES}

    async def main() -> None:
        with open(os.devnull, "w") as quiet:
            async with stdio_client(params, errlog=quiet) as (read, write):
                async with ClientSession(read, write) as session:
                    await session.initialize()
                    result, error = _payload(await session.call_tool("laya_status", {}))
                    assert error is None and result["mode"] == "remote"
                    case = by_id["predict_german"]
                    result, error = _payload(await session.call_tool(case["tool"],
                                                                     case["args"]))
                    assert error is None
                    _same_answers(mc.without_timings(result), mc.unscrub(case["result"]))
                    _, error = _payload(await session.call_tool(
                        "laya_predict_long", mc.expand(by_id["predict_long"]["args"])))
                    assert error["error"] == "unsupported_remote"

    anyio.run(main)


def test_missing_sdk_names_the_extra(tmp_path: Path):
    # A copy of the package's import line where `mcp` cannot be imported.
    code = ("import sys; sys.modules['mcp'] = None\n"
            "try:\n    import kime.mcp.server\nexcept ImportError as e:\n    print(e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=str(paths.ROOT), env=_env())
    assert "pip install 'kime[mcp]'" in out.stdout, out.stderr


@pytest.mark.parametrize("argv, env, said", [
    (["--base-url", "ftp://example.com"], {}, "base_url must be an HTTP(S) server URL"),
    (["--max-state-chars", "-3"], {}, "invalid flag value '-3' for max_state_chars"),
    ([], {"KIME_MCP_MAX_STATE_CHARS": "many"}, "invalid KIME_MCP_MAX_STATE_CHARS 'many'"),
    (["--threads", "-1"], {}, "invalid flag value '-1' for threads"),
])
def test_console_script_refuses_bad_settings(argv, env, said, monkeypatch, capsys):
    from kime.cli.mcp import main

    for name in list(os.environ):
        if name.startswith(("KIME_", "LAYA_")):
            monkeypatch.delenv(name)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert main(argv) == 2
    assert said in capsys.readouterr().err
