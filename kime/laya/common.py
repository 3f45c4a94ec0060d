"""What `laya.common` exports at Laya's top level, over kime's modules and NumPy instead of
torch: `render_options` on Laya's internal question dict (`{"t", "crit", "labels"}`, the form
`Agent._to_internal` builds), and the two training signals `laya.train` uses, `proper_reward`
and `td_lambda_targets`, computed in float32 as torch computes them. (`QTYPES`, `QTYPE_NAMES`
and the option texts themselves are `kime.render`'s.)
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Dict, List

import numpy as np

from ..errors import InvalidArgument, InvalidRequest, problem
from ..render import QTYPES, Question
from ..render import render_options as _render_question

_F32 = np.float32


def _refuse(loc: List[Any], msg: str, value: Any) -> InvalidArgument:
    return InvalidArgument([problem(loc, msg, "type_error", value)])


def render_options(q: Dict[str, Any]) -> List[str]:
    """The option texts of an internal question dict, in option order (a noul's are always
    [false, true]): `label` or `label: description` for a choice, `level i: description` for a
    score, and the noul's two labels with their descriptions or Laya's defaults. A type other
    than choice and score renders as a noul, as in Laya; `labels` is for nouls only."""
    if not isinstance(q, Mapping):
        raise _refuse(["q"], "q must be a dict with 't' and 'crit', got %s" % type(q).__name__, q)
    if "t" not in q:
        raise InvalidRequest([problem(["q", "t"], "q needs 't', the question type",
                                      "value_error.missing", None)])
    qtype, crit = q["t"], q.get("crit")
    if qtype != "noul" and "labels" in q:
        raise ValueError("labels is only supported for noul questions")
    if qtype == "choice":
        if not isinstance(crit, Mapping):
            raise _refuse(["q", "crit"], "a choice's crit must be a dict of label -> "
                          "description, got %s" % type(crit).__name__, crit)
        crit = dict(crit)
    elif qtype == "score":
        if isinstance(crit, (str, bytes)) or not isinstance(crit, Iterable):
            raise _refuse(["q", "crit"], "a score's crit must be a list of level descriptions, "
                          "got %s" % type(crit).__name__, crit)
        crit = list(crit)
    else:
        qtype, crit = "noul", crit or {}
        if not isinstance(crit, Mapping):
            raise _refuse(["q", "crit"], "a noul's crit must be a dict keyed 'false'/'true', got "
                          "%s" % type(crit).__name__, crit)
        crit = dict(crit)
    question = Question(id="q", qtype=qtype, instructions="", crit=crit, labels=q.get("labels"))
    return _render_question(question)


def _array(name: str, value: Any) -> np.ndarray:
    try:
        out = np.asarray(value, dtype=_F32)
    except (TypeError, ValueError) as exc:
        raise _refuse([name], "%s must be numeric (an array or nested lists of numbers): %s"
                      % (name, exc), value) from None
    return out


def proper_reward(q: Any, target: Any, qtype: Any, mask: Any, w_sph: float = 0.5,
                  w_rps: float = 1.0, log_floor: float = -9.21) -> np.ndarray:
    """Laya's strictly proper reward per row: the log score (log q floored at `log_floor`) plus
    `w_sph` times the spherical score, less `w_rps` times the ranked probability score on score
    questions. `q` [..., N, K] are reported distributions, `target` [N, K] the targets, `qtype`
    [N] each row's type index and `mask` [N, K] its real options; float32 arrays out."""
    qa, ta, mask_a = _array("q", q), _array("target", target), _array("mask", mask)
    kinds = np.asarray(qtype)
    try:
        np.broadcast_shapes(qa.shape, ta.shape, mask_a.shape)
        np.broadcast_shapes(qa.shape[:-1], kinds.shape)
    except ValueError:
        raise InvalidRequest([problem(["q"], "q %s, target %s, mask %s and qtype %s do not "
                                      "broadcast: q is [..., N, K], target and mask [N, K], qtype "
                                      "[N]" % (qa.shape, ta.shape, mask_a.shape, kinds.shape),
                                      "value_error.shape", None)]) from None
    qa = qa * mask_a
    log_q = np.maximum(np.log(np.maximum(qa, _F32(1e-12))), _F32(log_floor))
    reward = (ta * log_q).sum(-1)
    norm = np.maximum(np.sqrt((qa * qa).sum(-1)), _F32(1e-9))
    reward = reward + _F32(w_sph) * ((ta * qa).sum(-1) / norm)
    is_score = (kinds == QTYPES["score"]).astype(_F32)
    if is_score.any():
        k = np.maximum(mask_a.sum(-1), _F32(2))
        gap = np.cumsum(qa, -1) - np.cumsum(ta, -1)
        rps = ((gap * gap) * mask_a).sum(-1) / (k - _F32(1))
        reward = reward - _F32(w_rps) * rps * is_score
    return np.asarray(reward, dtype=_F32)


def td_lambda_targets(p_true: Any, batch: Dict[str, Any], lam: float = 1.0) -> np.ndarray:
    """TD(lambda) targets for conversation trajectories: a copy of `batch["target"]` [N, 2] in
    which each episode's rows (`ep_group`, ordered by `ep_step`; -1 is no episode) take the
    episode's final outcome, blended backwards with the next step's `p_true` by `lam`."""
    if not isinstance(batch, Mapping) or "target" not in batch:
        raise _refuse(["batch"], "batch must be a dict with 'target' [N, 2] (and 'ep_group', "
                      "'ep_step'), got %s" % type(batch).__name__, None)
    given = batch["target"]
    target = np.array(given, dtype=given.dtype if isinstance(given, np.ndarray)
                      and given.dtype.kind == "f" else _F32)
    groups = batch.get("ep_group")
    if groups is None:
        return target
    if "ep_step" not in batch:
        raise InvalidRequest([problem(["batch", "ep_step"], "batch has 'ep_group' but no "
                                      "'ep_step'", "value_error.missing", None)])
    groups, steps = np.asarray(groups), np.asarray(batch["ep_step"])
    p = _array("p_true", p_true).astype(target.dtype, copy=False)
    # (1 - lam) in double, then in the target's precision, as torch scales by a Python number
    keep, blend = target.dtype.type(lam), target.dtype.type(1 - lam)
    for group in np.unique(groups[groups >= 0]):
        rows = np.flatnonzero(groups == group)
        rows = rows[np.argsort(steps[rows], kind="stable")]
        outcome = target.dtype.type(target[rows[-1], 1])
        for j in range(len(rows) - 1, -1, -1):
            if j < len(rows) - 1:
                outcome = blend * p[rows[j + 1]] + keep * outcome
            target[rows[j], 0], target[rows[j], 1] = 1 - outcome, outcome
    return target


__all__ = ["proper_reward", "render_options", "td_lambda_targets"]
