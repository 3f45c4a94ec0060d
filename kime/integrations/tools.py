"""Tool selection for agent loops: laya 0.4.15's `LayaToolSelector` and `ToolRouteDecision`.

One `choice` question whose options are the candidate tools (`tool_0`, `tool_1`, ..., plus
`direct_answer` when answering without a tool is allowed) replaces an LLM's tool call. A tool can
be a `"name: description"` string, an OpenAI-style or plain dict, a LlamaIndex tool (`metadata`),
anything with `name`/`description` (LangChain, CrewAI), or a function (its docstring's first
line). The decision runs where `kime.integrations.caller` sends it; a body the selector cannot
read, a low or unusable confidence, or an unknown choice goes to `fallback_tool` when one is set,
else raises. No framework is needed; `as_runnable` uses LangChain's when it is installed.
"""
from __future__ import annotations

import asyncio
import math
from dataclasses import dataclass
from typing import Any, Dict, Optional, Sequence, Tuple, Union

from ..client import MalformedReply
from ..laya.confidence import check_min_confidence, gate_confidence
from .caller import Controlled, takes_controls
from .errors import LayaLowConfidenceError

__all__ = ["LayaToolSelector", "ToolRouteDecision", "LayaLowConfidenceError"]

QUESTION_ID = "tool_select"
DIRECT_KEY = "direct_answer"
DIRECT_ANSWER = "Answer the user request directly without calling any tools."

Lookup = Dict[str, Tuple[int, Any, str]]


@dataclass
class ToolRouteDecision:
    """The selected tool, how sure the decision was, and why (a fallback says so)."""

    tool: Any
    tool_name: str
    tool_index: int
    confidence: float
    probabilities: Dict[str, float]
    reason: str
    is_direct_answer: bool
    is_fallback: bool
    raw_decision: Dict[str, Any]


def tool_metadata(tool: Any, index: int) -> Tuple[str, str]:
    """`(name, description)` of one tool, in any of the forms the module doc lists."""
    if isinstance(tool, str):
        name, colon, desc = tool.partition(":")
        return (name.strip(), desc.strip()) if colon else (tool.strip(), tool.strip())
    if isinstance(tool, dict):
        spec = tool["function"] if isinstance(tool.get("function"), dict) else tool
        name = spec.get("name") or "tool_%d" % index
        desc = spec.get("description") or (None if spec is not tool else tool.get("doc")) or name
        return str(name), str(desc)
    if hasattr(tool, "metadata"):
        meta = tool.metadata
        label = getattr(meta, "name", None) or "tool_%d" % index
        return str(label), str(getattr(meta, "description", None) or label)
    attr = getattr(tool, "name", None)
    if attr is not None:
        return str(attr), str(getattr(tool, "description", None) or attr)
    if callable(tool):
        fn_name = getattr(tool, "__name__", None) or "tool_%d" % index
        doc = getattr(tool, "__doc__", None)
        return str(fn_name), str(doc.strip().split("\n")[0] if doc else fn_name)
    return "tool_%d" % index, "Tool %d" % index


def tools_criteria(tools: Sequence[Any], allow_direct_answer: bool = False,
                   direct_answer_key: str = "__direct_answer__",
                   direct_answer_description: str = DIRECT_ANSWER) -> Tuple[Dict[str, str], Lookup]:
    """The question's criteria (`tool_<i>` -> "name: description") and key -> (index, tool, name);
    the direct answer, when allowed, is index -1."""
    criteria: Dict[str, str] = {}
    lookup: Lookup = {}
    for i, tool in enumerate(tools):
        name, desc = tool_metadata(tool, i)
        key = "tool_%d" % i
        criteria[key] = "%s: %s" % (name, desc) if desc and desc != name else name
        lookup[key] = (i, tool, name)
    if allow_direct_answer:
        criteria[DIRECT_KEY] = "%s: %s" % (direct_answer_key, direct_answer_description)
        lookup[DIRECT_KEY] = (-1, None, direct_answer_key)
    return criteria, lookup


def _named_probabilities(raw: Any, lookup: Lookup) -> Optional[Dict[str, float]]:
    """The answer's probabilities keyed by tool name, or None when a value is not a finite
    number (a bool included: `float(True)` would read as 1.0; NaN compares as nothing).
    Numeric strings are accepted, as laya does."""
    named: Dict[str, float] = {}
    if not isinstance(raw, dict):
        return named
    for key, prob in raw.items():
        if isinstance(prob, bool):
            return None
        try:
            value = float(prob)
        except (TypeError, ValueError):
            return None
        if not math.isfinite(value):
            return None
        named[lookup[key][2] if key in lookup else key] = value
    return named


class LayaToolSelector(Controlled):
    """Picks the tool (or a direct answer) for a request in one forward pass, no token generated.

    `agent` is a `kime.load` agent or a `kime.Router`; `base_url`/`api_key` a laya-serve-compatible
    server; neither, the default `kime.Router()`. `confidence_threshold` (in [0, 1]) gates the
    decision, `min_confidence` when it is unset; the per-call controls are `controls`' rule.
    """

    @takes_controls(omit=("task", "lang_guess"))
    def __init__(self, tools: Optional[Sequence[Any]] = None,
                 instructions: str = "Which tool should be called to handle the user request?",
                 allow_direct_answer: bool = False,
                 direct_answer_description: str = DIRECT_ANSWER,
                 confidence_threshold: Optional[float] = None, fallback_tool: Optional[Any] = None,
                 *, controls: Dict[str, Any]) -> None:
        self.tools = list(tools) if tools is not None else None
        self.instructions = instructions
        self.allow_direct_answer = bool(allow_direct_answer)
        self.direct_answer_description = direct_answer_description
        if confidence_threshold is not None and (
                isinstance(confidence_threshold, bool)
                or not isinstance(confidence_threshold, (int, float))
                or not math.isfinite(confidence_threshold)
                or not 0.0 <= confidence_threshold <= 1.0):
            raise ValueError("confidence_threshold must be a float in [0.0, 1.0], got %r"
                             % (confidence_threshold,))
        self.confidence_threshold = (None if confidence_threshold is None
                                     else float(confidence_threshold))
        self.fallback_tool = fallback_tool
        if controls["min_confidence"] is not None:
            check_min_confidence(controls["min_confidence"])
        self._keep_controls(controls)

    def _fallback(self, reason: str, result: Any, confidence: float = 0.0,
                  probabilities: Optional[Dict[str, float]] = None) -> ToolRouteDecision:
        name, _ = tool_metadata(self.fallback_tool, -1)
        return ToolRouteDecision(tool=self.fallback_tool, tool_name=name, tool_index=-1,
                                 confidence=confidence, probabilities=probabilities or {},
                                 reason=reason, is_direct_answer=False, is_fallback=True,
                                 raw_decision=result)

    def _ask(self, state: Any, questions: Dict[str, Any]) -> Any:
        """The decision, or the body of a reply that is not one: laya's selector reads it and
        routes what it cannot read to the fallback tool."""
        try:
            return self._decide(state, questions)
        except MalformedReply as exc:
            self.last_decision = exc.body
            return exc.body

    def select(self, state: Union[str, dict, list, Any], tools: Optional[Sequence[Any]] = None,
               instructions: Optional[str] = None) -> ToolRouteDecision:
        """The tool for `state` among `tools` (else the constructor's), asked with
        `instructions` (else the constructor's). A state that is not a str, dict or list is sent
        as `str(state)`."""
        candidates = tools if tools is not None else self.tools
        if not candidates and not self.allow_direct_answer:
            raise ValueError("No tools provided to LayaToolSelector.")
        criteria, lookup = tools_criteria(candidates or [], self.allow_direct_answer,
                                          direct_answer_description=self.direct_answer_description)
        question = {"type": "choice", "instructions": instructions or self.instructions,
                    "criteria": criteria}
        payload = state if isinstance(state, (str, dict, list)) else str(state)
        result = self._ask(payload, {QUESTION_ID: question})
        has_fallback = self.fallback_tool is not None

        answers = result.get("answers") if isinstance(result, dict) else None
        if not isinstance(answers, dict) or QUESTION_ID not in answers:
            if has_fallback:
                return self._fallback(
                    "Missing or malformed decision response; routed to fallback tool", result)
            raise RuntimeError("Malformed or missing decision response from Laya: %r" % (result,))
        answer = answers[QUESTION_ID]
        if not isinstance(answer, dict):
            if has_fallback:
                return self._fallback("Malformed decision answer; routed to fallback tool", result)
            raise RuntimeError("Malformed decision answer from Laya: %r" % (answer,))

        chosen = answer.get("choice")
        conf = gate_confidence(answer)
        raw_probs = answer.get("probabilities")
        probabilities = _named_probabilities(raw_probs, lookup)
        if probabilities is None:
            if has_fallback:
                return self._fallback(
                    "Malformed probability in decision answer; routed to fallback tool", result)
            raise RuntimeError("Malformed probability in decision answer from Laya: %r"
                               % (raw_probs,))

        threshold: Any = (self.confidence_threshold if self.confidence_threshold is not None
                          else self.min_confidence)
        if isinstance(threshold, dict):
            # A per-bucket map: the runner resolved and applied it (`low_confidence`); laya
            # compares the confidence with the map itself, a TypeError. Name what was applied.
            applied = answer.get("abstention_threshold")
            threshold = (float(applied) if isinstance(applied, (int, float))
                         and not isinstance(applied, bool) else None)
        if (bool(answer.get("low_confidence")) or conf is None
                or (threshold is not None and conf < threshold)):
            effective = conf if conf is not None else 0.0
            if has_fallback:
                reason = ("Confidence %.3f below threshold %s; routed to fallback tool"
                          % (effective, threshold) if threshold is not None
                          else "Unusable or low confidence decision; routed to fallback tool")
                return self._fallback(reason, result, effective, probabilities)
            raise LayaLowConfidenceError(
                "Laya tool selection confidence %.3f is below threshold %s" % (effective, threshold)
                if threshold is not None
                else "Laya tool selection returned unusable or low confidence.",
                confidence=effective,
                threshold=float(threshold) if threshold is not None else 0.0,
                raw_decision=result)

        # A JSON list or object as `choice` cannot be a key: unknown, not a TypeError.
        if not isinstance(chosen, str) or chosen not in lookup:
            if has_fallback:
                return self._fallback("Unknown or missing tool decision %r; routed to fallback tool"
                                      % (chosen,), result, conf, probabilities)
            raise RuntimeError("Unknown or missing tool decision from Laya: choice %r not in "
                               "candidate tools." % (chosen,))

        # A choice answer carries its distribution: a reply without one (or with a list) is
        # not read as "no probabilities" (laya's {}), but refused, after the confidence and the
        # choice, so a low or unknown pick keeps its own error.
        if not isinstance(raw_probs, dict):
            if has_fallback:
                return self._fallback(
                    "Malformed probability in decision answer; routed to fallback tool", result,
                    conf, probabilities)
            raise RuntimeError("Malformed probability in decision answer from Laya: %r"
                               % (raw_probs,))
        index, tool, name = lookup[chosen]
        direct = index == -1
        return ToolRouteDecision(
            tool=tool, tool_name=name, tool_index=index, confidence=conf,
            probabilities=probabilities,
            reason=("Direct answer requested; no tool required" if direct
                    else "Selected tool '%s' with confidence %.3f" % (name, conf)),
            is_direct_answer=direct, is_fallback=False, raw_decision=result)

    async def aselect(self, state: Union[str, dict, list, Any],
                      tools: Optional[Sequence[Any]] = None,
                      instructions: Optional[str] = None) -> ToolRouteDecision:
        """`select` in the default executor, so an event loop is not blocked."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(None, self.select, state, tools, instructions)

    def call(self, state: Union[str, dict, list, Any], tools: Optional[Sequence[Any]] = None,
             *args: Any, **kwargs: Any) -> Any:
        """Select a tool and run it with `args`/`kwargs` (called, or its `run`, or `invoke`);
        None for a direct answer."""
        decision = self.select(state, tools=tools)
        if decision.is_direct_answer:
            return None
        tool = decision.tool
        if callable(tool):
            return tool(*args, **kwargs)
        for method in ("run", "invoke"):
            if callable(getattr(tool, method, None)):
                return getattr(tool, method)(*args, **kwargs)
        raise TypeError("Selected tool '%s' (%s) is not callable."
                        % (decision.tool_name, type(tool).__name__))

    def as_runnable(self) -> Any:
        """`select` as a LangChain `RunnableLambda` when langchain-core is installed, else a
        small object with `invoke` and `|` chaining."""
        try:
            from langchain_core.runnables import RunnableLambda
        except ImportError:
            return _Runnable(self.select)
        return RunnableLambda(lambda inp: self.select(inp))


class _Runnable:
    """`invoke` and `first | second` without LangChain: `second` is a runnable or a callable."""

    def __init__(self, first: Any, second: Any = None) -> None:
        self.first = first
        self.second = second

    def invoke(self, inp: Any) -> Any:
        out = self.first.invoke(inp) if hasattr(self.first, "invoke") else self.first(inp)
        if self.second is None:
            return out
        if hasattr(self.second, "invoke"):
            return self.second.invoke(out)
        return self.second(out) if callable(self.second) else out

    def __or__(self, other: Any) -> "_Runnable":
        return _Runnable(self, other)
