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
from typing import Any, Dict, List, Optional, Sequence, Tuple

from llama_index.core.prompts.mixin import PromptDictType
from llama_index.core.selectors import BaseSelector, SelectorResult, SingleSelection

from .caller import takes_controls
from .llamaindex_common import DecisionControls, choice_criteria, choice_name, query_text
from .reading import answer_to, choose, probability_map


class _LayaSelector(DecisionControls, BaseSelector):
    """What both selectors share: the question they ask, and LlamaIndex's prompt interface
    (they have no prompt to show or update)."""

    instructions: str

    def _get_prompts(self) -> PromptDictType:
        return {}

    def _update_prompts(self, prompts: PromptDictType) -> None:
        return None

    def _ask(self, choices: Sequence[Any], query: Any) -> Tuple[str, List[str], Any]:
        """Decide over `choices`: (query text, the criteria's keys, the decision)."""
        if not choices:
            raise ValueError("No choices provided to select from.")
        text = query_text(query)
        criteria = choice_criteria(choices)
        decision = self._decide(text, {"selector": {
            "type": "choice", "instructions": self.instructions, "criteria": criteria}})
        return text, list(criteria), decision

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

    @takes_controls()
    def __init__(self,
                 instructions: str = "Which tool or query engine is best suited to answer this "
                                     "query?",
                 confidence_threshold: float = 0.0, fallback_index: Optional[int] = None,
                 raise_on_low_confidence: bool = False, *, controls: Dict[str, Any]) -> None:
        self.instructions = instructions
        self.confidence_threshold = confidence_threshold
        self.fallback_index = fallback_index
        self.raise_on_low_confidence = raise_on_low_confidence
        self._keep_controls(controls)

    def _select(self, choices: Sequence[Any], query: Any) -> SelectorResult:
        text, keys, decision = self._ask(choices, query)
        threshold = self.confidence_threshold
        index, chosen, fell_back = choose(
            decision, "selector", keys, self._where(), threshold, self.fallback_index,
            self.raise_on_low_confidence, "Confidence %.3f below threshold %.3f for query: %r",
            text)
        if fell_back:
            return _result([(index, "Selected fallback index %s because confidence (%.3f) was "
                             "below threshold (%.3f)." % (index, chosen.shown, threshold))])
        return _result([(index, "Selected '%s' via Laya System 1 decision (confidence: %.3f)."
                         % (choice_name(choices[index], index), chosen.shown))])


class LayaMultiSelector(_LayaSelector):
    """Every candidate at or above `probability_threshold`, most probable first, at most
    `max_outputs` of them, for composite queries (in place of `LLMMultiSelector`); the most
    probable one alone when none reaches the threshold. (`default_index` is kept as laya keeps
    it: stored, never read.)"""

    @takes_controls()
    def __init__(self,
                 instructions: str = "Which tools or query engines are relevant to answer this "
                                     "query?",
                 max_outputs: Optional[int] = None, probability_threshold: float = 0.25,
                 default_index: int = 0, *, controls: Dict[str, Any]) -> None:
        self.instructions = instructions
        self.max_outputs = max_outputs
        self.probability_threshold = probability_threshold
        self.default_index = default_index
        self._keep_controls(controls)

    def _select(self, choices: Sequence[Any], query: Any) -> SelectorResult:
        _, keys, decision = self._ask(choices, query)
        # Only the caller's own keys, each there as a finite number: an extra key cannot win,
        # and a missing one, a string or a `true` is refused rather than ranked.
        where = self._where()
        probs = probability_map(answer_to(decision, "selector", where), keys, where)
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
