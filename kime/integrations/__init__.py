"""Laya 0.4.15's framework integrations on kime (`kime.integrations` is `laya.integrations`).

The shared core (kime's one copy of what laya repeats per framework): `caller` (the controls
every class takes, and who answers with which `CallOptions`: a kime Agent or Router, the default
Router, or a server through `kime.client.Client`), `reading` (`pick` and `screen`: a reply read
fail closed), `errors`. Each framework module is an adapter over them: text in, one call, the
framework's type out. `langchain`, `llamaindex`, `crewai`, `agno` and `tools` import their
framework only when used, and say which extra to install (`pip install 'kime[langchain]'`, ...)
when it is missing. Every name of laya's
`integrations.__all__` resolves here on first use, so `import kime.integrations` pays for none.
"""
from __future__ import annotations

import importlib
from typing import Any, Dict, List, Tuple

_LAZY: Dict[str, Tuple[str, str]] = {
    **{name: ("langchain", name) for name in (
        "LayaRouter", "LayaGuardrail", "LayaGuardrailError", "LayaTriage", "LayaEvaluator",
        "LayaDecision")},
    **{name: ("llamaindex", name) for name in (
        "LayaSingleSelector", "LayaMultiSelector", "LayaQueryRouter")},
    **{name: ("crewai", name) for name in (
        "LayaCrewRouter", "LayaTaskGuard", "LayaTaskGuardError", "CrewRouteDecision")},
    **{name: ("agno", name) for name in (
        "AgnoRouteDecision", "LayaAgnoRouter", "LayaAgnoGuardrail", "LayaAgnoGuardrailError")},
    **{name: ("tools", name) for name in ("LayaToolSelector", "ToolRouteDecision")},
    "LayaLowConfidenceError": ("errors", "LayaLowConfidenceError"),
}
"""Each exported name -> (module under kime.integrations, attribute)."""

__all__ = [
    "LayaRouter", "LayaGuardrail", "LayaGuardrailError", "LayaTriage", "LayaEvaluator",
    "LayaDecision", "LayaSingleSelector", "LayaMultiSelector", "LayaQueryRouter", "LayaCrewRouter",
    "LayaTaskGuard", "LayaTaskGuardError", "CrewRouteDecision", "AgnoRouteDecision",
    "LayaAgnoRouter", "LayaAgnoGuardrail", "LayaAgnoGuardrailError", "LayaToolSelector",
    "ToolRouteDecision", "LayaLowConfidenceError",
]


def __getattr__(name: str) -> Any:
    try:
        module, attr = _LAZY[name]
    except KeyError:
        raise AttributeError("module 'kime.integrations' has no attribute %r" % name) from None
    value = getattr(importlib.import_module("%s.%s" % (__name__, module)), attr)
    globals()[name] = value
    return value


def __dir__() -> List[str]:
    return sorted(set(globals()) | set(__all__))
