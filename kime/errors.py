"""The exceptions kime raises. Imports nothing from kime, so every module can use it.

Each failure has its own type with a message that names the thing and what to do. Request
problems subclass `ValueError` (and argument-shape problems also `TypeError`) so handlers
written for Laya's `Agent` keep catching what they caught before.
"""
from __future__ import annotations

import json
import os
import sys
import warnings
from types import FrameType
from typing import Dict, List, Optional, Sequence, Tuple, Type, TypedDict


class Problem(TypedDict):
    """One validation problem in FastAPI's 422 format, as the server sends it and Laya's
    callers read it."""

    loc: List[object]
    """Where: `["questions", qid, field]`, `["states", i]`, prefixed by a request's index in a
    batch. A question id is the caller's key as given, so it need not be a string."""
    msg: str
    """Laya's message when Laya has one for this problem."""
    type: str
    """FastAPI's kind of problem (`missing`, `type_error.dict`, `value_error.too_long`, ...)."""
    input: object
    """The offending value, made JSON-safe by `problem`."""


class KimeError(Exception):
    """Base class of every error kime raises on purpose."""


class InvalidRequest(KimeError, ValueError):
    """A request that does not validate. `problems` lists every problem, not just the first.

    `str(err)` is Laya's message when there is one problem, so code matching Laya's text keeps
    working; with several it lists them all, one per line.
    """

    def __init__(self, problems: Sequence[Problem]):
        self.problems: List[Problem] = list(problems)
        if len(self.problems) == 1:
            text = self.problems[0]["msg"]
        else:
            text = "%d problems in the request:\n" % len(self.problems) + "\n".join(
                "- " + _where(p) + p["msg"] for p in self.problems)
        super().__init__(text)

    def to_json(self) -> Dict[str, List[Dict[str, object]]]:
        """The body FastAPI would send with a 422: `{"detail": [problem, ...]}`."""
        return {"detail": [dict(p) for p in self.problems]}

    def __reduce__(self) -> Tuple[Type["InvalidRequest"], Tuple[List[Problem]]]:
        # keep pickling (multiprocessing, futures) working
        return (type(self), (self.problems,))


def _where(p: Problem) -> str:
    """`request N: ` for a problem located in one request of a batch (loc starts with its index)."""
    loc = p.get("loc") or ()
    if loc and isinstance(loc[0], int) and not isinstance(loc[0], bool):
        return "request %d: " % loc[0]
    return ""


class InvalidArgument(InvalidRequest, TypeError):
    """The call's arguments have the wrong shape: Laya raises `TypeError` for these."""


class TooLong(InvalidRequest):
    """A question whose option markers do not all fit in `max_len`. Laya raises the same."""


class ModelNotFound(KimeError, FileNotFoundError):
    """A model name, alias, `hf://` reference or path that does not resolve to a checkpoint."""


class CheckpointError(KimeError, ValueError):
    """A checkpoint that is missing a file or tensor, or whose tensors do not fit its config."""


class CheckpointFileMissing(CheckpointError, FileNotFoundError):
    """A file the checkpoint must have is not there (Laya raises `FileNotFoundError`)."""


class TokenizerError(CheckpointError):
    """The checkpoint's tokenizer does not load, or lacks a special token kime needs."""


class Unsupported(KimeError, RuntimeError):
    """A device, precision or checkpoint feature this build or machine cannot run."""


class BadOption(KimeError, ValueError):
    """An engine option (device, precision, threads) that is not a value kime knows."""


class CudaUnavailable(Unsupported):
    """device='cuda' cannot run on this machine; the subclass says why."""


class CupyMissing(CudaUnavailable):
    """CuPy is not installed."""


class CudaMismatch(CudaUnavailable):
    """CuPy is installed but built for a CUDA major this machine's driver or libraries lack."""


class NoGpu(CudaUnavailable):
    """No NVIDIA driver, or no GPU visible to it."""


class BadDeviceOrdinal(CudaUnavailable, BadOption):
    """`cuda:N` with N past the GPUs this machine has."""


class CudaSelfCheckFailed(CudaUnavailable):
    """The GPU answered kime's probe at load differently from the CPU backend's FP32, beyond
    the precision's bound, or a probe row's bits changed between alone and in a batch, so it
    answers nothing. `check` is the whole verdict (`kime.gpu_check.GpuCheck`): every output
    outside its bound, the largest first."""

    def __init__(self, message: str, check: object = None):
        super().__init__(message)
        self.check = check

    def __reduce__(self) -> Tuple[Type["CudaSelfCheckFailed"], Tuple[str, object]]:
        return (type(self), (str(self), self.check))


class NonFiniteLogits(KimeError, FloatingPointError):
    """The model produced NaN or infinity: never turned into a probability."""


class BackendError(KimeError, RuntimeError):
    """A backend broke its contract (a row left unanswered, outputs of the wrong size) or was
    used after `close()`. Never a user's mistake: it is raised instead of a wrong answer."""


def problem(loc: Sequence[object], msg: str, type_: str, input_: object) -> Problem:
    """One problem in FastAPI's format. `input` is made JSON-safe so the 422 body serialises."""
    return {"loc": list(loc), "msg": msg, "type": type_, "input": _json_safe(input_)}


def relocated(p: Problem, prefix: Sequence[object]) -> Problem:
    """`p` located inside a larger argument (a request's index in a batch, the batch's own
    place in a call): `prefix` goes before its `loc`; the original is left alone."""
    return {**p, "loc": list(prefix) + p["loc"]}


def _json_safe(value: object) -> object:
    """`value` when strict JSON can carry it, else its repr: a 422 body must serialise even when
    the offending input held NaN, infinity, bytes or an object (strict, because HTTP clients and
    Starlette refuse NaN), or was nested too deeply to encode."""
    try:
        json.dumps(value, allow_nan=False)
        return value
    except (TypeError, ValueError, RecursionError):
        try:
            return repr(value)
        except RecursionError:
            return "<%s nested too deeply to show>" % type(value).__name__


_PACKAGE = os.path.dirname(os.path.abspath(__file__)) + os.sep


def warn_caller(message: str, category: Type[Warning] = RuntimeWarning) -> None:
    """Warn at the first frame outside kime, so the warning names the user's line (say, their
    `kime.load(...)`) however deep inside kime it was raised."""
    level = 2  # stacklevel 2 is warn_caller's caller, frame 1
    frame: Optional[FrameType] = sys._getframe(1)
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(_PACKAGE):
        level += 1
        frame = frame.f_back
    warnings.warn(message, category, stacklevel=level)
