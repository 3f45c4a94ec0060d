"""What the agno router and guardrail share: the check that agno is installed, and the per-call
controls both take (laya 0.4.15 lists the same fifteen on each) with the one decision call that
forwards them to `kime.integrations.runner.execute_decision`."""
from __future__ import annotations

from typing import Any, Dict, Optional

from ..runner import execute_decision

EXTRA = "pip install 'kime[agno]'"

CONTROLS = ("agent", "base_url", "api_key", "model", "max_len", "head_max_len", "lang",
            "min_confidence", "task", "lang_guess", "hooks", "on_predict_start",
            "on_predict_end", "hooks_raise", "hooks_timeout")
"""The constructor arguments both classes keep as attributes and pass to every decision."""


def require_agno() -> None:
    """Raise ImportError naming the extra when agno is not installed.

    Only the top-level package is imported (about half a second less than `agno.agent`):
    the integration reads agno objects by their attributes and never needs agno's classes.
    """
    try:
        import agno  # noqa: F401
    except ImportError as exc:
        raise ImportError("kime's agno integration needs the agno package: %s" % EXTRA) from exc


class Controlled:
    """Holds the per-call controls (`CONTROLS`) and runs one decision with them."""

    base_url: Optional[str]
    last_decision: Optional[Dict[str, Any]]

    def _keep_controls(self, values: Dict[str, Any]) -> None:
        for name in CONTROLS:
            setattr(self, name, values[name])
        self.last_decision = None

    def _decide(self, state: str, questions: Dict[str, Any]) -> Dict[str, Any]:
        """One decision on `agent`, the server at `base_url`, or the default Router; kept as
        `last_decision`."""
        res = execute_decision(state, questions, **{name: getattr(self, name) for name in CONTROLS})
        self.last_decision = res
        return res
