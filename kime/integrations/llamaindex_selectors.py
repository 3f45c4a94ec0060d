"""`LayaSingleSelector` and `LayaMultiSelector`: LlamaIndex selectors answered by a Laya choice
question (laya 0.4.15's, on LlamaIndex's real types). Reached through `kime.integrations` or
`kime.integrations.llamaindex`, which import this module, and llama-index-core with it, on first
use.

Both are LlamaIndex `BaseSelector`s and return LlamaIndex's own `SelectorResult` (`MultiSelection`)
of `SingleSelection(index, reason)`, so `.ind`, `.inds`, `.reason`, `.reasons` are there for
`RouterQueryEngine`. `select` / `aselect` take the candidates as laya does: `ToolMetadata`, dicts
with `name` / `description`, or strings, in any mix (LlamaIndex's base `select` would refuse a
dict), and a `str` or `QueryBundle` query. `aselect` runs the decision in a worker thread.
"""
from __future__ import annotations

import asyncio
from typing import Any, List, Optional, Sequence

from llama_index.core.prompts.mixin import PromptDictType
from llama_index.core.selectors import BaseSelector, SelectorResult, SingleSelection

from .errors import LayaLowConfidenceError
from .guard import malformed, probability_map
from .llamaindex_common import (DecisionControls, choice_criteria, choice_name,
                                gated_confidence, query_text)


class _LayaSelector(DecisionControls, BaseSelector):
    """What both selectors share: the question they ask, and LlamaIndex's prompt interface
    (they have no prompt to show or update)."""

    instructions: str

    def _get_prompts(self) -> PromptDictType:
        return {}

    def _update_prompts(self, prompts: PromptDictType) -> None:
        return None

    def _ask(self, choices: Sequence[Any], query: Any) -> tuple:
        """Decide over `choices`: (query text, criteria, the answer to "selector", decision)."""
        if not choices:
            raise ValueError("No choices provided to select from.")
        text = query_text(query)
        criteria = choice_criteria(choices)
        decision = self._decide(text, {"selector": {
            "type": "choice", "instructions": self.instructions, "criteria": criteria}})
        return text, criteria, self._answer(decision, "selector"), decision

    def select(self, choices: Sequence[Any], query: Any) -> SelectorResult:
        """Select from `choices` for `query` (a `str` or `QueryBundle`)."""
        return self._select(choices, query)

    async def aselect(self, choices: Sequence[Any], query: Any) -> SelectorResult:
        """`select` without blocking the event loop (the decision runs in a worker thread)."""
        return await self._aselect(choices, query)

    def _select(self, choices: Sequence[Any], query: Any) -> SelectorResult:
        raise NotImplementedError

    async def _aselect(self, choices: Sequence[Any], query: Any) -> SelectorResult:
        return await asyncio.to_thread(self._select, choices, query)


class LayaSingleSelector(_LayaSelector):
    """One choice among the candidates, for LlamaIndex's `RouterQueryEngine` (in place of
    `LLMSingleSelector`).

    Below `confidence_threshold` (off at 0.0), the selection is `fallback_index` when one is
    set, else `LayaLowConfidenceError` when `raise_on_low_confidence`, else the choice as made.
    """

    def __init__(self,
                 instructions: str = "Which tool or query engine is best suited to answer this "
                                     "query?",
                 confidence_threshold: float = 0.0, fallback_index: Optional[int] = None,
                 raise_on_low_confidence: bool = False, agent: Any = None,
                 base_url: Optional[str] = None, api_key: Optional[str] = None,
                 model: Optional[str] = None, max_len: Optional[int] = None,
                 head_max_len: Optional[int] = None, lang: Optional[str] = None,
                 min_confidence: Optional[float] = None, task: Optional[str] = None,
                 lang_guess: Any = None, hooks: Any = None, on_predict_start: Any = None,
                 on_predict_end: Any = None, hooks_raise: Optional[bool] = None,
                 hooks_timeout: Optional[float] = None) -> None:
        self.instructions = instructions
        self.confidence_threshold = confidence_threshold
        self.fallback_index = fallback_index
        self.raise_on_low_confidence = raise_on_low_confidence
        self._keep_controls(locals())

    def _select(self, choices: Sequence[Any], query: Any) -> SelectorResult:
        text, criteria, answer, decision = self._ask(choices, query)
        chosen = self._chosen(answer)
        conf = gated_confidence(answer)
        index = 0  # no usable choice: the first candidate, as laya does
        if chosen and chosen.startswith("choice_"):
            try:
                index = int(chosen.split("_")[1])
            except (ValueError, IndexError):
                index = 0
            # laya indexes `choices` with it and raises IndexError (or, for "choice_-1", picks
            # the last candidate); a reply naming no candidate is refused as malformed instead.
            if not 0 <= index < len(choices):
                raise malformed(self._where(), "'choice' %r names none of the %d choices"
                                % (chosen, len(choices)))
        elif chosen in criteria:
            index = list(criteria).index(chosen)
        threshold = self.confidence_threshold
        if threshold > 0.0 and conf < threshold:
            if self.fallback_index is not None:
                return _result([(self.fallback_index, (
                    "Selected fallback index %s because confidence (%.3f) was below threshold "
                    "(%.3f)." % (self.fallback_index, conf, threshold)))])
            if self.raise_on_low_confidence:
                raise LayaLowConfidenceError(
                    "Confidence %.3f below threshold %.3f for query: %r" % (conf, threshold, text),
                    confidence=conf, threshold=threshold, raw_decision=decision)
        return _result([(index, "Selected '%s' via Laya System 1 decision (confidence: %.3f)."
                         % (choice_name(choices[index], index), conf))])


class LayaMultiSelector(_LayaSelector):
    """Every candidate at or above `probability_threshold`, most probable first, at most
    `max_outputs` of them, for composite queries (in place of `LLMMultiSelector`); the most
    probable one alone when none reaches the threshold. (`default_index` is kept as laya keeps
    it: stored, never read.)"""

    def __init__(self,
                 instructions: str = "Which tools or query engines are relevant to answer this "
                                     "query?",
                 max_outputs: Optional[int] = None, probability_threshold: float = 0.25,
                 default_index: int = 0, agent: Any = None, base_url: Optional[str] = None,
                 api_key: Optional[str] = None, model: Optional[str] = None,
                 max_len: Optional[int] = None, head_max_len: Optional[int] = None,
                 lang: Optional[str] = None, min_confidence: Optional[float] = None,
                 task: Optional[str] = None, lang_guess: Any = None, hooks: Any = None,
                 on_predict_start: Any = None, on_predict_end: Any = None,
                 hooks_raise: Optional[bool] = None,
                 hooks_timeout: Optional[float] = None) -> None:
        self.instructions = instructions
        self.max_outputs = max_outputs
        self.probability_threshold = probability_threshold
        self.default_index = default_index
        self._keep_controls(locals())

    def _select(self, choices: Sequence[Any], query: Any) -> SelectorResult:
        _, criteria, answer, _ = self._ask(choices, query)
        keys = list(criteria)
        # Only the caller's own keys, each a finite number: an extra key cannot win, and a
        # string or a `true` is refused rather than ranked.
        probs = probability_map(answer, keys, self._where())
        ranked = sorted(range(len(keys)), key=lambda i: probs[keys[i]], reverse=True)
        threshold = self.probability_threshold
        picked: List[tuple] = []
        for index in ranked:
            prob = probs[keys[index]]
            if prob < threshold:
                continue
            picked.append((index, "Selected '%s' (probability: %.3f >= %.3f)."
                           % (choice_name(choices[index], index), prob, threshold)))
            if self.max_outputs is not None and len(picked) >= self.max_outputs:
                break
        if not picked:
            top = ranked[0]
            picked.append((top, "Selected top choice '%s' as fallback (probability: %.3f)."
                           % (choice_name(choices[top], top), probs[keys[top]])))
        return _result(picked)


def _result(picked: List[tuple]) -> SelectorResult:
    return SelectorResult(selections=[SingleSelection(index=i, reason=r) for i, r in picked])


__all__ = ["LayaSingleSelector", "LayaMultiSelector"]
