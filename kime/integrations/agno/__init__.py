"""Laya 0.4.15's agno integration on kime (`kime.integrations.agno` is `laya.integrations.agno`):
`LayaAgnoRouter` and its `AgnoRouteDecision` (`router`), `LayaAgnoGuardrail` and
`LayaAgnoGuardrailError` (`guardrail`), and what they read off agno objects (`members`).
Importing this costs no agno import; constructing either class checks that agno is installed
and names `pip install 'kime[agno]'` when it is not.

    from agno.agent import Agent
    from agno.team import Team
    import kime
    from kime.integrations.agno import LayaAgnoRouter

    team = Team(members=[Agent(name="Coder", role="Writes code"),
                         Agent(name="Writer", role="Drafts prose")], mode="route")
    router = LayaAgnoRouter(agent=kime.load("laya"))   # or base_url="http://host:8000"
    decision = router.route_team("Reverse a string in Python", team)
    decision.agent, decision.confidence
"""
from __future__ import annotations

from .guardrail import LayaAgnoGuardrail, LayaAgnoGuardrailError
from .router import AgnoRouteDecision, LayaAgnoRouter

__all__ = ["AgnoRouteDecision", "LayaAgnoRouter", "LayaAgnoGuardrail", "LayaAgnoGuardrailError"]
