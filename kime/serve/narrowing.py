"""laya serve's `LAYA_TOURNAMENT_GROUP` (Laya 0.4.15's `laya/serve.py`, `_tournament_plan` and
`_predict_with_tournament`): which choices of a request are answered by elimination, and the
answer the server then sends.

One pass reads every option of a choice inside one option budget, so past a few dozen options
they no longer each get tokens of their own. With a group size set, a choice over it goes
through `kime.laya.shortlist.predict_tournament_async` (every round one call of the pipeline,
its groups in one shared forward pass) and the answer keeps the Jev shape: `probabilities`
names every option in criteria order, an option eliminated before the final round at 0.0, and
`x_tournament` says which options the final round scored and after how many rounds.
"""
from __future__ import annotations

from typing import Any, Awaitable, Callable, Dict, List, Optional

from ..laya.shortlist import predict_tournament_async
from .limits import refuse
from ..laya.limits import CHOICE_OPTIONS

Result = Dict[str, Any]
Predict = Callable[..., Awaitable[Result]]
"""One call of the pipeline: (state, questions, **controls) -> its result."""


def plan(questions: Any, group: int) -> Optional[Dict[Any, List[Any]]]:
    """The choices to narrow, as {question id: labels in criteria order}, or None to answer the
    request in one pass.

    Every choice of more than `group` options is narrowed. A choice with an `option_order`, or
    with a label that is not a string (it could not be mapped back onto the answer), keeps the
    one pass while one pass can read it. Once some choice is over `CHOICE_OPTIONS`, which
    only the raised cap admits, the request is narrowed, orders are dropped, and a label that
    is not a string is laya serve's 422."""
    if not isinstance(questions, dict):
        return None
    large: Dict[Any, List[Any]] = {}
    for qid, question in questions.items():
        if not (isinstance(question, dict) and question.get("type") == "choice"):
            continue
        criteria = question.get("criteria")
        if isinstance(criteria, (dict, list)) and len(criteria) > group:
            large[qid] = _labels(criteria)
    if not large:
        return None
    unmappable = [qid for qid, labels in large.items()
                  if not all(isinstance(label, str) for label in labels)]
    if any(len(labels) > CHOICE_OPTIONS for labels in large.values()):
        if unmappable:
            raise refuse(422, "question %r: a choice is narrowed by elimination once a request "
                         "has one over %d options, and that needs every label to be a string"
                         % (unmappable[0], CHOICE_OPTIONS))
        return large
    ordered = [qid for qid in large if questions[qid].get("option_order") is not None]
    return None if unmappable or ordered else large


def _labels(criteria: Any) -> List[Any]:
    """A choice's labels in order. A repeated label is the tournament's refusal, in its words
    (a 422); a list holding an unhashable label cannot be checked for repeats, and `plan`
    finds it unmappable."""
    labels = list(criteria)  # a dict's keys, or a list's items
    seen: set = set()
    for label in labels:
        try:
            if label in seen:  # 1 and 1.0 (and True) are one answer key, as in a dict
                raise refuse(422, "choice criteria label %r is duplicated" % (label,))
            seen.add(label)
        except TypeError:
            return labels
    return labels


async def answer(predict: Predict, state: Any, questions: Dict[Any, Any],
                 large: Dict[Any, List[Any]], group: int, **controls: Any) -> Result:
    """The request answered with every choice of `large` (`plan`'s) narrowed in groups of
    `group`; `controls` go to every call. `confidence`, `answer_confidence` and the usage
    besides `input_tokens` are the final call's; `input_tokens` is summed over every call."""
    calls: List[Result] = []

    class Recorded:
        async def predict_async(self, *args: Any, **kwargs: Any) -> Result:
            result = await predict(*args, **kwargs)
            calls.append(result)
            return result

    result = dict(await predict_tournament_async(Recorded(), state, questions, group_size=group,
                                                 **controls))
    rounds = result.pop("tournament", {})
    answers = dict(result.get("answers") or {})
    for qid, labels in large.items():
        current, meta = answers.get(qid), rounds.get(qid) or {}
        if not isinstance(current, dict) or not meta.get("rounds"):
            continue
        final = current.get("probabilities") or {}
        report: Dict[str, Any] = {"finalists": list(meta["labels"]), "rounds": meta["rounds"]}
        if questions[qid].get("option_order") is not None:
            report["option_order_dropped"] = True
        answers[qid] = {**current,
                        "probabilities": {label: final.get(label, 0.0) for label in labels},
                        "x_tournament": report}
    usage = dict(result.get("usage") or {})
    usage["input_tokens"] = sum((call.get("usage") or {}).get("input_tokens", 0)
                                for call in calls)
    return {**result, "answers": answers, "usage": usage}


__all__ = ["answer", "plan"]
