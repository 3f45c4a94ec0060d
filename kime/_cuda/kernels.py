"""The front of `kernels.cu`: compile it once per activation type, size each kernel's grid, and
return launches a plan can replay.

Each method takes device arrays (or None for an absent bias) and sizes, and returns a `Launch`:
the kernel with its grid, block and arguments bound, so a plan lowers its forward pass into a flat
list once and runs (or captures) it without Python work per kernel. Pointers are passed as
integers, which is what a CUDA graph keeps anyway.

The tensor-core attention (`attention_mma`) needs sm_80 and a head size that is a multiple of 16
up to 128; anything else, and the whole FP32 path, uses `attention_simple`.

A parallel-layout batch runs `rope_pos` and the `_par` attention instances (`Parallel`, the
metadata fields they read); `rope` and `attention` pick them when given one, and otherwise build
exactly the launches a sequential batch always had. A sequential checkpoint's model compiles the
`_par` instances only if a parallel batch ever comes (a second module, built before any capture).
"""
from __future__ import annotations

import os
from typing import Any, Dict, Iterable, NamedTuple, Optional, Sequence, Tuple

import numpy as np

from ..errors import Unsupported

SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "kernels.cu")
MAX_PER_THREAD = 16  # kernels.cu: a token's row is held in registers, d <= 16 * block
ACT_MAX = 256  # kernels.cu: the act head's hidden width and outputs
MAX_HEAD_DIM = 256
GLOBAL_WINDOW = 1 << 30  # "no window": larger than any row


def source() -> str:
    with open(SOURCE, encoding="utf-8") as f:
        return f.read()


def options(half: bool) -> Tuple[str, ...]:
    return ("-DKIME_HALF",) if half else ()


def mma_warps(head_dim: int) -> int:
    """Warps per block of the tensor-core attention: four keep 36 KiB of shared memory at a head
    size of 64; larger heads take two."""
    return 4 if head_dim <= 64 else 2


def takes_mma(head_dim: int) -> bool:
    return head_dim % 16 == 0 and head_dim <= 128


def name_expressions(half: bool, head_dims: Iterable[int], mma: bool,
                     variant: str = "") -> Tuple[str, ...]:
    """The template instances a model needs (NVRTC compiles only those); `variant` "_par" names
    the parallel layout's."""
    dims = sorted(set(head_dims))
    names = ["attention_simple%s<%d>" % (variant, hd) for hd in dims]
    if half and mma:
        names += ["attention_mma%s<%d, %d>" % (variant, hd, mma_warps(hd)) for hd in dims
                  if takes_mma(hd)]
    return tuple(names)


class Parallel(NamedTuple):
    """The metadata fields (device arrays) a parallel-layout batch's rope and attention read:
    position ids, option ids and each token's row reach (layout.py)."""

    pos: Any
    opt: Any
    shift: Any


def ptr(array: Any) -> np.uint64:
    """A device array's address as a kernel argument; None is the null pointer."""
    return np.uint64(0 if array is None else array.data.ptr)


class Launch:
    """One kernel launch with everything bound."""

    __slots__ = ("fn", "grid", "block", "args", "name")

    def __init__(self, fn: Any, grid: Tuple[int, ...], block: Tuple[int, ...],
                 args: Tuple[Any, ...], name: str):
        self.fn, self.grid, self.block, self.args, self.name = fn, grid, block, args, name

    def __call__(self) -> None:
        self.fn(self.grid, self.block, self.args)

    def __repr__(self) -> str:
        return "Launch(%s, grid=%s, block=%s)" % (self.name, self.grid, self.block)


def capture(stream: Any, ops: Sequence[Any]) -> Tuple[Any, Optional[str]]:
    """`ops` captured on `stream` into a CUDA graph: (graph, None), or (None, why) where the
    capture failed (the caller then runs them eagerly)."""
    stream.begin_capture()
    try:
        for op in ops:
            op()
    except Exception as e:
        try:
            stream.end_capture()
        except Exception:
            pass
        return None, "%s: %s" % (type(e).__name__, e)
    return stream.end_capture(), None


def _blocks(n: int, per: int) -> int:
    return max(1, min(-(-n // per), 65535))


class Kernels:
    """The compiled module of one activation type and the launches built from it.

    `mma` asks for the tensor-core attention where the device and head size allow it; `mma_ok`
    says whether the device does (compute capability 8.0 or newer).
    """

    def __init__(self, cupy: Any, half: bool, head_dims: Sequence[int], mma: bool, mma_ok: bool):
        for hd in head_dims:
            if hd > MAX_HEAD_DIM or hd % 2:
                raise Unsupported("attention head size %d: the CUDA backend runs even head sizes "
                                  "up to %d" % (hd, MAX_HEAD_DIM))
        self.cupy = cupy
        self.half = half
        self.use_mma = bool(half and mma and mma_ok)
        self.head_dims = tuple(head_dims)
        self.names = name_expressions(half, head_dims, self.use_mma)
        self.module = cupy.RawModule(code=source(), options=options(half),
                                     name_expressions=self.names)
        # Load every function now: a module must not load for the first time inside a capture.
        self._fn: Dict[str, Any] = {name: self.module.get_function(name) for name in (
            "embed_norm", "add_norm", "final_norm", "geglu", "bias_act", "rope", "gather_norm",
            "score", "act_head", "mean_pool") + self.names}
        self.parallel_module: Any = None
        """The parallel layout's instances, compiled on the first parallel lowering."""

    def load_parallel(self) -> None:
        """Compile and load `rope_pos` and the `_par` attention instances (once): a plan calls
        this while lowering, before anything is captured."""
        if self.parallel_module is not None:
            return
        names = name_expressions(self.half, self.head_dims, self.use_mma, "_par")
        self.parallel_module = self.cupy.RawModule(code=source(), options=options(self.half),
                                                   name_expressions=names)
        for name in ("rope_pos",) + names:
            self._fn[name] = self.parallel_module.get_function(name)

    @staticmethod
    def norm_block(d: int) -> int:
        """Threads of a one-block-per-token kernel for width `d`."""
        block = 128 if d <= 128 * MAX_PER_THREAD else 256
        if d > block * MAX_PER_THREAD:
            raise Unsupported("hidden size %d: the CUDA backend runs hidden sizes up to %d"
                              % (d, 256 * MAX_PER_THREAD))
        return block

    def _launch(self, name: str, grid: Tuple[int, ...], block: Tuple[int, ...],
                *args: Any) -> Launch:
        return Launch(self._fn[name], grid, block, tuple(args), name)

    # --- one block per token ---------------------------------------------------------------------

    def embed_norm(self, ids: Any, table: Any, w: Any, b: Optional[Any], eps: float, n: int, d: int,
                   x: Any, h: Any) -> Launch:
        return self._launch("embed_norm", (n,), (self.norm_block(d),), ptr(ids), ptr(table), ptr(w),
                            ptr(b), np.float32(eps), np.int32(d), ptr(x), ptr(h))

    def add_norm(self, x: Any, y: Any, ybias: Optional[Any], w: Optional[Any], b: Optional[Any],
                 eps: float, n: int, d: int, h: Any) -> Launch:
        return self._launch("add_norm", (n,), (self.norm_block(d),), ptr(x), ptr(y), ptr(ybias),
                            ptr(w), ptr(b), np.float32(eps), np.int32(d), ptr(h))

    def final_norm(self, x: Any, y: Any, ybias: Optional[Any], fw: Any, fb: Optional[Any],
                   eps: float, type_emb: Any, qtok: Any, w1: Optional[Any], b1: Optional[Any],
                   eps1: float, n: int, d: int, h: Any) -> Launch:
        return self._launch("final_norm", (n,), (self.norm_block(d),), ptr(x), ptr(y), ptr(ybias),
                            ptr(fw), ptr(fb), np.float32(eps), ptr(type_emb), ptr(qtok), ptr(w1),
                            ptr(b1), np.float32(eps1), np.int32(d), ptr(h))

    def rope(self, qkv: Any, bias: Optional[Any], cos: Any, sin: Any, lo: Any, n: int, d: int,
             head_dim: int, parallel: Optional[Parallel] = None) -> Launch:
        """At each token's index in its row, or at its position id with `parallel`."""
        if parallel is not None:
            self.load_parallel()
            return self._launch("rope_pos", (n,), (128,), ptr(qkv), ptr(bias), ptr(cos),
                                ptr(sin), ptr(parallel.pos), np.int32(d), np.int32(head_dim))
        return self._launch("rope", (n,), (128,), ptr(qkv), ptr(bias), ptr(cos), ptr(sin), ptr(lo),
                            np.int32(d), np.int32(head_dim))

    def gather_norm(self, x: Any, mtok: Any, w: Any, b: Any, eps: float, n: int, d: int,
                    out: Any) -> Launch:
        return self._launch("gather_norm", (n,), (self.norm_block(d),), ptr(x), ptr(mtok), ptr(w),
                            ptr(b), np.float32(eps), np.int32(d), ptr(out))

    # --- elementwise -------------------------------------------------------------------------

    def geglu(self, big: Any, bias: Optional[Any], n: int, inter: int, out: Any) -> Launch:
        count = n * inter
        return self._launch("geglu", (_blocks(count, 256),), (256,), ptr(big), ptr(bias),
                            np.int32(inter), np.int64(count), ptr(out))

    def bias_act(self, io: Any, bias: Any, n: int, width: int, relu: bool) -> Launch:
        count = n * width
        return self._launch("bias_act", (_blocks(count, 256),), (256,), ptr(io), ptr(bias),
                            np.int32(width), np.int64(count), np.int32(1 if relu else 0))

    # --- attention ---------------------------------------------------------------------------

    def attention(self, qkv: Any, lo: Any, hi: Any, n: int, d: int, heads: int,
                  half_window: Optional[int], out: Any,
                  parallel: Optional[Parallel] = None) -> Launch:
        """`half_window` None is a global layer. `n` is a multiple of 16 (a plan's slots).
        `parallel`: the parallel layout's option mask and position-id window (`_par`)."""
        hd = d // heads
        scale = np.float32(hd ** -0.5)
        hw = np.int32(GLOBAL_WINDOW if half_window is None else half_window)
        variant = ""
        fields: Tuple[Any, ...] = (ptr(lo), ptr(hi))
        if parallel is not None:
            self.load_parallel()
            variant = "_par"
            fields += (ptr(parallel.pos), ptr(parallel.opt), ptr(parallel.shift))
        args = (ptr(qkv),) + fields + (np.int32(n), np.int32(d), scale, hw, ptr(out))
        if self.use_mma and takes_mma(hd):
            warps = mma_warps(hd)
            return self._launch("attention_mma%s<%d, %d>" % (variant, hd, warps),
                                (-(-n // (16 * warps)), heads), (32 * warps,), *args)
        return self._launch("attention_simple%s<%d>" % (variant, hd), (-(-n // 64), heads),
                            (64,), *args)

    def mean_pool(self, x: Any, rfirst: Any, hi: Any, rows: int, n: int, d: int,
                  out: Any) -> Launch:
        """An embedding batch's output: each of `rows` rows' mean over its slots of `x` (a plan
        of `n` slots)."""
        return self._launch("mean_pool", (rows,), (128,), ptr(x), ptr(rfirst), ptr(hi),
                            np.int32(n), np.int32(d), ptr(out))

    # --- the heads ---------------------------------------------------------------------------

    def score(self, s1: Any, b1: Any, w3: Any, b3: Any, n: int, d: int, logits: Any) -> Launch:
        return self._launch("score", (-(-n // 8),), (256,), ptr(s1), ptr(b1), ptr(w3), ptr(b3),
                            np.int32(d), np.int32(n), ptr(logits))

    def act_head(self, x: Any, logits: Any, mcu: Any, rfirst: Any, w0t: Any, b0: Any, w2: Any,
                 b2: Any, rows: int, d: int, hidden: int, n_act: int, act: Any) -> Launch:
        if hidden > ACT_MAX or n_act > ACT_MAX:
            raise Unsupported("act head of %d hidden units and %d outputs: the CUDA backend runs "
                              "up to %d of each" % (hidden, n_act, ACT_MAX))
        return self._launch("act_head", (rows,), (256,), ptr(x), ptr(logits), ptr(mcu),
                            ptr(rfirst), ptr(w0t), ptr(b0), ptr(w2), ptr(b2), np.int32(d),
                            np.int32(hidden), np.int32(n_act), ptr(act))
