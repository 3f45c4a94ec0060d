"""What the shortlist goldens are recorded and replayed with, defined once for both sides:
`tools/goldens_shortlist.py` (in the oracle, with laya) imports this file and so does
`tests/laya/test_shortlist.py` (with kime). It imports only NumPy.

- Deterministic embedders, so a ranking depends on the texts alone and not on any model's
  embedding noise: a signed hashing bag of characters (negative cosines included), one that
  zeroes the query, one that answers NaN for some texts, and three that break the shape
  contract. Each records the texts it was asked to embed.
- Agents that break the reply contract (a list, an `answers` list, a reply missing a group or a
  `choice`), and one that has only `system_one`.
"""
from __future__ import annotations

from typing import Any, Callable, Dict, List, Sequence

import numpy as np

DIM = 24


def char_vector(text: str) -> np.ndarray:
    """A signed bag of characters: each character adds +1 or -1 to one of `DIM` slots, by its
    code point, so anagrams tie and texts of disjoint characters can point apart."""
    vector = np.zeros(DIM, dtype=np.float64)
    for ch in text.lower():
        code = ord(ch)
        vector[(code * 7) % DIM] += 1.0 if (code // DIM + code) % 3 else -1.0
    return vector


class Embedder:
    """An `embed_fn` that keeps every list of texts it was called with (`calls`)."""

    def __init__(self, kind: str = "chars"):
        self.kind = kind
        self.calls: List[List[str]] = []

    def __call__(self, texts: Sequence[str]) -> Any:
        texts = list(texts)
        self.calls.append(texts)
        rows = np.stack([char_vector(t) for t in texts]) if texts else np.zeros((0, DIM))
        if self.kind == "zero_query":
            rows[0] = 0.0
        elif self.kind == "nan":
            for i, text in enumerate(texts):
                if "x" in text:
                    rows[i] = np.nan
                elif "y" in text:
                    rows[i, 0] = np.inf
        elif self.kind == "wrong_rows":
            rows = rows[:-1]
        elif self.kind == "flat":
            rows = rows[:, 0]
        elif self.kind == "no_dim":
            rows = rows[:, :0]
        elif self.kind == "lists":
            rows = rows.tolist()  # plain lists are an array too
        return rows


EMBEDDERS = ("chars", "zero_query", "nan", "wrong_rows", "flat", "no_dim", "lists")


def embed_fn(kind: str) -> Any:
    """The embedder a case names: one of `EMBEDDERS`, or `"not_callable"` (a string)."""
    return "not callable" if kind == "not_callable" else Embedder(kind)


class ListReply:
    """Answers every call with a list."""

    def predict(self, state: Any, questions: Any, **kwargs: Any) -> Any:
        return []


class AnswersList:
    """Answers with a dict whose `answers` is a list."""

    def predict(self, state: Any, questions: Any, **kwargs: Any) -> Any:
        return {"answers": [], "usage": {}}


class MissingGroup:
    """Answers with an empty `answers` dict: every group is missing."""

    def predict(self, state: Any, questions: Any, **kwargs: Any) -> Any:
        return {"answers": {}}


class NoChoice:
    """Answers each question with an empty answer: a group's winner is missing."""

    def predict(self, state: Any, questions: Any, **kwargs: Any) -> Any:
        return {"answers": {qid: {} for qid in questions}}


class SystemOneOnly:
    """A real agent seen only through `system_one` (what Laya falls back to)."""

    def __init__(self, agent: Any):
        self._agent = agent

    def system_one(self, state: Any, questions: Any, **kwargs: Any) -> Any:
        return self._agent.system_one(state, questions, **kwargs)


class NoPredict:
    """An object with neither `predict` nor `system_one`."""


FAKE_AGENTS: Dict[str, Callable[[Any], Any]] = {
    "list_reply": lambda agent: ListReply(),
    "answers_list": lambda agent: AnswersList(),
    "missing_group": lambda agent: MissingGroup(),
    "no_choice": lambda agent: NoChoice(),
    "system_one_only": SystemOneOnly,
    "no_predict": lambda agent: NoPredict(),
}
"""Stand-ins a case may name as its agent, each built around the checkpoint's real agent."""


class Counted:
    """An agent whose `predict` / `system_one` calls are counted (`calls`); what it lacks, it
    lacks too, so Laya's and kime's fallback from one to the other sees the same object."""

    def __init__(self, inner: Any):
        self.inner, self.calls = inner, 0

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.inner, name)
        if name not in ("predict", "system_one"):
            return attr

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.calls += 1
            return attr(*args, **kwargs)
        return counted


class Recording:
    """An embedder (a checkpoint's `embed_fn_from_agent`) that keeps the texts it was given."""

    def __init__(self, fn: Callable[[Sequence[str]], Any]):
        self.fn = fn
        self.calls: List[List[str]] = []

    def __call__(self, texts: Sequence[str]) -> Any:
        self.calls.append(list(texts))
        return self.fn(texts)
