"""`LayaAgnoRouter`: picks the agno team member that should answer a message in one decision
(a `choice` over the members), instead of a leader model's generated delegation; and
`AgnoRouteDecision`, what it returns. Laya 0.4.15's `laya.integrations.agno` is the spec:
arguments, defaults, the fallback and low-confidence rules, the reason strings and errors.
"""
from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any, Dict, Optional, Sequence

from ...laya.confidence import gate_confidence
from ..errors import LayaLowConfidenceError
from ..guard import answers_map, malformed, where_of
from .common import Controlled, require_agno
from .members import criteria, member_name, member_role, message_text, team_members

DEFAULT_INSTRUCTIONS = "Which agent is best qualified to handle this task or message?"


@dataclass
class AgnoRouteDecision:
    """One routing decision.

    `agent` is the chosen candidate as given (an agno `Agent`, a dict, a string), `agent_index`
    its position, `name`/`role` as read from it, `confidence` the gate's number (the answer's
    `answer_confidence`, else its `confidence`, else 1.0), `reason` one line saying why, and
    `raw_decision` the runner's or server's answer unchanged.
    """

    agent: Any
    agent_index: int
    name: str
    role: str
    confidence: float
    reason: str
    raw_decision: Dict[str, Any]


def _chosen_index(key: Optional[str], options: Dict[str, str]) -> int:
    """`agent_<i>` -> i (laya's reading: the second `_` field; 0 when it is not a number), a
    plain option key -> its position, anything else -> 0."""
    if key and key.startswith("agent_"):
        try:
            return int(key.split("_")[1])
        except (ValueError, IndexError):
            return 0
    if key in options:
        return list(options).index(key)
    return 0


class LayaAgnoRouter(Controlled):
    """Route a message to one of an agno team's members in a single forward pass.

    Args:
        instructions: the `delegation` question asked about the message.
        confidence_threshold: below it (when > 0) the decision goes to `fallback_agent_index`,
            else raises `LayaLowConfidenceError` if `raise_on_low_confidence`, else stands.
        fallback_agent_index: the member chosen when confidence is under the threshold.
        raise_on_low_confidence: raise instead of accepting a low-confidence pick (a fallback,
            when set, wins).
        agent: a `kime.load` agent or a `kime.Router`; without it and `base_url`, a shared
            default `kime.Router()`.
        base_url, api_key: a laya-serve-compatible server (`kime serve`) and its bearer key.
        model, max_len, head_max_len, lang, min_confidence, task, lang_guess: per-call controls
            (`task`/`lang_guess` need a Router, or a server: kime sends them in the body).
        hooks, on_predict_start, on_predict_end, hooks_raise, hooks_timeout: per-call hooks,
            local only (refused with `base_url`).
    """

    def __init__(self, instructions: str = DEFAULT_INSTRUCTIONS,
                 confidence_threshold: float = 0.0, fallback_agent_index: Optional[int] = None,
                 raise_on_low_confidence: bool = False, agent: Optional[Any] = None,
                 base_url: Optional[str] = None, api_key: Optional[str] = None,
                 model: Optional[str] = None, max_len: Optional[int] = None,
                 head_max_len: Optional[int] = None, lang: Optional[str] = None,
                 min_confidence: Optional[float] = None, task: Optional[str] = None,
                 lang_guess: Optional[Any] = None, hooks: Optional[Any] = None,
                 on_predict_start: Optional[Any] = None, on_predict_end: Optional[Any] = None,
                 hooks_raise: Optional[bool] = None, hooks_timeout: Optional[float] = None):
        require_agno()
        self.instructions = instructions
        self.confidence_threshold = confidence_threshold
        self.fallback_agent_index = fallback_agent_index
        self.raise_on_low_confidence = raise_on_low_confidence
        self._keep_controls(locals())

    def _decision(self, agents: Sequence[Any], index: int, confidence: float, reason: str,
                  res: Dict[str, Any]) -> AgnoRouteDecision:
        chosen = agents[index]
        return AgnoRouteDecision(agent=chosen, agent_index=index, name=member_name(chosen, index),
                                 role=member_role(chosen, index), confidence=confidence,
                                 reason=reason, raw_decision=res)

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
        origin = where_of(self.base_url)
        answer = answers_map(res, origin).get("delegation", {})
        key = answer.get("choice")
        if key is not None and not isinstance(key, str):
            raise malformed(origin, "'choice' must be a string, got %s" % type(key).__name__)
        conf = gate_confidence(answer)
        if conf is None:
            conf = 1.0
        threshold = self.confidence_threshold
        if threshold > 0.0 and conf < threshold:
            fallback = self.fallback_agent_index
            if fallback is not None:
                return self._decision(agents, fallback, conf, (
                    "Routed to fallback agent '%s' because routing confidence (%.3f) was below "
                    "threshold (%.3f)." % (member_name(agents[fallback], fallback), conf,
                                           threshold)), res)
            if self.raise_on_low_confidence:
                raise LayaLowConfidenceError(
                    "Agno routing confidence %.3f below threshold %.3f for message: %r"
                    % (conf, threshold, text), confidence=conf, threshold=threshold,
                    raw_decision=res)
        index = _chosen_index(key, options)
        return self._decision(agents, index, conf, (
            "Routed to '%s' via Laya System 1 decision (confidence: %.3f)."
            % (member_name(agents[index], index), conf)), res)

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
