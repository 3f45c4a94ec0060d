"""`kime mcp`: laya-mcp-server's MCP tools on kime (laya 0.4.15's `laya/mcp/`), over the
official `mcp` SDK, answered in this process by a kime Router or by a laya-serve-compatible
server.

    validate.py  what a tool accepts, with laya's error codes and texts (`ToolError`)
    tools.py     laya_predict, laya_route, the batch tools, laya_decide, laya_predict_long
    wide.py      laya_shortlist and laya_tournament: choices of many options
    status.py    laya_status and laya_preset
    remote.py    RemoteRouter: routes here, answers over `POST /v1/systemone`
    runner.py    the Router (or Agent, or RemoteRouter) the settings describe, built on use
    server.py    the SDK's MCPServer with the ten tools, stdio or streamable HTTP + bearer keys

Only `server` imports the SDK (an ImportError naming `pip install 'kime[mcp]'` without it);
the tools run and are tested without it.
"""
from __future__ import annotations

__all__ = ["remote", "runner", "server", "status", "tools", "validate", "wide"]
