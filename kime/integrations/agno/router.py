"""`LayaAgnoRouter`: picks the agno team member that should answer a message in one decision
(a `choice` over the members), instead of a leader model's generated delegation; and
`AgnoRouteDecision`, what it returns. Laya 0.4.15's `laya.integrations.agno` is the spec:
arguments, defaults, the fallback and low-confidence rules, the reason strings and errors.
"""
from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any, Dict, Optional, Sequence

from ..caller import Controlled, takes_controls
from ..reading import choose
from .members import criteria, member_name, member_role, message_text, team_members

EXTRA = "pip install 'kime[agno]'"
DEFAULT_INSTRUCTIONS = "Which agent is best qualified to handle this task or message?"


@dataclass
class AgnoRouteDecision:
    """One routing decision.

    `agent` is the chosen candidate as given (an agno `Agent`, a dict, a string), `agent_index`
    its position, `name`/`role` as read from it, `confidence` the gate's number (the answer's
    `answer_confidence`, else its `confidence`; 0.0 when the reply gave none), `reason` one
    line saying why, and
    `raw_decision` the runner's or server's answer unchanged.
    """

    agent: Any
    agent_index: int
    name: str
    role: str
    confidence: float
    reason: str
    raw_decision: Dict[str, Any]


def require_agno() -> None:
    """Raise ImportError naming the extra when agno is not installed.

    Only the top-level package is imported (about half a second less than `agno.agent`):
    the integration reads agno objects by their attributes and never needs agno's classes.
    """
    try:
        import agno  # noqa: F401
    except ImportError as exc:
        raise ImportError("kime's agno integration needs the agno package: %s" % EXTRA) from exc


class LayaAgnoRouter(Controlled):
    """Route a message to one of an agno team's members in a single forward pass.

    Args:
        instructions: the `delegation` question asked about the message.
        confidence_threshold: below it (when > 0) the decision goes to `fallback_agent_index`,
            else raises `LayaLowConfidenceError` if `raise_on_low_confidence`, else stands.
        fallback_agent_index: the member chosen when confidence is under the threshold.
        raise_on_low_confidence: raise instead of accepting a low-confidence pick (a fallback,
            when set, wins).
        agent, base_url, api_key, model, max_len, ...: where the decision runs and its
            per-call options (`kime.integrations.caller`): `task`/`lang_guess` need a Router
            or a server, hooks a local runner.

    A reply that picks none of the members (or none at all) is refused, never read as the
    first member.
    """

    @takes_controls()
    def __init__(self, instructions: str = DEFAULT_INSTRUCTIONS,
                 confidence_threshold: float = 0.0, fallback_agent_index: Optional[int] = None,
                 raise_on_low_confidence: bool = False, *, controls: Dict[str, Any]):
        require_agno()
        self.instructions = instructions
        self.confidence_threshold = confidence_threshold
        self.fallback_agent_index = fallback_agent_index
        self.raise_on_low_confidence = raise_on_low_confidence
        self._keep_controls(controls)

    def route(self, message: Any, agents: Sequence[Any]) -> AgnoRouteDecision:
        """Route `message` (a string, an agno `RunResponse`/`Message`, a dict) to one of `agents`
        (agno `Agent`s or `Team`s, dicts with `name`/`role`/`description`, strings).

        Raises ValueError for no agents, `LayaLowConfidenceError` as the threshold rules say,
        and RuntimeError for an answer that cannot be read.
        """
        if not agents:
            raise ValueError("No agents provided to route the message to.")
        text = message_text(message)
        options = criteria(agents)
        res = self._decide(text, {"delegation": {"type": "choice",
                                                 "instructions": self.instructions,
                                                 "criteria": options}})
        threshold = self.confidence_threshold
        index, chosen, fell_back = choose(
            res, "delegation", list(options), self.caller.where, threshold,
            self.fallback_agent_index, self.raise_on_low_confidence,
            "Agno routing confidence %.3f below threshold %.3f for message: %r", text)
        member = agents[index]
        name = member_name(member, index)
        reason = ("Routed to fallback agent '%s' because routing confidence (%.3f) was below "
                  "threshold (%.3f)." % (name, chosen.shown, threshold) if fell_back else
                  "Routed to '%s' via Laya System 1 decision (confidence: %.3f)."
                  % (name, chosen.shown))
        return AgnoRouteDecision(agent=member, agent_index=index, name=name,
                                 role=member_role(member, index), confidence=chosen.shown,
                                 reason=reason, raw_decision=res)

    def route_team(self, message: Any, team: Any) -> AgnoRouteDecision:
        """Route `message` among `team.members` (agno's `Team(members=[...], mode="route")`),
        or `team.agents`; a callable member list is called first."""
        return self.route(message, team_members(team))

    def run(self, message: Any, agents: Sequence[Any]) -> AgnoRouteDecision:
        """`route`, under agno's verb; the chosen member is not run."""
        return self.route(message, agents)

    def __call__(self, message: Any, agents: Sequence[Any]) -> AgnoRouteDecision:
        return self.route(message, agents)

    async def aroute(self, message: Any, agents: Sequence[Any]) -> AgnoRouteDecision:
        """`route` in a worker thread, so the event loop keeps running."""
        return await asyncio.to_thread(self.route, message, agents)

    async def aroute_team(self, message: Any, team: Any) -> AgnoRouteDecision:
        """`route_team` in a worker thread."""
        return await asyncio.to_thread(self.route_team, message, team)

    async def arun(self, message: Any, agents: Sequence[Any]) -> AgnoRouteDecision:
        """`run` in a worker thread."""
        return await asyncio.to_thread(self.route, message, agents)
