"""Laya 0.4.15's `Agent` and `load` over the engine, argument for argument: the same names,
positional order and defaults, the same attributes, the same results (keys in Laya's order,
numbers within float32 noise) and Laya's refusals. Code written for `laya` runs with
`import kime as laya`.

The agent owns Laya's surface and delegates each rule to its module: loading (`loading`,
`revisions`), the device (`device`), hooks (`hooks`), temperatures, languages and calibration
files (`calibration`), the `min_confidence` gate (`confidence`), long states (`long`) and
schemas (`structured`). Answers come from `kime.Kime`, which knows none of these.

Laya's torch-only switches (`fast`, `compile`, `compile_warmup`, `compile_cache`,
`compile_mode`, `backend`, `onnx_path`) are accepted and change nothing: kime has one forward,
compiled ahead of time, and no ONNX runtime. Their spellings are still checked as Laya checks
them, so a typo fails here as it would there.
"""
from __future__ import annotations

import threading
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

from ..cache import ANSWER_CACHE
from ..engine import Kime
from ..render import State
from .calibration import Calibration
from .call import agent_call
from .confidence import MinConfidence
from .device import Placement, TorchLikeDevice, choose
from .decider import Answers
from .driver import Step, run, run_async
from .hooks import (HookArg, HookRegistry, PredictHookArg, normalise_hooks, validate_timeout)
from .options import ROUTING_HINTS, CallOptions, refuse_unread
from .loading import (DEFAULT_MODEL, backend_name, builtin_alias, checkpoint_dir,
                      resolved_languages)
from .revisions import verify_digests
from .tok import LayaTokenizer



def __getattr__(name: str) -> Any:
    """`build_sequence` (`laya.agent.build_sequence`) reads as `kime.laya.common`'s until it is
    rebound; loaded on first read, so `import kime` does not load laya.common."""
    if name == "build_sequence":
        from .common import build_sequence

        return build_sequence
    raise AttributeError("module %r has no attribute %r" % (__name__, name))

Questions = Dict[Any, Dict[str, Any]]


def own(options: CallOptions, where: str) -> CallOptions:
    """`options` for an Agent: a routing hint is refused (Laya's integrations' wording), and so
    is a `model` pin, which names a checkpoint this agent cannot switch to."""
    refuse_unread(options, _one_checkpoint, where, ("model",) + ROUTING_HINTS)
    return options


def _one_checkpoint() -> None:
    """What an Agent reads of the options that choose a checkpoint: none (the signature
    `refuse_unread` asks)."""


class Agent(HookRegistry, Answers, Placement):
    """A Laya checkpoint behind Laya's `Agent` API. Build it with `kime.load` (or
    `Agent(model_id_or_path, ...)`, Laya's constructor), or around a loaded engine:
    `Agent(kime.Kime(...))`.

    Attributes (Laya's): `model_id`, `model_id_or_path`, `subfolder`, `revision` (the commit a
    Hub checkpoint was loaded at), `cfg` (its `rl_agent_config.json`), `temperature`,
    `temperature_by_options`, `temperature_raw`, `lang_temperatures`, `binning_map` (assigning
    them changes later answers, as in Laya), `device` (reads like a `torch.device`), `dtype`
    and `amp_enabled` (the precision it computes in, read like Laya's autocast dtype),
    `cpu_fallback_count` / `last_fallback_reason` (a GPU that could not run, so the CPU
    answers), `hooks`, `hooks_raise`, `hooks_concurrent`, `hooks_timeout`. `engine` is the
    `kime.Kime` underneath.
    """

    def __init__(
        self,
        model_id_or_path: Union[str, Kime] = DEFAULT_MODEL,
        device: Optional[str] = None,
        token: Optional[str] = None,
        subfolder: Optional[str] = None,
        fast: bool = False,
        compile: bool = False,
        revision: Optional[str] = None,
        expected_sha256: Optional[Dict[str, str]] = None,
        lang_temperatures: Optional[Dict[str, Dict[str, Any]]] = None,
        hooks: HookArg = None,
        on_predict_start: PredictHookArg = None,
        on_predict_end: PredictHookArg = None,
        hooks_raise: bool = True,
        hooks_concurrent: bool = True,
        hooks_timeout: Optional[float] = None,
        calibration: Optional[str] = None,
        backend: Optional[str] = None,
        compile_warmup: bool = True,
        compile_cache: bool = False,
        compile_mode: str = "default",
        *,
        precision: Optional[str] = None,
        threads: int = 0,
        answer_cache: int = ANSWER_CACHE,
    ):
        """Load a checkpoint (Laya's `Agent.__init__`; `kime.load` documents the arguments).

        `precision`, `threads` and `answer_cache` are kime's own, keyword-only: see `kime.Kime`.
        """
        if backend is not None and backend_name(backend) == "onnx":
            raise ValueError("use laya.load(..., backend='onnx') or ONNXAgent")
        if compile and not fast and backend is None and compile_mode not in ("default",
                                                                             "reduce-overhead"):
            raise ValueError("compile_mode must be 'default' or 'reduce-overhead'")
        self.hooks: List[Any] = normalise_hooks(hooks, on_predict_start, on_predict_end)
        self.hooks_raise = bool(hooks_raise)
        self.hooks_concurrent = bool(hooks_concurrent)
        self.hooks_timeout = validate_timeout(hooks_timeout)
        self._hooks_lock = None if hooks_concurrent else threading.RLock()
        self._hooks_mutex = threading.Lock()
        self.cpu_fallback_count = 0
        self.last_fallback_reason: Optional[str] = None
        self.revision: Optional[str] = None
        self.subfolder = subfolder
        if isinstance(model_id_or_path, Kime):
            self.engine = model_id_or_path
            self._owns_engine = False
            asked: Any = str(self.engine.backend.device)
            self.model_id_or_path: str = self.engine.model_id
        else:
            self.model_id_or_path = str(model_id_or_path)
            directory, self.revision = checkpoint_dir(self.model_id_or_path, subfolder, revision,
                                                       token)
            verify_digests(directory, expected_sha256)  # before any file is parsed
            asked = device if device is None or str(device).strip().lower() != "auto" else None
            # Laya's order of warnings: the device, the languages, then the checkpoint's values.
            target, fell_back = choose(asked, precision, threads)
            lang_temperatures = resolved_languages(directory, lang_temperatures)
            self.engine = Kime(directory, device=target, threads=threads,
                               answer_cache=answer_cache)
            self._owns_engine = True
            check = self.engine.gpu_check
            if fell_back is None and check is not None and not check.passed:
                fell_back = check.summary()  # the GPU failed the self-check: the CPU answers
            if fell_back is not None:
                self.cpu_fallback_count += 1
                self.last_fallback_reason = fell_back
        self.model_id: str = self.model_id_or_path
        self._device = TorchLikeDevice.of(self.engine.backend.device, asked)
        self.calibration = Calibration(self.engine, lang_temperatures, calibration,
                                       model_id_or_path=self.model_id_or_path,
                                       subfolder=subfolder)
        self._tok: Optional[LayaTokenizer] = None

    # --- Laya's attributes ------------------------------------------------------------------

    @property
    def tok(self) -> LayaTokenizer:
        """The checkpoint's tokenizer as Laya exposes it (a transformers fast tokenizer there):
        call it for ids and masks, read `mask_token`, ...; see `kime.laya.tok`."""
        if self._tok is None:
            self._tok = LayaTokenizer(self.engine.layouter.tok, self.model_id_or_path)
        return self._tok

    @property
    def answering(self) -> Any:
        """The engine the call pipeline runs rows on: `engine`, unless `laya.agent.
        build_sequence` was rebound, in which case rows are laid out by that function."""
        bound = globals().get("build_sequence")  # set only by rebinding it
        if bound is None:
            return self.engine
        from .common import build_sequence
        from .relaid import Relaid

        if bound is build_sequence:
            return self.engine
        return Relaid(self.engine, self.tok, bound)

    @property
    def cfg(self) -> Dict[str, Any]:
        """The checkpoint's `rl_agent_config.json`."""
        return self.calibration.cfg

    @property
    def temperature(self) -> List[float]:
        """Per-type temperatures applied (choice, score, noul), clamped."""
        return self.calibration.temperature

    @temperature.setter
    def temperature(self, value: List[float]) -> None:
        self.calibration.temperature = value

    @property
    def temperature_by_options(self) -> Dict[str, float]:
        """Per-bucket temperatures applied (`choice:3-5`, ...), clamped."""
        return self.calibration.temperature_by_options

    @temperature_by_options.setter
    def temperature_by_options(self, value: Dict[str, float]) -> None:
        self.calibration.temperature_by_options = value

    @property
    def temperature_raw(self) -> List[Any]:
        """The per-type temperatures as shipped, before clamping."""
        return self.calibration.temperature_raw

    @property
    def lang_temperatures(self) -> Dict[str, Dict[str, Any]]:
        """Per-language temperature overrides, keyed by primary subtag (`fr`)."""
        return self.calibration.lang_temperatures

    @lang_temperatures.setter
    def lang_temperatures(self, value: Dict[str, Dict[str, Any]]) -> None:
        self.calibration.lang_temperatures = value

    @property
    def binning_map(self) -> Optional[Dict[str, Dict[str, Any]]]:
        """The histogram map applied to `answer_confidence`, or None."""
        return self.calibration.binning_map

    @binning_map.setter
    def binning_map(self, value: Optional[Dict[str, Dict[str, Any]]]) -> None:
        self.calibration.binning_map = value

    # --- answering --------------------------------------------------------------------------

    def predict_batch(self, states: List[State], questions: Questions,
                      batch_size: Optional[int] = None, lang: Optional[str] = None,
                      hooks: HookArg = None,
                      on_predict_start: PredictHookArg = None,
                      on_predict_end: PredictHookArg = None,
                      hooks_raise: Optional[bool] = None,
                      hooks_timeout: Optional[float] = None,
                      max_len: Optional[int] = None,
                      head_max_len: Optional[int] = None,
                      sort_by_length: bool = False,
                      min_confidence: Optional[MinConfidence] = None) -> List[Dict[str, Any]]:
        """The same questions over many states, in shared forward passes; one result per state,
        in input order.

        `batch_size` caps the states per forward pass and `sort_by_length` groups states of
        similar length; in Laya both trade padding for memory. kime's rows are never padded and
        a row's answer does not depend on its batch, so neither changes any answer here.
        `lang` picks a language's temperatures (`lang_temperatures`); `min_confidence` (a float
        in [0, 1] or a per-bucket map) gates each answer (`abstention`, ...). Hooks run in
        Laya's order: start hooks, validation and inference, the gate, end hooks; `on_error`
        on a failure. `hooks_raise` / `hooks_timeout` override the agent's for this call.
        """
        options = CallOptions.take(locals())
        return run(agent_call(self, states, questions, options, batch_size=batch_size))

    def system_one(self, state: State, questions: Questions, lang: Optional[str] = None,
                   hooks: HookArg = None, on_predict_start: PredictHookArg = None,
                   on_predict_end: PredictHookArg = None, hooks_raise: Optional[bool] = None,
                   hooks_timeout: Optional[float] = None, max_len: Optional[int] = None,
                   head_max_len: Optional[int] = None,
                   min_confidence: Optional[MinConfidence] = None) -> Dict[str, Any]:
        """Answer typed questions about one state (every question in one forward pass): Laya's
        result dict with `model`, `answers` and `usage`. Arguments as in `predict_batch`."""
        return run(agent_call(self, [state], questions, CallOptions.take(locals())))[0]

    predict = system_one

    async def predict_batch_async(self, states: List[State], questions: Questions,
                                  batch_size: Optional[int] = None, lang: Optional[str] = None,
                                  hooks: HookArg = None,
                                  on_predict_start: PredictHookArg = None,
                                  on_predict_end: PredictHookArg = None,
                                  hooks_raise: Optional[bool] = None,
                                  hooks_timeout: Optional[float] = None,
                                  max_len: Optional[int] = None,
                                  head_max_len: Optional[int] = None,
                                  sort_by_length: bool = False,
                                  min_confidence: Optional[MinConfidence] = None
                                  ) -> List[Dict[str, Any]]:
        """`predict_batch` for asyncio: the loop never blocks (hooks, when there are any, run on
        a worker thread), and cancelling the task drops rows not yet on the device."""
        options = CallOptions.take(locals())
        return await run_async(agent_call(self, states, questions, options,
                                          batch_size=batch_size))

    async def predict_async(self, state: State, questions: Questions, lang: Optional[str] = None,
                            hooks: HookArg = None, on_predict_start: PredictHookArg = None,
                            on_predict_end: PredictHookArg = None,
                            hooks_raise: Optional[bool] = None,
                            hooks_timeout: Optional[float] = None, max_len: Optional[int] = None,
                            head_max_len: Optional[int] = None,
                            min_confidence: Optional[MinConfidence] = None) -> Dict[str, Any]:
        """`predict` for asyncio."""
        return (await run_async(agent_call(self, [state], questions,
                                           CallOptions.take(locals()))))[0]

    # --- the Decider protocol (`kime.laya.decider`): a routing hint or a pin is refused ----

    def _one(self, state: State, questions: Questions,
             options: CallOptions) -> "Step[Dict[str, Any]]":
        return (yield from agent_call(self, [state], questions, own(options, "Agent.predict")))[0]

    def _many(self, states: List[State], questions: Questions, options: CallOptions,
              batch_size: Optional[int]) -> "Step[List[Dict[str, Any]]]":
        return agent_call(self, states, questions, own(options, "Agent.predict_batch"),
                          batch_size=batch_size)

    def predict_long(self, state: State, questions: Questions, window: Optional[int] = None,
                     stride: Optional[int] = None, aggregate: str = "auto",
                     batch_size: Optional[int] = None, lang: Optional[str] = None,
                     hooks: HookArg = None, on_predict_start: PredictHookArg = None,
                     on_predict_end: PredictHookArg = None, hooks_raise: Optional[bool] = None,
                     hooks_timeout: Optional[float] = None) -> Dict[str, Any]:
        """Questions over a state longer than one row holds: the state is tokenized once, cut
        into overlapping windows (`window` tokens every `stride`), every window is answered in
        shared unpadded batches, and each question takes its answer from the deciding window
        (`answer["window"]`; see `kime.laya.long`). `usage["windows"]` counts the windows read.

        Hooks run as in Laya: around `predict` when the state fits one window, else around
        `predict_batch` over the window texts, so a start hook sees the windows in `ctx.states`.
        A hook that answers (`ctx.skip`) gives one unattributed result with `windows` 0; one
        that replaces the windows gets the answers of the states it left, unattributed.
        """
        from .long import scan_long

        return scan_long(self, state, questions, window, stride, aggregate, batch_size,
                         CallOptions.take(locals()))

    def decide(self, state: State, schema: Any = None, *, questions: Optional[Questions] = None,
               return_details: bool = False, min_confidence: Optional[MinConfidence] = None,
               **predict_kwargs: Any) -> Any:
        """Answer `state` against a JSON Schema or pydantic model (or explicit `questions`) and
        return typed values; see `kime.laya.structured`. Other keywords go to `predict`."""
        from .structured import decide

        return decide(self, state, schema, questions=questions, return_details=return_details,
                      min_confidence=min_confidence, **predict_kwargs)

    def decide_batch(self, states: List[State], schema: Any = None, *,
                     questions: Optional[Questions] = None, return_details: bool = False,
                     min_confidence: Optional[MinConfidence] = None,
                     **predict_kwargs: Any) -> List[Any]:
        """`decide` over many states in one `predict_batch` (shared forward passes)."""
        from .structured import decide_batch

        return decide_batch(self, states, schema, questions=questions,
                            return_details=return_details, min_confidence=min_confidence,
                            **predict_kwargs)

    # --- calibration ------------------------------------------------------------------------

    def save_calibration(self, path: str) -> None:
        """Write the temperatures (and binning map) with this checkpoint's identity, atomically,
        in Laya's format. Weights are never written."""
        self.calibration.save(path)

    def load_calibration(self, path: str) -> None:
        """Install a calibration file (kime's or Laya's): it replaces the temperatures and the
        binning map. A file fitted for another checkpoint warns and still loads."""
        self.calibration.load(path)

    # --- lifecycle --------------------------------------------------------------------------

    WARMUP_SHAPES = ((1, 64, 3), (4, 128, 5))
    """(rows, tokens, markers) `warmup` runs by default."""

    def warmup(self, shapes: Optional[Sequence[Tuple[int, int, int]]] = None) -> float:
        """Run the forward on synthetic rows of each (rows, tokens, markers) shape and return
        the seconds it took. kime's kernels are compiled ahead of time, so this only builds the
        plans and touches the weights the first requests would; no hook runs, nothing is
        cached. Tokens are capped at the checkpoint's `max_len`."""
        chosen = self.WARMUP_SHAPES if shapes is None else shapes
        return self.engine.warm([(int(r), int(t), int(m)) for r, t, m in chosen])

    def close(self) -> None:
        """Free the model (when this agent loaded it). The agent cannot answer afterwards."""
        if self._owns_engine:
            self.engine.close()

    def __enter__(self) -> "Agent":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return "Agent(model_id=%r, device=%s)" % (self.model_id, self.device)


def load(model_id_or_path: Union[str, Kime] = DEFAULT_MODEL, device: Optional[str] = None,
         token: Optional[str] = None, subfolder: Optional[str] = None, fast: bool = False,
         compile: bool = False, revision: Optional[str] = None,
         expected_sha256: Optional[Dict[str, str]] = None,
         lang_temperatures: Optional[Dict[str, Dict[str, Any]]] = None,
         hooks: HookArg = None, on_predict_start: PredictHookArg = None,
         on_predict_end: PredictHookArg = None, hooks_raise: bool = True,
         hooks_concurrent: bool = True, hooks_timeout: Optional[float] = None,
         calibration: Optional[str] = None, backend: Optional[str] = None,
         onnx_path: Optional[str] = None, compile_warmup: bool = True,
         compile_cache: bool = False, compile_mode: str = "default", *,
         precision: Optional[str] = None, threads: int = 0,
         answer_cache: int = ANSWER_CACHE) -> Agent:
    """Load a Laya checkpoint behind Laya's API (`laya.load`, argument for argument).

    `model_id_or_path`: a name or alias (`laya`, `multilingual`, `typed-decisions`, `ml`, ...,
    resolved to the bundle repo and its subfolder, as Laya does), a Hub repo id, an
    `hf://org/repo[/subfolder]` reference, or a checkpoint directory. A Hub checkpoint is taken
    from huggingface_hub's cache, or downloaded on first use with huggingface_hub's progress
    bars (HF_HUB_OFFLINE=1: never downloaded; a miss names the commands that fetch it).
    `token` (default $HF_TOKEN) is for private repos; `subfolder` picks one checkpoint out of a
    repo that bundles several; `revision` (or $LAYA_REVISION; `reviewed` = the reviewed pin)
    pins the commit; `expected_sha256` ({file: hex digest}, or $LAYA_SHA256_DIGESTS) is verified
    before any file is parsed.

    `device`: None/`auto` (a GPU when one runs here, else the CPU), `cpu`, `cuda`, `cuda:N`. A
    GPU that cannot run here, or that fails the CUDA self-check at load (`kime.gpu_check`),
    warns and the CPU answers, counted in `cpu_fallback_count` with the reason in
    `last_fallback_reason`; so do `mps` and `xpu`, which kime does not run. (`kime.Kime`
    refuses such a device instead.)

    `lang_temperatures`, `calibration` (a file from `save_calibration`): see `Agent`. `hooks`,
    `on_predict_start`, `on_predict_end`, `hooks_raise`, `hooks_concurrent`, `hooks_timeout`:
    see `kime.laya.hooks`.

    Accepted for Laya's sake and without effect: `fast`, `compile`, `compile_warmup`,
    `compile_cache`, `compile_mode`, `backend` (any of Laya's, `onnx` included) and
    `onnx_path`. kime's own, keyword-only: `precision`, `threads`, `answer_cache` (see
    `kime.Kime`; `answer_cache=0` switches the answer cache off, as a benchmark must).
    """
    if backend is not None and backend_name(backend) == "onnx":
        backend = None  # Laya's ONNX agent: kime answers with its own forward
    name, subfolder = builtin_alias(model_id_or_path, subfolder)
    return Agent(name, device=device, token=token, subfolder=subfolder, fast=fast,
                 compile=compile, revision=revision,
                 expected_sha256=expected_sha256, lang_temperatures=lang_temperatures,
                 hooks=hooks, on_predict_start=on_predict_start, on_predict_end=on_predict_end,
                 hooks_raise=hooks_raise, hooks_concurrent=hooks_concurrent,
                 hooks_timeout=hooks_timeout, calibration=calibration, backend=backend,
                 compile_warmup=compile_warmup, compile_cache=compile_cache,
                 compile_mode=compile_mode, precision=precision, threads=threads,
                 answer_cache=answer_cache)


RLAgent = Agent
"""Laya's older name for `Agent`."""

__all__ = ["Agent", "RLAgent", "load"]
