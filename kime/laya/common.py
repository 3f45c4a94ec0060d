"""What `laya.common` exports, over kime's own rules and NumPy instead of torch.

- the layout helpers Laya's agent lays rows out with, `build_sequence` and `build_head` (the
  rules are `kime.layout`'s; they take Laya's internal question dict, `{"t", "ins", "crit",
  "labels"}` as `Agent._to_internal` builds it, and a tokenizer: `Agent.tok`, or any
  transformers-like one), `parallel_layout`, `render_options`, `serialize_state`,
  `render_criterion`, `QTYPES`, `QTYPE_NAMES`;
- the temperature rules (`kime.calibration`): `temp_bucket`, `clamp_temperature`, `TEMP_MIN`,
  `TEMP_MAX`;
- `collate_items`, Laya's padded batch of laid-out items, as NumPy arrays (Laya's are torch
  tensors of the same dtypes and values);
- the two training signals `laya.train` uses, `proper_reward` and `td_lambda_targets`,
  computed in float32 as torch computes them.

Laya's torch modules (`DecisionModel`, `build_model`, `parallel_option_masks`, `amp_dtype`)
are not here: reading one raises `TorchOnly` (an ImportError) saying so, so
`from laya.common import DecisionModel` fails with the reason instead of "cannot import name".
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from ..calibration import TEMP_MAX, TEMP_MIN, clamp_temperature, temp_bucket
from ..errors import InvalidArgument, InvalidRequest, problem
from ..layout import build_head as _lay_head
from ..layout import build_row
from ..layout import parallel_layout as _parallel_layout
from ..render import QTYPE_NAMES, QTYPES, Question, render_criterion, serialize_state
from ..render import render_options as _render_question

_F32 = np.float32

TORCH_ONLY = ("DecisionModel", "build_model", "parallel_option_masks", "amp_dtype")
"""laya.common's torch modules and dtypes, which kime does not provide."""


class TorchOnly(ImportError):
    """A name of laya's that is a PyTorch module or dtype: kime has none to give."""


def __getattr__(name: str) -> Any:
    if name in TORCH_ONLY:
        raise TorchOnly("laya.common.%s is part of laya's PyTorch model, which kime does not "
                        "provide: kime runs the checkpoint with its own forward (kime.load, "
                        "Agent.predict). Train or inspect the torch model with the real laya, in "
                        "an environment of its own." % name, name="laya.common")
    raise AttributeError("module %r has no attribute %r" % (__name__, name))


def _refuse(loc: List[Any], msg: str, value: Any) -> InvalidArgument:
    return InvalidArgument([problem(loc, msg, "type_error", value)])


def _question(q: Any, option_order: Optional[Sequence[int]] = None) -> Question:
    """Laya's internal question dict as the `Question` kime's layout reads, checked."""
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
    order = None if option_order is None else tuple(int(i) for i in option_order)
    return Question(id="q", qtype=qtype, instructions=str(q.get("ins", "")), crit=crit,
                    labels=q.get("labels"), order=order)


def render_options(q: Dict[str, Any]) -> List[str]:
    """The option texts of an internal question dict, in option order (a noul's are always
    [false, true]): `label` or `label: description` for a choice, `level i: description` for a
    score, and the noul's two labels with their descriptions or Laya's defaults. A type other
    than choice and score renders as a noul, as in Laya; `labels` is for nouls only."""
    return _render_question(_question(q))


class _TransformersLike:
    """A transformers-like tokenizer (`tok(text, add_special_tokens=False)["input_ids"]`,
    `mask_token`, `cls_token_id`, ...) read as kime's layout reads its own `Tokenizer`."""

    def __init__(self, tok: Any):
        self.tok = tok
        self.mask_text = tok.mask_token
        self.mask_id, self.cls_id, self.sep_id = (tok.mask_token_id, tok.cls_token_id,
                                                  tok.sep_token_id)

    def encode(self, text: str) -> List[int]:
        return list(self.tok(text, add_special_tokens=False)["input_ids"])

    def encode_many(self, texts: Sequence[str]) -> List[List[int]]:
        return [self.encode(t) for t in texts]


def _layout_tokenizer(tok: Any) -> Any:
    """kime's own tokenizer behind `Agent.tok` (the fast path), else an adapter over `tok`."""
    own = getattr(tok, "tokenizer", None)
    if own is not None and hasattr(own, "encode_many") and hasattr(own, "mask_text"):
        return own
    return _TransformersLike(tok)


def build_head(tok: Any, q: Dict[str, Any], head_max_len: int = 192,
               option_order: Optional[List[int]] = None
               ) -> Tuple[List[int], List[int], Dict[str, Any]]:
    """The question half of a row, `[CLS] <type> instructions [SEP] [MASK] opt0 ... [SEP]`:
    (ids, the [MASK] position of each option in `option_order`, the option stats
    `build_sequence` returns), cut as Laya cuts crowded options and long instructions."""
    head = _lay_head(_layout_tokenizer(tok), _question(q, option_order), head_max_len)
    return list(head.ids), list(head.markers), {
        "options": head.options, "options_distinct": head.options_distinct,
        "tokens_per_option": head.tokens_per_option}


def build_sequence(tok: Any, state: Any, q: Dict[str, Any], max_len: int = 512,
                   head_max_len: int = 192, option_order: Optional[List[int]] = None,
                   truncate_left: bool = False, state_ids: Optional[List[int]] = None,
                   return_stats: bool = False, return_truncation_stats: bool = False,
                   return_layout: bool = False) -> Tuple[Any, ...]:
    """One question's row against a state, as Laya's `build_sequence` returns it: (ids,
    markers), then the option stats (`return_stats`), the state's truncation stats
    (`return_truncation_stats`: `state_tokens`, `state_tokens_used`, `state_tokens_dropped`,
    `truncated`) and the parallel layout (`return_layout`: `position_ids`, `option_ids`).

    The state fills what `max_len` leaves after the head, keeping its start, or its end with
    `truncate_left`; `state_ids` (the state's ids, tokenized once for several questions) is used
    instead of tokenizing `state`. kime's Agent calls this only when `laya.agent.build_sequence`
    has been rebound; otherwise it lays rows out with the same rules, cached."""
    kime_tok = _layout_tokenizer(tok)
    head = _lay_head(kime_tok, _question(q, option_order), head_max_len)
    if state_ids is None:
        state_ids = kime_tok.encode(serialize_state(state).replace(kime_tok.mask_text, " "))
    row = build_row(head, list(state_ids), max_len, bool(truncate_left), kime_tok.sep_id,
                    parallel=bool(return_layout))
    out: Tuple[Any, ...] = (list(row.ids), list(row.markers))
    if return_stats:
        out += ({"options": head.options, "options_distinct": head.options_distinct,
                 "tokens_per_option": head.tokens_per_option},)
    if return_truncation_stats:
        out += ({"state_tokens": row.state_tokens, "state_tokens_used": row.state_tokens_used,
                 "state_tokens_dropped": row.state_tokens_dropped,
                 "truncated": row.state_tokens_used < row.state_tokens},)
    if return_layout:
        out += ({"position_ids": row.positions, "option_ids": row.option_ids},)
    return out


def parallel_layout(markers: List[int], head_len: int, length: int) -> Dict[str, List[int]]:
    """Laya's parallel option layout of a row (`kime.layout.parallel_layout`), as Laya returns
    it: `{"position_ids": [...], "option_ids": [...]}`."""
    positions, option_ids = _parallel_layout(markers, head_len, length)
    return {"position_ids": positions, "option_ids": option_ids}


def collate_items(batch: Sequence[Sequence[Dict[str, Any]]], pad_id: int
                  ) -> Optional[Dict[str, Any]]:
    """Laya's padded batch of laid-out items (`{"ids", "markers", "qtype"}`, optionally
    `"label"`, `"target"`, `"layout"`), groups flattened in order, as NumPy arrays where Laya
    gives torch tensors of the same dtypes: `input_ids`, `attention_mask`, `marker_pos`,
    `marker_mask`, `qtype`, `label` (-1 when absent), `meta` (each item's other keys), and
    `target`, `position_ids`/`option_ids` when items carry them. None for no items."""
    items = [it for group in batch for it in group]
    if not items:
        return None
    n, width = len(items), max(len(it["ids"]) for it in items)
    kmax = max(len(it["markers"]) for it in items)
    ids = np.full((n, width), pad_id, dtype=np.int64)
    att = np.zeros((n, width), dtype=np.int64)
    mpos = np.zeros((n, kmax), dtype=np.int64)
    mmask = np.zeros((n, kmax), dtype=bool)
    has_target = any("target" in it for it in items)
    target = np.zeros((n, kmax), dtype=np.float32) if has_target else None
    for i, it in enumerate(items):
        ids[i, :len(it["ids"])] = it["ids"]
        att[i, :len(it["ids"])] = 1
        k = len(it["markers"])
        mpos[i, :k] = it["markers"]
        mmask[i, :k] = True
        if target is not None and "target" in it:
            if len(it["target"]) > k:
                raise ValueError("collate_items: item %d has %d target entries but only %d "
                                 "marker positions; a target needs one entry per option"
                                 % (i, len(it["target"]), k))
            target[i, :len(it["target"])] = it["target"]
    out: Dict[str, Any] = {
        "input_ids": ids, "attention_mask": att, "marker_pos": mpos, "marker_mask": mmask,
        "qtype": np.array([it["qtype"] for it in items], dtype=np.int64),
        "label": np.array([it.get("label", -1) for it in items], dtype=np.int64),
        "meta": [{k: it[k] for k in it if k not in ("ids", "markers", "target", "layout")}
                 for it in items]}
    if target is not None:
        out["target"] = target
    if any("layout" in it for it in items):
        if not all("layout" in it for it in items):
            raise ValueError("collate_items: some items carry a parallel layout and some do not")
        pos = np.zeros((n, width), dtype=np.int64)
        opt = np.zeros((n, width), dtype=np.int64)
        for i, it in enumerate(items):
            pos[i, :len(it["ids"])] = it["layout"]["position_ids"]
            opt[i, :len(it["ids"])] = it["layout"]["option_ids"]
        out["position_ids"], out["option_ids"] = pos, opt
    return out


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


__all__ = ["QTYPES", "QTYPE_NAMES", "TEMP_MAX", "TEMP_MIN", "TorchOnly", "build_head",
           "build_sequence", "clamp_temperature", "collate_items", "parallel_layout",
           "proper_reward", "render_criterion", "render_options", "serialize_state",
           "td_lambda_targets", "temp_bucket"]
