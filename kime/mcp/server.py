"""`kime mcp`: laya-mcp-server's ten tools on the official `mcp` SDK (`MCPServer`), over stdio
or streamable HTTP, answered by a `kime.mcp.runner.Runner` (a kime Router in this process, or
a server at `--base-url`).

Each tool keeps laya-mcp-server's name, arguments (types and defaults: they are the JSON Schema
a client sees) and result: the tool function's dict as indented JSON text. A refusal is the
SDK's tool error (`isError`) whose text is `{"error": code, "message": ...}`, so a client
reads one shape for every failure and the server never goes down on a bad argument.

Over HTTP the tools sit behind the SDK's bearer authentication when keys are configured (the
keys `kime serve` takes: `--api-key-file`, `KIME_API_KEY`, `LAYA_API_KEY`, the TOML file's
`api_key`); a request without a valid key gets 401. Without keys the endpoint is open, as
`kime serve` is.
"""
from __future__ import annotations

import asyncio
import hmac
import inspect
import json
import logging
import sys
from typing import Any, Callable, Dict, List, Optional, Sequence

try:
    from mcp.server.auth.provider import AccessToken
    from mcp.server.auth.settings import AuthSettings
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError as SdkToolError
except ImportError as exc:  # the mcp extra is not installed
    # name= keeps the missing module's name, so a caller can tell an absent extra from a bug.
    raise ImportError("kime mcp needs the MCP SDK (mcp>=2.3): pip install 'kime[mcp]' (%s)"
                      % exc, name=exc.name) from exc

from .._version import __version__
from . import status, tools, wide
from .runner import Runner
from .validate import ToolError, batch_item_keys

_log = logging.getLogger("kime.mcp")

_DECISIONS = (" Typed decisions only: choice (a finite label set), score (an ordinal rubric), "
              "noul (a calibrated probability that a statement is true); no text is generated. "
              "Not for open questions, summaries or code. A choice of more than 20 options "
              "wants laya_shortlist or laya_tournament.")
_MODEL = (" model: null, omitted or 'auto' lets the router choose; any other value names a "
          "checkpoint (aliases and any casing accepted; routing.model reports the canonical "
          "name).")
_CONTROLS = (" task: choose a checkpoint by the work ('typed_decisions'); refused with a pinned "
             "model. lang: a language code: routes non-English text and picks that language's "
             "calibration. lang_guess: a soft language hint for routing only; refused with a "
             "pinned model. max_len / head_max_len: positive token budgets for this call "
             "(head_max_len is what the question and options share). min_confidence: in "
             "[0, 1]; an answer less confident than this is flagged low_confidence.")


class BearerKeys:
    """The SDK's token verifier over fixed bearer keys, compared in constant time."""

    def __init__(self, keys: Sequence[str]):
        self.keys = [k.encode("utf-8") for k in keys if k]

    async def verify_token(self, token: str) -> Optional[AccessToken]:
        given = token.encode("utf-8", errors="replace")
        ok = False
        for key in self.keys:
            ok |= hmac.compare_digest(given, key)
        return AccessToken(token=token, client_id="kime-mcp", scopes=[]) if ok else None


def build_server(runner: Runner, keys: Sequence[str] = (), issuer_url: Optional[str] = None,
                 log_level: str = "warning") -> MCPServer:
    """The MCP server with the ten tools over `runner`; `keys` (with `issuer_url`, the
    server's own URL) put the streamable HTTP endpoint behind bearer authentication.
    `log_level` is the SDK's (uvicorn's names; `trace` reads as debug)."""
    auth = verifier = None
    if keys:
        auth = AuthSettings(issuer_url=issuer_url or "http://127.0.0.1",  # type: ignore[arg-type]
                            resource_server_url=None)
        verifier = BearerKeys(keys)
    level = log_level.strip().upper().replace("TRACE", "DEBUG")
    server: MCPServer = MCPServer(
        "laya", version=__version__, auth=auth, token_verifier=verifier,
        log_level=level if level in ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
        else "WARNING")  # type: ignore[arg-type]
    _register(server, runner)
    return server


def _dump(payload: Any) -> str:
    return json.dumps(payload, ensure_ascii=False, indent=2)


async def _call(runner: Runner, fn: Callable[..., Any], limit: bool = True, **kwargs: Any) -> str:
    """Run a tool on a worker thread (a checkpoint load or a forward pass never stalls the
    event loop, so other sessions keep being served; the SDK would move a sync tool off the
    loop too, and this does not rest on it), over the runner's router/agent; any
    failure becomes the SDK's tool error carrying `{"error", "message"}`, the only kind whose
    text the SDK passes on. An `internal_error` is logged with its cause: it is kime's bug or
    the server's, not the client's, and the client sees only its message."""
    return await asyncio.to_thread(_run, runner, fn, limit, kwargs)


def _run(runner: Runner, fn: Callable[..., Any], limit: bool, kwargs: Dict[str, Any]) -> str:
    try:
        if fn is status.laya_status:
            router, agent = runner.get() if runner.remote else (runner.built or (None, None))
            return _dump(status.laya_status(router=router, agent=agent, preload=runner.preload))
        router, agent = runner.get()
        if limit:
            kwargs["max_state_chars"] = runner.max_state_chars
        if agent is not None and "agent" in inspect.signature(fn).parameters:
            kwargs["agent"] = agent
        return _dump(tools.run_tool(fn, router=router, **kwargs))
    except ToolError as exc:
        if exc.code == "internal_error":
            _log.error("kime mcp: %s failed: %s", fn.__name__, exc.message,
                       exc_info=exc.__cause__ or exc)
        raise SdkToolError(_dump(exc.payload())) from exc


def _register(server: MCPServer, runner: Runner) -> None:
    presets = status.get_available_presets()

    @server.tool(name="laya_status", description=(
        "Where each loaded checkpoint runs (or, before any is loaded, the preferred device, "
        "flagged device_is_preference), what is loaded, and the package versions. With "
        "--base-url: that server's /health."))
    async def laya_status() -> str:
        return await _call(runner, status.laya_status, limit=False)

    @server.tool(name="laya_route", description=(
        "Which checkpoint would answer (english, multilingual, typed-decisions or one "
        "registered), and why, with no forward pass: a laya_predict call's model/task/lang/"
        "lang_guess here give the routing it reports." + _DECISIONS + _CONTROLS))
    async def laya_route(state: dict, questions: dict, model: str | None = None,
                         task: str | None = None, lang: str | None = None,
                         lang_guess: str | None = None) -> str:
        return await _call(runner, tools.laya_route, state=state, questions=questions,
                           model=model, task=task, lang=lang, lang_guess=lang_guess)

    @server.tool(name="laya_predict", description=(
        "Answer typed questions about a state in one forward pass. questions: {name: {type: "
        "'choice'|'score'|'noul', instructions, criteria?}}; a noul may rename its options "
        "with labels {false, true}; any type takes option_order (a permutation: slot s shows "
        "option option_order[s]). Returns the answers with confidence, the routing, the "
        "latency and the answering device." + _DECISIONS + _MODEL + _CONTROLS))
    async def laya_predict(state: dict, questions: dict, model: str | None = None,
                           task: str | None = None, lang: str | None = None,
                           lang_guess: str | None = None, max_len: int | None = None,
                           head_max_len: int | None = None,
                           min_confidence: float | None = None) -> str:
        return await _call(runner, tools.laya_predict, state=state, questions=questions,
                           model=model, task=task, lang=lang, lang_guess=lang_guess,
                           max_len=max_len, head_max_len=head_max_len,
                           min_confidence=min_confidence)

    @server.tool(name="laya_predict_batch", description=(
        "Answer many requests in one call: requests is a non-empty array of "
        + batch_item_keys() + ", questions as in laya_predict. Requests are routed, grouped "
        "by checkpoint and share forward passes where their questions match; max_len and "
        "head_max_len are per request. batch_size and hooks_timeout: 0 means unset. Returns "
        "the answers in input order with routing and device, model_counts and the batch's "
        "latency." + _DECISIONS))
    async def laya_predict_batch(requests: list, batch_size: int = 0,
                                 hooks_timeout: float | None = 0,
                                 min_confidence: float | None = None,
                                 sort_by_length: bool = False) -> str:
        # MCP clients send defaults eagerly: a numeric 0 (never False) means unset.
        return await _call(runner, tools.laya_predict_batch, requests=requests,
                           batch_size=_unset_zero(batch_size),
                           hooks_timeout=_unset_zero(hooks_timeout),
                           min_confidence=min_confidence, sort_by_length=sort_by_length)

    @server.tool(name="laya_route_batch", description=(
        "The checkpoint each request would go to, with no forward pass and no load: requests "
        "is a non-empty array of " + batch_item_keys(omit=("max_len", "head_max_len"))
        + ". Returns one {model, repo, reason} per request in order, and model_counts. "
        "hooks_timeout: a positive deadline for the Router's on_route hooks; 0 means unset."
        + _DECISIONS))
    async def laya_route_batch(requests: list, hooks_timeout: float = 0) -> str:
        return await _call(runner, tools.laya_route_batch, requests=requests,
                           hooks_timeout=_unset_zero(hooks_timeout))

    @server.tool(name="laya_shortlist", description=(
        "Narrow each wide choice to its k labels closest to the state (cosine of the answering "
        "checkpoint's own mean-pooled encoder vectors; nothing else is downloaded), then "
        "answer in one forward pass. Returns the answers and, per question, the kept labels, "
        "their scores, k, n and passthrough. A narrowed question cannot keep its "
        "option_order: it is dropped and named under option_order_dropped. In-process only."
        + _DECISIONS + _MODEL + _CONTROLS))
    async def laya_shortlist(state: dict, questions: dict, model: str | None = None, k: int = 20,
                             task: str | None = None, lang: str | None = None,
                             lang_guess: str | None = None, max_len: int | None = None,
                             head_max_len: int | None = None,
                             min_confidence: float | None = None) -> str:
        return await _call(runner, wide.laya_shortlist, state=state, questions=questions,
                           model=model, k=k, task=task, lang=lang, lang_guess=lang_guess,
                           max_len=max_len, head_max_len=head_max_len,
                           min_confidence=min_confidence)

    @server.tool(name="laya_tournament", description=(
        "Answer wide choices by balanced elimination, without embeddings: groups of at most "
        "group_size (>= 2, default 16) labels share one forward pass per round, the winners "
        "meet until they fit one group, then one final pass answers everything. Returns the "
        "answers, routing, latency_ms and per choice the finalists (labels), n and rounds; "
        "probabilities are over the finalists. A narrowed question's option_order is reported "
        "under option_order_dropped. Works with --base-url too (each round is one call)."
        + _DECISIONS + _MODEL + _CONTROLS))
    async def laya_tournament(state: dict, questions: dict, model: str | None = None,
                              group_size: int = 16, task: str | None = None,
                              lang: str | None = None, lang_guess: str | None = None,
                              max_len: int | None = None, head_max_len: int | None = None,
                              min_confidence: float | None = None) -> str:
        return await _call(runner, wide.laya_tournament, state=state, questions=questions,
                           model=model, group_size=group_size, task=task, lang=lang,
                           lang_guess=lang_guess, max_len=max_len, head_max_len=head_max_len,
                           min_confidence=min_confidence)

    @server.tool(name="laya_preset", description=(
        "Run one of Laya's built-in question sets: %s. Each reads one state field (%s); a "
        "state of a single string is put under it, a richer state goes as given. Aliases: %s."
        % (" | ".join("'%s'" % n for n in presets),
           ", ".join("'%s' reads `%s`" % (n, p["state_field"]) for n, p in presets.items()
                     if p.get("state_field")),
           ", ".join("'%s' is '%s'" % (a, n) for n, p in presets.items()
                     for a in p.get("aliases", [])))
        + _DECISIONS + _CONTROLS))
    async def laya_preset(preset: str, state: dict, task: str | None = None,
                          lang: str | None = None, lang_guess: str | None = None,
                          max_len: int | None = None, head_max_len: int | None = None,
                          min_confidence: float | None = None) -> str:
        return await _call(runner, status.laya_preset, preset=preset, state=state, task=task,
                           lang=lang, lang_guess=lang_guess, max_len=max_len,
                           head_max_len=head_max_len, min_confidence=min_confidence)

    @server.tool(name="laya_decide", description=(
        "Decide a JSON Schema's fields in one forward pass and return the values: each "
        "property an enum (choice), a boolean (noul) or an integer with integer minimum and "
        "maximum (score); free strings, arrays and nested objects are refused by path. "
        "Returns values, per-field confidence and probabilities, routing and latency. "
        "min_confidence: a field less confident than this comes back null in values."
        + _DECISIONS))
    async def laya_decide(state: dict, schema: dict, model: str | None = None,
                          min_confidence: float | None = None) -> str:
        return await _call(runner, tools.laya_decide, state=state, schema=schema, model=model,
                           min_confidence=min_confidence)

    @server.tool(name="laya_predict_long", description=(
        "Answer typed questions about a state longer than one window: it is scanned in "
        "overlapping windows in shared forward passes, and each question is answered from its "
        "deciding window (the strongest for noul, the most confident for choice and score), "
        "which each answer names. window / stride: positive token counts (default: the "
        "checkpoint's budget, half overlap). task / lang as in laya_predict. In-process only."
        + _DECISIONS + _MODEL))
    async def laya_predict_long(state: dict, questions: dict, model: str = "auto",
                                window: int | None = None, stride: int | None = None,
                                task: str | None = None, lang: str | None = None) -> str:
        return await _call(runner, tools.laya_predict_long, limit=False, state=state,
                           questions=questions, model=model, window=window, stride=stride,
                           task=task, lang=lang)


def _unset_zero(value: Any) -> Any:
    return None if not isinstance(value, bool) and value == 0 else value


TOOL_NAMES: List[str] = ["laya_status", "laya_route", "laya_predict", "laya_predict_batch",
                         "laya_route_batch", "laya_shortlist", "laya_tournament", "laya_preset",
                         "laya_decide", "laya_predict_long"]


def run(runner: Runner, transport: str = "stdio", host: str = "127.0.0.1", port: int = 8000,
        path: str = "/mcp", keys: Sequence[str] = (), log_level: str = "warning") -> None:
    """Serve until the client hangs up (stdio) or the process is stopped (HTTP). With
    preloading on, the checkpoints are built first; a failure is reported and retried on
    the first tool call."""
    if runner.remote:
        print("[kime mcp] answering from the server at %s" % runner.base_url, file=sys.stderr)
    elif runner.preload:
        try:
            runner.get()
        except ToolError as exc:
            print("[kime mcp] preload failed (will retry on demand): %s" % exc.message,
                  file=sys.stderr)
    try:
        if transport == "stdio":
            build_server(runner, log_level=log_level).run()
            return
        import uvicorn

        server = build_server(runner, keys, "http://%s:%d" % (host, port), log_level)
        app = server.streamable_http_app(streamable_http_path=path, host=host)
        uvicorn.run(app, host=host, port=port, log_level=log_level)
    finally:
        runner.close()


def main() -> None:
    """`laya-mcp-server` (`laya.mcp.server.main`; also `python -m kime.mcp.server`): the tools
    over stdio, configured by the environment alone, as laya's server is (`LAYA_MODELS`,
    `LAYA_BASE_URL`, `LAYA_DEVICE`, ...): `kime mcp` without flags. A setting the environment
    gets wrong ends the process with its message."""
    from ..serve.settings import ConfigError, load_settings
    from .runner import env_base_url, remote_key

    try:
        settings = load_settings({})
    except ConfigError as e:
        raise SystemExit(str(e)) from None
    base_url = env_base_url()
    runner = Runner(settings, base_url=base_url,
                    api_key=remote_key(settings) if base_url else None)
    run(runner, log_level=settings.log_level)


if __name__ == "__main__":
    main()
