"""`Kime`: validate, lay out, batch, run, answer. The in-process API the Laya-compatible API,
the CLI and (later) the server sit on.

A call validates every request first and reports every problem at once; then each request's
state is tokenized once and laid out against each question's head, which is built once per
call; the rows of all requests are packed into batches under a token budget and run on the
backend; the logits become Laya's answers. A row's logits do not depend on what else is in its
batch, so splitting and merging requests never changes an answer.
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from . import hub
from .answers import Response, Temperatures, Usage, make_answer
from .backend import Memory, check_options, open_backend
from .batch import Batch
from .buckets import split
from .checkpoint import Checkpoint, load_checkpoint
from .errors import InvalidArgument, Problem, TooLong, problem
from .layout import Head, Row, build_head, build_row, fitting_markers
from .render import Question, State, serialize_state
from .request import Request, check_questions, raise_if

RequestLike = Union[Request, Mapping[str, Any]]

@dataclass(frozen=True)
class Timing:
    """Where the time of one `decide_batch_timed` call went (seconds)."""

    tokenize: float
    device: float
    batches: int
    truncated: int
    cut_tokens: int


@dataclass
class _Job:
    """One request, laid out: its questions, and one row per question."""

    questions: List[Question]
    rows: List[Row]
    heads: List[Head]


class Kime:
    """A Laya checkpoint loaded on a device. Safe to share between threads.

    `model` is an alias (`laya`, `laya-multilingual`, `typed-decisions`, ...), an
    `hf://org/repo[/subfolder]` reference, a Hub repo id or a checkpoint directory; names are
    looked up offline in the Hugging Face cache. `precision` is `f16` (default), `f32` or `int8`;
    on the CPU both float settings compute in FP32. `threads=0` uses every core.
    """

    def __init__(self, model: str, device: str = "auto", precision: str = "f16", threads: int = 0,
                 preload: bool = False):
        check_options(device, precision, threads)
        self.model_id: str = str(model)
        path = hub.resolve(self.model_id)
        self._ck: Checkpoint = load_checkpoint(str(path))
        cfg = self._ck.config
        self.temperatures = Temperatures(cfg.temperature, cfg.temperature_by_options,
                                         source=repr(self.model_id))
        self.temperatures.warn()
        self._tok = self._ck.tokenizer
        self._backend = open_backend(self._ck, device, precision, threads, preload=bool(preload))
        self._lock = threading.Lock()

    # --- facts about the engine -------------------------------------------------------------

    @property
    def device(self) -> str:
        """The device the model runs on, in words."""
        return self._backend.describe()

    @property
    def max_row_tokens(self) -> int:
        """The most tokens one question's row holds; longer states are cut to fit."""
        return self._ck.config.max_len

    @property
    def checkpoint(self) -> Checkpoint:
        return self._ck

    def memory(self) -> Memory:
        """Bytes the model holds on its device."""
        return self._backend.memory()

    def count_tokens(self, request: RequestLike) -> int:
        """Tokens a request holds before anything is cut: its state once, plus every question's
        head and options. A server can refuse an oversized request with this before queueing."""
        req = _as_request(request)
        questions = self._validated([req])[0]
        n = len(self._state_ids(req.state, ["state"]))
        budget = req.head_max_len if req.head_max_len is not None else self._ck.config.head_max_len
        return n + sum(len(build_head(self._tok, q, budget).ids) for q in questions)

    # --- answering --------------------------------------------------------------------------

    def decide(self, request: RequestLike) -> Response:
        """Answer one request. Raises `InvalidRequest` listing every problem."""
        return self.decide_batch([request])[0]

    def decide_batch(self, requests: Sequence[RequestLike]) -> List[Response]:
        """Answer many requests, packing all their questions into as few backend calls as fit.
        One bad request fails the whole call, with every problem located by request index."""
        return self.decide_batch_timed(requests)[0]

    def decide_batch_timed(self, requests: Sequence[RequestLike]) -> Tuple[List[Response], Timing]:
        """`decide_batch`, and where the time went."""
        t0 = time.perf_counter()
        reqs = [_as_request(r, i if len(requests) > 1 else None) for i, r in enumerate(requests)]
        questions = self._validated(reqs, indexed=len(reqs) > 1)
        jobs = self._lay_out(reqs, questions, indexed=len(reqs) > 1)
        t1 = time.perf_counter()
        outputs, batches = self._run([row for job in jobs for row in job.rows],
                                     [q.type_index for job in jobs for q in job.questions])
        t2 = time.perf_counter()
        responses = []
        at = 0
        for job in jobs:
            responses.append(self._respond(job, outputs[at:at + len(job.rows)]))
            at += len(job.rows)
        cut = [r.state_tokens_dropped for job in jobs for r in job.rows]
        timing = Timing(tokenize=t1 - t0, device=t2 - t1, batches=batches,
                        truncated=sum(1 for c in cut if c > 0), cut_tokens=sum(cut))
        return responses, timing

    async def decide_async(self, request: RequestLike) -> Response:
        """`decide` on a worker thread, so an asyncio loop keeps serving while it runs."""
        import asyncio  # here, not at import: it costs a third of `import kime`

        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(None, self.decide, request)

    # --- the steps --------------------------------------------------------------------------

    def _validated(self, reqs: Sequence[Request], indexed: bool = False) -> List[List[Question]]:
        """Every request's questions, normalised; raises with every problem of every request."""
        out: List[List[Question]] = []
        problems: List[Problem] = []
        arg_problems: List[Problem] = []
        for i, req in enumerate(reqs):
            prefix = [i] if indexed else []
            if req.state is None:
                arg_problems.append(problem(prefix + ["state"], "state must not be None; pass a "
                                            "string, dict, or list", "type_error.none", None))
            if not isinstance(req.questions, dict):
                arg_problems.append(problem(prefix + ["questions"], "questions must be a dict of "
                                            "question id -> definition, got %s"
                                            % type(req.questions).__name__, "type_error.dict",
                                            req.questions))
                out.append([])
                continue
            qs, found = check_questions(req.questions)
            problems.extend(dict(p, loc=prefix + p["loc"]) for p in found)
            out.append(qs)
        raise_if(problems, arg_problems)
        return out

    def heads(self, questions: Iterable[Question], head_max_len: int, max_len: int,
              loc: Sequence[Any] = ()) -> List[Head]:
        """Each question's head; raises `TooLong` naming every question whose markers do not fit."""
        heads = [build_head(self._tok, q, head_max_len) for q in questions]
        problems = []
        for q, head in zip(questions, heads):
            fit = fitting_markers(head, max_len)
            if fit != head.options:
                problems.append(problem(
                    list(loc) + ["questions", q.id],
                    "question %r: only %d of its %d option markers fit in max_len=%d with "
                    "head_max_len=%d spent on the question; lower head_max_len, raise max_len, or "
                    "use fewer options" % (q.id, fit, head.options, max_len, head_max_len),
                    "value_error.too_long", head.options))
        if problems:
            raise TooLong(problems)
        return heads

    def _state_ids(self, state: State, loc: Sequence[Any]) -> List[int]:
        """The state's ids, tokenized once for all its questions (mask text blanked)."""
        try:
            text = serialize_state(state)
        except (TypeError, ValueError) as e:
            raise InvalidArgument([problem(list(loc), "state must be JSON-serializable: %s" % e,
                                           "type_error.json", state)]) from e
        return self._tok.encode(text.replace(self._tok.mask_text, " "))

    def _lay_out(self, reqs: Sequence[Request], questions: Sequence[List[Question]],
                 indexed: bool = False) -> List[_Job]:
        cfg = self._ck.config
        jobs = []
        head_cache: Dict[Tuple[int, int], List[Head]] = {}
        for i, (req, qs) in enumerate(zip(reqs, questions)):
            loc = [i] if indexed else []
            if not qs:
                jobs.append(_Job([], [], []))
                continue
            max_len = cfg.max_len if req.max_len is None else req.max_len
            head_max_len = cfg.head_max_len if req.head_max_len is None else req.head_max_len
            # Requests that share a question dict share its heads (predict_batch's case).
            key = (id(req.questions), head_max_len, max_len)
            heads = head_cache.get(key)  # type: ignore[arg-type]
            if heads is None:
                heads = self.heads(qs, head_max_len, max_len, loc)
                head_cache[key] = heads  # type: ignore[index]
            state_ids = self._state_ids(req.state, loc + ["state"])
            keep_end = isinstance(req.state, list)
            rows = [build_row(h, state_ids, max_len, keep_end, self._tok.sep_id) for h in heads]
            jobs.append(_Job(qs, rows, heads))
        return jobs

    def _run(self, rows: Sequence[Row], qtypes: Sequence[int]) -> Tuple[List[Tuple[np.ndarray, np.ndarray]], int]:
        """Run rows in batches that fit the largest bucket; (logits, act) per row, and the
        number of batches. Outputs are copied out under the lock: a backend reuses its buffers."""
        results: List[Tuple[np.ndarray, np.ndarray]] = []
        batches = split([len(r.ids) for r in rows])
        for part in batches:
            batch = Batch.pack([rows[i].ids for i in part], [rows[i].markers for i in part],
                               [qtypes[i] for i in part])
            with self._lock:
                out = self._backend.run(batch)
                logits, act = out.logits.copy(), out.act.copy()
            for r in range(len(part)):
                results.append((logits[batch.mcu[r]:batch.mcu[r + 1]], act[r]))
        return results, len(batches)

    def _respond(self, job: _Job, outputs: Sequence[Tuple[np.ndarray, np.ndarray]]) -> Response:
        answers = {}
        usage = Usage()
        for q, row, head, (logits, act) in zip(job.questions, job.rows, job.heads, outputs):
            answers[q.id] = make_answer(q, logits, act, self.temperatures)
            usage.input_tokens += len(row.ids)
            usage.state_tokens = row.state_tokens
            usage.state_tokens_dropped = max(usage.state_tokens_dropped, row.state_tokens_dropped)
            if row.state_tokens_dropped > 0:
                usage.truncated_questions.append(q.id)
            collapsed = head.collapsed()
            if collapsed:
                usage.options[q.id] = collapsed
        return Response(answers=answers, usage=usage)

    def rows_for(self, request: RequestLike) -> List[Row]:
        """The rows a request becomes (ids and markers), for inspection and tests."""
        req = _as_request(request)
        return self._lay_out([req], self._validated([req]))[0].rows


def _as_request(r: Any, index: Optional[int] = None) -> Request:
    if isinstance(r, Request):
        return r
    if isinstance(r, Mapping):
        try:
            return Request.from_dict(r)
        except InvalidArgument as e:
            if index is None:
                raise
            raise InvalidArgument([dict(p, loc=[index] + p["loc"]) for p in e.problems]) from None
    raise InvalidArgument([problem([] if index is None else [index], "a request is a kime.Request "
                                   "or a dict with 'state' and 'questions', got %s"
                                   % type(r).__name__, "type_error.request", r)])
