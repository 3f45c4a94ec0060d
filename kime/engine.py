"""`Kime`: validate, lay out, batch, run, answer. The in-process API the Laya-compatible API,
the CLI and (later) the server sit on.

A call validates every request first and reports every problem at once; then each request's
state is tokenized once and laid out against each question's head, which is built once per
call; the rows of all requests are packed into batches under a token budget and run on the
backend; the logits become Laya's answers. A row's logits do not depend on what else is in its
batch, so splitting and merging requests never changes an answer.
"""
from __future__ import annotations

import hashlib
import threading
from concurrent.futures import Future
import time
from dataclasses import dataclass
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from . import hub
from .answers import Response, Temperatures, Usage, make_answer
from .backend import Memory, check_options, open_backend
from .batch import Batch
from .buckets import BUCKETS, split
from .checkpoint import Checkpoint, load_checkpoint
from .errors import InvalidArgument, Problem, TooLong, problem
from .cache import LRU
from .layout import Head, Row, build_head, build_row, fitting_markers
from .render import Question, State, render_options, serialize_state
from .request import Request, check_questions, raise_if
from .scheduler import Scheduler

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

    `answer_cache` bounds the rows whose raw outputs are kept (keyed by the row's token ids,
    markers and question type, so a hit is exactly what a forward pass would give) and
    `token_cache` the question heads kept laid out; 0 switches either off, and `cache=False`
    switches both off for one call.

    `max_merge` bounds how many callers' submissions one forward run may merge (0: as many as
    fit the token budget; 1: one request at a time, for measuring what merging gains).
    """

    def __init__(self, model: str, device: str = "auto", precision: str = "f16", threads: int = 0,
                 preload: bool = False, answer_cache: int = 4096, token_cache: int = 1024,
                 max_merge: int = 0):
        check_options(device, precision, threads)
        self._answers: LRU[Tuple[np.ndarray, np.ndarray]] = LRU(answer_cache)
        self._heads: LRU[Head] = LRU(token_cache)
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
        # The backend's largest bucket bounds a batch (and so what one run may merge).
        self._batch_tokens = int(getattr(self._backend, "max_batch_tokens", None) or BUCKETS[-1])
        self.scheduler = Scheduler(self._run, budget=self._batch_tokens, max_merge=max_merge)

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

    def decide(self, request: RequestLike, cache: bool = True) -> Response:
        """Answer one request. Raises `InvalidRequest` listing every problem."""
        return self.decide_batch([request], cache=cache)[0]

    def decide_batch(self, requests: Sequence[RequestLike], cache: bool = True) -> List[Response]:
        """Answer many requests, packing all their questions into as few backend calls as fit.
        One bad request fails the whole call, with every problem located by request index."""
        return self.decide_batch_timed(requests, cache=cache)[0]

    def decide_batch_timed(self, requests: Sequence[RequestLike],
                           cache: bool = True) -> Tuple[List[Response], Timing]:
        """`decide_batch`, and where the time went."""
        t0 = time.perf_counter()
        jobs = self._prepare(requests, cache)
        t1 = time.perf_counter()
        outputs, batches = self._submit(jobs, cache).result()
        t2 = time.perf_counter()
        return self._responses(jobs, outputs), self._timing(jobs, t1 - t0, t2 - t1, batches)

    def _prepare(self, requests: Sequence[RequestLike], cache: bool) -> List["_Job"]:
        """Validate and lay out, on the caller's thread."""
        reqs = [_as_request(r, i if len(requests) > 1 else None) for i, r in enumerate(requests)]
        questions = self._validated(reqs, indexed=len(reqs) > 1)
        return self._lay_out(reqs, questions, indexed=len(reqs) > 1, cache=cache)

    def _submit(self, jobs: Sequence["_Job"], cache: bool) -> "Future[Tuple[List[Tuple[np.ndarray, np.ndarray]], int]]":
        """Hand the rows to the scheduler (nothing to run: an already finished future)."""
        rows = [row for job in jobs for row in job.rows]
        if not rows:
            done: "Future[Tuple[List[Tuple[np.ndarray, np.ndarray]], int]]" = Future()
            done.set_result(([], 0))
            return done
        return self.scheduler.submit(rows, [q.type_index for job in jobs for q in job.questions],
                                     cache)

    def _responses(self, jobs: Sequence["_Job"], outputs: Sequence[Tuple[np.ndarray, np.ndarray]]) -> List[Response]:
        responses = []
        at = 0
        for job in jobs:
            responses.append(self._respond(job, outputs[at:at + len(job.rows)]))
            at += len(job.rows)
        return responses

    @staticmethod
    def _timing(jobs: Sequence["_Job"], tokenize: float, device: float, batches: int) -> Timing:
        cut = [r.state_tokens_dropped for job in jobs for r in job.rows]
        return Timing(tokenize=tokenize, device=device, batches=batches,
                      truncated=sum(1 for c in cut if c > 0), cut_tokens=sum(cut))

    async def decide_async(self, request: RequestLike, cache: bool = True) -> Response:
        """`decide` for asyncio: the layout runs on a worker thread and the forward pass on the
        scheduler's, so the loop never blocks. Cancelling the task before its rows reach the
        device drops them without a forward pass."""
        return (await self.decide_batch_async([request], cache))[0]

    async def decide_batch_async(self, requests: Sequence[RequestLike],
                                 cache: bool = True) -> List[Response]:
        """`decide_batch` for asyncio (see `decide_async`)."""
        import asyncio  # here, not at import: it costs a third of `import kime`

        loop = asyncio.get_running_loop()
        jobs = await loop.run_in_executor(None, self._prepare, requests, cache)
        outputs, _ = await asyncio.wrap_future(self._submit(jobs, cache))
        return self._responses(jobs, outputs)

    def close(self) -> None:
        """Finish queued work and stop the scheduler's thread. The engine can be used again."""
        self.scheduler.close()

    def __enter__(self) -> "Kime":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def cache_stats(self) -> Dict[str, Dict[str, float]]:
        """Size, capacity, hits, misses and hit ratio of the answer and token caches."""
        return {"answers": self._answers.stats(), "tokens": self._heads.stats()}

    def clear_caches(self) -> None:
        self._answers.clear()
        self._heads.clear()

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
              loc: Sequence[Any] = (), cache: bool = True) -> List[Head]:
        """Each question's head; raises `TooLong` naming every question whose markers do not fit."""
        questions = list(questions)
        heads = [self._head(q, head_max_len, cache) for q in questions]
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

    def _head(self, q: Question, head_max_len: int, cache: bool) -> Head:
        """A question's head, from the token cache when its rendering was laid out before."""
        if not cache:
            return build_head(self._tok, q, head_max_len)
        key = (q.qtype, q.instructions, tuple(render_options(q)), q.order, head_max_len)
        head = self._heads.get(key)
        if head is None:
            head = build_head(self._tok, q, head_max_len)
            self._heads.put(key, head)
        return head

    def _state_ids(self, state: State, loc: Sequence[Any]) -> List[int]:
        """The state's ids, tokenized once for all its questions (mask text blanked)."""
        try:
            text = serialize_state(state)
        except (TypeError, ValueError) as e:
            raise InvalidArgument([problem(list(loc), "state must be JSON-serializable: %s" % e,
                                           "type_error.json", state)]) from e
        return self._tok.encode(text.replace(self._tok.mask_text, " "))

    def _lay_out(self, reqs: Sequence[Request], questions: Sequence[List[Question]],
                 indexed: bool = False, cache: bool = True) -> List[_Job]:
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
                heads = self.heads(qs, head_max_len, max_len, loc, cache=cache)
                head_cache[key] = heads  # type: ignore[index]
            state_ids = self._state_ids(req.state, loc + ["state"])
            keep_end = isinstance(req.state, list)
            rows = [build_row(h, state_ids, max_len, keep_end, self._tok.sep_id) for h in heads]
            jobs.append(_Job(qs, rows, heads))
        return jobs

    def _run(self, rows: Sequence[Row], qtypes: Sequence[int],
             cache: bool = True) -> Tuple[List[Tuple[np.ndarray, np.ndarray]], int]:
        """(logits, act) per row, and the number of backend batches it took. Rows found in the
        answer cache are not run; the rest run in batches that fit the largest bucket, and their
        outputs are copied out under the lock, because a backend reuses its buffers."""
        results: List[Optional[Tuple[np.ndarray, np.ndarray]]] = [None] * len(rows)
        keys: List[bytes] = []
        todo: List[int] = list(range(len(rows)))
        if cache and self._answers.capacity:
            keys = [_row_key(r, qt) for r, qt in zip(rows, qtypes)]
            todo = []
            for i, key in enumerate(keys):
                hit = self._answers.get(key)
                if hit is None:
                    todo.append(i)
                else:
                    results[i] = (hit[0].copy(), hit[1].copy())
        batches = split([len(rows[i].ids) for i in todo], self._batch_tokens)
        for part in batches:
            index = [todo[j] for j in part]
            batch = Batch.pack([rows[i].ids for i in index], [rows[i].markers for i in index],
                               [qtypes[i] for i in index])
            with self._lock:
                out = self._backend.run(batch)
                logits, act = out.logits.copy(), out.act.copy()
            for r, i in enumerate(index):
                row_logits = logits[batch.mcu[r]:batch.mcu[r + 1]]
                results[i] = (row_logits, act[r])
                if keys:
                    self._answers.put(keys[i], (_frozen(row_logits), _frozen(act[r])))
        return [r for r in results if r is not None], len(batches)

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


def _row_key(row: Row, qtype: int) -> bytes:
    """What determines a row's outputs: its ids, its markers and its question type."""
    h = hashlib.blake2b(digest_size=20)
    h.update(np.asarray(row.ids, dtype=np.int32).tobytes())
    h.update(b"|")
    h.update(np.asarray(row.markers, dtype=np.int32).tobytes())
    h.update(bytes([qtype]))
    return h.digest()


def _frozen(a: np.ndarray) -> np.ndarray:
    a = a.copy()
    a.flags.writeable = False
    return a


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
