"""Rows laid out by a rebound `laya.agent.build_sequence`, answered by the engine.

Laya's Agent lays each question's row out by calling the `build_sequence` its module imported,
so a package can rebind `laya.agent.build_sequence` (one MCP server does, to keep a long
state's end: `truncate_left=True`) and every Agent then lays rows out through it. kime's Agent
lays rows out with `kime.layout`, cached, and calls nothing per question; when the name is
rebound (`kime.laya.agent.build_sequence` is no longer `kime.laya.common`'s), the Agent answers
through `Relaid` instead: Laya's call, argument for argument, per question, and the rows it
returns go to the engine's scheduler like any other. Nothing rebound, nothing of this runs.
"""
from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Sequence

from ..errors import TooLong, problem
from ..layout import Head, Job, Row
from ..request import validate

if TYPE_CHECKING:
    from ..answers import Response
    from ..calibration import Temperatures
    from ..engine import Kime
    from ..render import Question
    from ..request import Request


def internal(q: "Question") -> Dict[str, Any]:
    """A validated question as Laya's `Agent._to_internal` hands it to `build_sequence`."""
    out: Dict[str, Any] = {"t": q.qtype, "ins": q.instructions, "crit": q.crit}
    if q.labels is not None:
        out["labels"] = q.labels
    if q.order is not None:
        out["option_order"] = list(q.order)
    return out


class Relaid:
    """An engine whose rows come from `build` (a rebound `build_sequence`) called on `tok` (the
    agent's `Agent.tok`), as Laya's `Agent._encode_state` calls it."""

    def __init__(self, engine: "Kime", tok: Any, build: Callable[..., Any]):
        self.engine = engine
        self.tok = tok
        self.build = build

    def job(self, request: "Request", questions: Sequence["Question"], index: Optional[int]
            ) -> Job:
        layouter = self.engine.layouter
        max_len, head_max_len = layouter.budgets(request.max_len, request.head_max_len)
        loc: List[object] = [] if index is None else [index]
        state_ids = layouter.state_ids(request.state, loc + ["state"])
        rows, heads = [], []
        for q in questions:
            q_in = internal(q)
            seq, markers, stats, state_stats, *layout = self.build(
                self.tok, request.state, q_in, max_len, head_max_len,
                option_order=q_in.get("option_order"),
                truncate_left=isinstance(request.state, list), state_ids=state_ids,
                return_stats=True, return_truncation_stats=True,
                return_layout=layouter.parallel)
            if len(markers) != stats["options"]:
                raise TooLong([problem(loc + ["questions", q.id], "question %r: only %d of its "
                                       "%d option markers fit in max_len=%d with head_max_len=%d "
                                       "spent on the question; lower head_max_len, raise "
                                       "max_len, or use fewer options"
                                       % (q.id, len(markers), stats["options"], max_len,
                                          head_max_len), "value_error.too_long",
                                       stats["options"])])
            parallel = layout[0] if layout else {}
            rows.append(Row(ids=list(seq), markers=list(markers),
                            state_tokens=state_stats["state_tokens"],
                            state_tokens_used=state_stats["state_tokens_used"],
                            positions=parallel.get("position_ids"),
                            option_ids=parallel.get("option_ids")))
            heads.append(Head(ids=[], markers=list(markers), options=stats["options"],
                              options_distinct=stats["options_distinct"],
                              tokens_per_option=stats["tokens_per_option"]))
        return Job(list(questions), rows, heads)

    def decide_batch(self, requests: Sequence["Request"], cache: bool = True,
                     temperatures: Optional["Temperatures"] = None) -> List["Response"]:
        """`Kime.decide_batch`, each row laid out by `build`."""
        indexed = len(requests) > 1
        checked = validate(list(requests), indexed=indexed)
        jobs = [self.job(r, qs.items, i if indexed else None)
                for i, (r, qs) in enumerate(zip(requests, checked))]
        rows = [row for job in jobs for row in job.rows]
        outputs = self.engine.run_rows(rows, [q.type_index for job in jobs
                                              for q in job.questions], cache)
        responses, at = [], 0
        for job in jobs:
            responses.append(self.engine.respond(job, outputs[at:at + len(job.rows)],
                                                 temperatures))
            at += len(job.rows)
        return responses

    async def decide_batch_async(self, requests: Sequence["Request"], cache: bool = True,
                                 temperatures: Optional["Temperatures"] = None
                                 ) -> List["Response"]:
        """`decide_batch` on a worker thread (the rebound function is the caller's code)."""
        return await asyncio.get_running_loop().run_in_executor(
            None, self.decide_batch, requests, cache, temperatures)


__all__ = ["Relaid", "internal"]
