"""`Kime`: one checkpoint on one device, answering `Request`s. The engine API, and what Laya's
surface (`kime.laya`), the CLI and the server sit on.

`Kime` composes the steps and owns none of their rules: the name resolves to a directory
(`hub`), the directory loads and checks (`checkpoint`), a backend opens for the device
(`factory`); a call validates every request (`request`), lays each out once per state and
question (`layout`), hands the rows to the scheduler, which merges callers into shared batches
run by the executor (`scheduler`, `executor`), and turns the raw outputs into answers
(`answers`, with the checkpoint's `calibration`). A row's outputs do not depend on what else
is in its batch, so splitting and merging requests never changes an answer.
"""
from __future__ import annotations

import time
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from . import hub
from .answers import Response, Usage, make_answer
from .backend import Backend, Device, Memory, Precision
from .cache import ANSWER_CACHE
from .calibration import Temperatures
from .checkpoint import Checkpoint, load_checkpoint
from .errors import BadOption, InvalidArgument, problem, relocated
from .executor import EMBED, Executor, RowOutput
from .factory import Target, check_options, open_backend
from .gpu_check import GpuCheck
from .layout import Head, Job, Layouter, Row
from .request import Questions, Request, validate
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


class Kime:
    """A Laya checkpoint loaded on a device. Safe to share between threads.

    `model` is an alias (`laya`, `laya-multilingual`, `typed-decisions`, ...), an
    `hf://org/repo[/subfolder]` reference, a Hub repo id or a checkpoint directory; names are
    looked up offline in the Hugging Face cache. `device` is `auto` (a GPU when one runs here,
    else the CPU), `cpu` or `cuda[:N]`. `precision` is `auto` (FP16 on a GPU, FP32 on the CPU),
    `f16` (GPU only), `f32`, `int8` or `bf16` (CPU only; bf16 needs AVX512_BF16, or FEAT_BF16
    on aarch64). `threads=0` uses every CPU this process may use: the affinity mask, capped by
    the cgroup CPU quota (`kime.cpus`). Both are parsed and checked once, here
    (`kime.factory.check_options`); a layer above that has checked them already passes its
    `kime.factory.Target` as `device`.

    On a GPU the engine answers nothing until a probe's answers there agree with the CPU's
    (`kime.gpu_check`, kept per GPU, driver, libraries and checkpoint): where they do not,
    `auto` runs on the CPU with one warning saying why, and `cuda`/`cuda:N` raises
    `CudaSelfCheckFailed`. `gpu_check` holds the verdict.

    `answer_cache` bounds the rows whose raw outputs are kept (keyed by the row's token ids,
    markers and question type, so a hit is exactly what a forward pass would give) and
    `token_cache` the question heads kept laid out; 0 switches either off, and `cache=False`
    switches both off for one call.

    `max_merge` bounds how many callers' submissions one forward run may merge (0: as many as
    fit the token budget; 1: one request at a time, for measuring what merging gains).
    """

    def __init__(self, model: str, device: Union[str, Device, Target, None] = "auto",
                 precision: Union[str, Precision, None] = "auto", threads: int = 0,
                 preload: bool = False, answer_cache: int = ANSWER_CACHE, token_cache: int = 1024,
                 max_merge: int = 0):
        target = check_options(device, precision, threads)  # before any file is read
        self.model_id: str = str(model)
        self.checkpoint: Checkpoint = load_checkpoint(str(hub.resolve(self.model_id)))
        cfg = self.checkpoint.config
        self.temperatures = Temperatures(cfg.temperature, cfg.temperature_by_options,
                                         source=repr(self.model_id))
        self.temperatures.warn()
        self.layouter = Layouter(self.checkpoint.tokenizer, cfg.max_len, cfg.head_max_len,
                                 token_cache, parallel=cfg.parallel)
        opened = open_backend(self.checkpoint, target, threads, preload=bool(preload))
        self.backend: Backend = opened.backend
        self.gpu_check: Optional[GpuCheck] = opened.gpu_check
        """The CUDA self-check this load ran or read (`kime.gpu_check`): on a GPU that passed
        it, or on the CPU after one failed it; None where no GPU was opened or the check is
        switched off (KIME_CUDA_SELFCHECK=0)."""
        self.executor = Executor(self.backend, answer_cache)
        self.scheduler = Scheduler(self.executor.run, budget=self.executor.max_batch_tokens,
                                   max_merge=max_merge)

    # --- facts about the engine -------------------------------------------------------------

    @property
    def device(self) -> str:
        """The device the model runs on, in words."""
        return self.backend.describe()

    @property
    def max_row_tokens(self) -> int:
        """The most tokens one question's row holds; longer states are cut to fit."""
        return self.checkpoint.config.max_len

    def memory(self) -> Memory:
        """Bytes the model holds on its device."""
        return self.backend.memory()

    def count_tokens(self, request: RequestLike) -> int:
        """Tokens a request holds before anything is cut: its state once, plus every question's
        head and options. A server can refuse an oversized request with this before queueing."""
        req = _as_request(request)
        questions = validate([req])[0]
        n = len(self.layouter.state_ids(req.state))
        _, head_max_len = self.layouter.budgets(req.max_len, req.head_max_len)
        return n + sum(len(self.layouter.head(q, head_max_len).ids) for q in questions.items)

    def cache_stats(self) -> Dict[str, Dict[str, float]]:
        """Size, capacity, hits, misses and hit ratio of the answer and token caches."""
        return {"answers": self.executor.cache.stats(), "tokens": self.layouter.cache.stats()}

    def clear_caches(self) -> None:
        self.executor.cache.clear()
        self.layouter.cache.clear()

    # --- answering --------------------------------------------------------------------------

    def decide(self, request: RequestLike, cache: bool = True,
               temperatures: Optional[Temperatures] = None) -> Response:
        """Answer one request. Raises `InvalidRequest` listing every problem.

        `temperatures` replaces the checkpoint's calibration for this call (a calibration file's
        or a language's); the forward pass and the cache do not depend on it."""
        return self.decide_batch([request], cache=cache, temperatures=temperatures)[0]

    def decide_batch(self, requests: Sequence[RequestLike], cache: bool = True,
                     temperatures: Optional[Temperatures] = None) -> List[Response]:
        """Answer many requests, packing all their questions into as few backend calls as fit.
        One bad request fails the whole call, with every problem located by request index."""
        return self.decide_batch_timed(requests, cache=cache, temperatures=temperatures)[0]

    def decide_batch_timed(self, requests: Sequence[RequestLike], cache: bool = True,
                           temperatures: Optional[Temperatures] = None
                           ) -> Tuple[List[Response], Timing]:
        """`decide_batch`, and where the time went."""
        t0 = time.perf_counter()
        jobs = self.lay_out(requests, cache)
        t1 = time.perf_counter()
        outputs, batches = self._submit(jobs, cache).result()
        t2 = time.perf_counter()
        return (self._responses(jobs, outputs, temperatures),
                _timing(jobs, t1 - t0, t2 - t1, batches))

    async def decide_async(self, request: RequestLike, cache: bool = True,
                           temperatures: Optional[Temperatures] = None) -> Response:
        """`decide` for asyncio: the layout runs on a worker thread and the forward pass on the
        scheduler's, so the loop never blocks. Cancelling the task before its rows reach the
        device drops them without a forward pass."""
        return (await self.decide_batch_async([request], cache, temperatures))[0]

    async def decide_batch_async(self, requests: Sequence[RequestLike], cache: bool = True,
                                 temperatures: Optional[Temperatures] = None) -> List[Response]:
        """`decide_batch` for asyncio (see `decide_async`)."""
        import asyncio  # here, not at import: it costs a third of `import kime`

        loop = asyncio.get_running_loop()
        jobs = await loop.run_in_executor(None, self.lay_out, requests, cache)
        outputs, _ = await asyncio.wrap_future(self._submit(jobs, cache))
        return self._responses(jobs, outputs, temperatures)

    def embed(self, texts: Sequence[Optional[str]], max_length: int = 512,
              cache: bool = True) -> np.ndarray:
        """The encoder's embedding of each text, float32 [len(texts), hidden]: the mean over
        the text's tokens of the encoder's last hidden state (after its final norm), as Laya's
        `embed_fn_from_agent` computes it. The decision head does not run.

        A text is tokenized as Laya's embedder does: None is "", anything else `str()`, framed
        by the special tokens the checkpoint tokenizer's post-processor adds (whichever they
        are, or none) and cut as transformers cuts (`Tokenizer.encode_framed`). A row with no
        token at all (an empty text, on a tokenizer that adds none) is the zero vector, Laya's
        mean over nothing, and runs no forward pass. Rows run unpadded, in shared batches with
        every other caller's, so a row's vector does not depend on what else is in its batch.
        `cache` keeps vectors in the answer cache, as `decide` does rows."""
        length = _check_max_length(max_length)
        if isinstance(texts, (str, bytes)) or not isinstance(texts, Sequence):
            raise InvalidArgument([problem(["texts"], "texts must be a list of strings, got %s"
                                           % type(texts).__name__, "type_error.list", texts)])
        strings = ["" if t is None else str(t) for t in texts]
        vectors = np.zeros((len(strings), self.checkpoint.graph.hidden), dtype=np.float32)
        if not strings:
            return vectors
        ids = self.layouter.tok.encode_framed(strings, length)
        run = [i for i, row in enumerate(ids) if row]
        if run:
            rows = [Row(ids=ids[i], markers=[], state_tokens=0, state_tokens_used=0) for i in run]
            outputs = self.scheduler.submit(rows, [EMBED] * len(rows), cache).result()[0]
            for i, out in zip(run, outputs):
                vectors[i] = out.act
        return vectors

    def run_rows(self, rows: Sequence[Row], qtypes: Sequence[int],
                 cache: bool = True) -> List[RowOutput]:
        """Raw outputs for rows already laid out (e.g. the windows of a long state), through the
        scheduler like every other call, so they share batches with concurrent callers."""
        if not rows:
            return []
        return self.scheduler.submit(rows, qtypes, cache).result()[0]

    def warm(self, shapes: Sequence[Tuple[int, int, int]]) -> float:
        """Run the forward on synthetic rows of each (rows, tokens, markers) shape; the seconds
        it took. It builds the plans and touches the weights the first requests would, and
        caches nothing. Tokens are capped at `max_row_tokens`."""
        fill = self.layouter.tok.cls_id
        t0 = time.perf_counter()
        for rows, tokens, markers in shapes:
            tokens = max(markers + 2, min(tokens, self.max_row_tokens))
            row = Row(ids=[fill] * tokens, markers=list(range(1, markers + 1)), state_tokens=0,
                      state_tokens_used=0)
            self.run_rows([row] * rows, [0] * rows, cache=False)
        return time.perf_counter() - t0

    def close(self) -> None:
        """Finish queued work, stop the scheduler's thread and free the weights and plans.
        The engine cannot answer afterwards; load the model again to."""
        self.scheduler.close()
        self.executor.close()

    def __enter__(self) -> "Kime":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- the steps --------------------------------------------------------------------------

    def lay_out(self, requests: Sequence[RequestLike], cache: bool = True) -> List[Job]:
        """Validate every request (every problem at once), then lay each out: a state is
        tokenized once, and requests that share a questions object share its heads."""
        indexed = len(requests) > 1
        reqs = [_as_request(r, i if indexed else None) for i, r in enumerate(requests)]
        questions = validate(reqs, indexed=indexed)
        jobs = []
        shared: Dict[Tuple[int, int, int], List[Head]] = {}
        for i, (req, qs) in enumerate(zip(reqs, questions)):
            loc = [i] if indexed else []
            max_len, head_max_len = self.layouter.budgets(req.max_len, req.head_max_len)
            key = (id(qs), head_max_len, max_len)
            heads = shared.get(key)
            if heads is None:
                heads = shared[key] = self.layouter.heads(qs.items, head_max_len, max_len, loc,
                                                          cache=cache)
            jobs.append(self.layouter.job(req.state, list(qs.items), heads, max_len, loc))
        return jobs

    def rows_for(self, request: RequestLike) -> List[Row]:
        """The rows a request becomes (ids and markers), for inspection and tests."""
        return self.lay_out([request])[0].rows

    def _submit(self, jobs: Sequence[Job], cache: bool) -> "Future[Tuple[List[RowOutput], int]]":
        """Hand the rows to the scheduler (nothing to run: an already finished future)."""
        rows = [row for job in jobs for row in job.rows]
        if not rows:
            done: "Future[Tuple[List[RowOutput], int]]" = Future()
            done.set_result(([], 0))
            return done
        return self.scheduler.submit(rows, [q.type_index for job in jobs for q in job.questions],
                                     cache)

    def _responses(self, jobs: Sequence[Job], outputs: Sequence[RowOutput],
                   temperatures: Optional[Temperatures] = None) -> List[Response]:
        temps = temperatures or self.temperatures
        responses = []
        at = 0
        for job in jobs:
            responses.append(self.respond(job, outputs[at:at + len(job.rows)], temps))
            at += len(job.rows)
        return responses

    def respond(self, job: Job, outputs: Sequence[RowOutput],
                temperatures: Optional[Temperatures] = None) -> Response:
        """A laid-out request's answers from its rows' raw outputs (`lay_out`, `run_rows`)."""
        temps = temperatures or self.temperatures
        answers = {}
        usage = Usage()
        for q, row, head, out in zip(job.questions, job.rows, job.heads, outputs):
            t = temps.for_question(q.type_index, int(out.logits.shape[0]))
            answers[q.id] = make_answer(q, out.logits, out.act, t)
            usage.input_tokens += len(row.ids)
            usage.state_tokens = row.state_tokens
            usage.state_tokens_dropped = max(usage.state_tokens_dropped, row.state_tokens_dropped)
            if row.state_tokens_dropped > 0:
                usage.truncated_questions.append(q.id)
            collapsed = head.collapsed()
            if collapsed:
                usage.options[q.id] = collapsed
        return Response(answers=answers, usage=usage)


def _check_max_length(max_length: object) -> int:
    if isinstance(max_length, bool) or not isinstance(max_length, int) or max_length < 1:
        raise BadOption("max_length must be a positive integer, got %r" % (max_length,))
    return max_length


def _timing(jobs: Sequence[Job], tokenize: float, device: float, batches: int) -> Timing:
    cut = [r.state_tokens_dropped for job in jobs for r in job.rows]
    return Timing(tokenize=tokenize, device=device, batches=batches,
                  truncated=sum(1 for c in cut if c > 0), cut_tokens=sum(cut))


def _as_request(r: object, index: Optional[int] = None) -> Request:
    if isinstance(r, Request):
        return r
    if isinstance(r, Mapping):
        try:
            return Request.from_dict(r)
        except InvalidArgument as e:
            if index is None:
                raise
            raise InvalidArgument([relocated(p, [index]) for p in e.problems]) from None
    raise InvalidArgument([problem([] if index is None else [index], "a request is a kime.Request "
                                   "or a dict with 'state' and 'questions', got %s"
                                   % type(r).__name__, "type_error.request", r)])


__all__ = ["Kime", "Questions", "RequestLike", "Timing"]
