"""The CUDA backend on a CPU: a stand-in for CuPy whose "device" arrays are NumPy arrays, and
stand-ins for the kernels and GEMMs that run the float64 references of tests/kernels/reference.py.

Everything else is the real backend: the plan's arena, its lowered list of launches, the layout of
a batch into slots, the one-copy metadata upload (a real memmove), the graph capture and replay
(launches made while capturing are recorded, not run) and the split on running out of memory.
So the lowering, the slot layout and the masks are checked against the NumPy reference forward
pass on any machine; the kernels themselves are checked against the same references on a GPU.
"""
from __future__ import annotations

import contextlib
import ctypes
from typing import Any, Callable, List, Optional

import numpy as np

from ..kernels import reference as ref
from . import parallel_reference as par_ref


class _Pointer:
    def __init__(self, ptr: int):
        self.ptr = ptr


class DevArray(np.ndarray):
    """A NumPy array that answers `.data.ptr` like a CuPy array."""

    @property
    def data(self) -> _Pointer:  # type: ignore[override]
        return _Pointer(self.ctypes.data)


class Pinned(bytearray):
    def size(self) -> int:
        return len(self)


class OutOfMemoryError(MemoryError):
    pass


class FakeGraph:
    def __init__(self, recorded: List[Callable[[], None]]):
        self.recorded = recorded
        self.launches = 0

    def launch(self, stream: Any = None) -> None:
        self.launches += 1
        for op in self.recorded:
            op()


class FakeStream:
    ptr = 0

    def __init__(self, owner: Optional["FakeCupy"] = None):
        self.owner = owner
        self.recording: Optional[List[Callable[[], None]]] = None

    def __enter__(self) -> "FakeStream":
        if self.owner is not None:
            self.owner.current.append(self)
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.owner is not None:
            self.owner.current.pop()
        return None

    def synchronize(self) -> None:
        pass

    def begin_capture(self) -> None:
        self.recording = []

    def end_capture(self) -> FakeGraph:
        graph = FakeGraph(self.recording or [])
        self.recording = None
        return graph


class FakeCupy:
    """The slice of CuPy the backend uses. `limit` makes any single allocation above that many
    bytes raise OutOfMemoryError, to drive the split-on-OOM path. `transfers` records the stream
    current (None: the null stream) at each `zeros` and `asarray`, which CuPy enqueues (a memset, an
    asynchronous host-to-device copy) on the current stream."""

    __version__ = "13.0.0"

    def __init__(self, limit: Optional[int] = None):
        self.limit = limit
        self.streams: List[FakeStream] = []
        self.current: List[FakeStream] = []
        self.transfers: List[Optional[FakeStream]] = []
        fake = self

        class _Runtime:
            memcpyHostToDevice = 1
            memcpyDeviceToHost = 2

            @staticmethod
            def memcpyAsync(dst: int, src: int, size: int, kind: int, stream: int) -> None:
                ctypes.memmove(dst, src, size)

            @staticmethod
            def getDeviceProperties(ordinal: int) -> dict:
                return {"name": b"Emulated GPU", "major": 9, "minor": 0}

            @staticmethod
            def getDeviceCount() -> int:
                return 1

            @staticmethod
            def driverGetVersion() -> int:
                return 12090

            @staticmethod
            def runtimeGetVersion() -> int:
                return 12090

        class _Memory:
            OutOfMemoryError = OutOfMemoryError

        class _Cuda:
            runtime = _Runtime
            memory = _Memory

            @staticmethod
            def Device(ordinal: int = 0) -> Any:
                return contextlib.nullcontext()

            @staticmethod
            def Stream(non_blocking: bool = False) -> FakeStream:
                stream = FakeStream(fake)
                fake.streams.append(stream)
                return stream

            @staticmethod
            def alloc_pinned_memory(nbytes: int) -> Pinned:
                return Pinned(nbytes)

        self.cuda = _Cuda

    def _check(self, nbytes: int) -> None:
        if self.limit is not None and nbytes > self.limit:
            raise OutOfMemoryError("emulated: %d bytes over the %d-byte limit"
                                   % (nbytes, self.limit))

    def zeros(self, shape: Any, dtype: Any) -> DevArray:
        out = np.zeros(shape, dtype=dtype)
        self._check(out.nbytes)
        self.transfers.append(self.current[-1] if self.current else None)
        return out.view(DevArray)

    def asarray(self, array: Any) -> DevArray:
        self.transfers.append(self.current[-1] if self.current else None)
        return np.array(array).view(DevArray)

    def get_default_memory_pool(self) -> Any:
        return _Pool()

    def get_default_pinned_memory_pool(self) -> Any:
        return _Pool()


class _Pool:
    def free_all_blocks(self) -> None:
        pass


class FakeLaunch:
    """A launch of a reference in place of a kernel; recorded instead of run while its stream
    captures."""

    def __init__(self, cupy: FakeCupy, name: str, fn: Callable[[], None]):
        self.cupy, self.name, self.fn = cupy, name, fn

    def __call__(self) -> None:
        for stream in self.cupy.streams:
            if stream.recording is not None:
                stream.recording.append(self.fn)
                return
        self.fn()


def _rows(a: Any, n: int, width: int) -> np.ndarray:
    """The first n rows of width `width` of a device buffer, as a writable view."""
    return np.asarray(a).reshape(-1)[:n * width].reshape(n, width)


class FakeKernels:
    """`kime._cuda.kernels.Kernels` with every kernel replaced by its reference."""

    def __init__(self, cupy: FakeCupy, half: bool, head_dims: Any, mma: bool, mma_ok: bool):
        self.cupy = cupy
        self.half = half
        self.use_mma = bool(half and mma and mma_ok)
        self.parallel_loaded = False

    def load_parallel(self) -> None:
        self.parallel_loaded = True

    def _l(self, name: str, fn: Callable[[], None]) -> FakeLaunch:
        return FakeLaunch(self.cupy, name, fn)

    def embed_norm(self, ids, table, w, b, eps, n, d, x, h):
        def run() -> None:
            v = ref.embed_norm(np.asarray(ids)[:n], table, w, b, eps)
            _rows(x, n, d)[:] = v
            _rows(h, n, d)[:] = v
        return self._l("embed_norm", run)

    def add_norm(self, x, y, ybias, w, b, eps, n, d, h):
        def run() -> None:
            s = ref.add(_rows(x, n, d), _rows(y, n, d), ybias)
            _rows(x, n, d)[:] = s
            if w is not None:
                _rows(h, n, d)[:] = ref.layer_norm(_rows(x, n, d), w, b, eps)
        return self._l("add_norm", run)

    def final_norm(self, x, y, ybias, fw, fb, eps, type_emb, qtok, w1, b1, eps1, n, d, h):
        def run() -> None:
            xn, hn = ref.final_norm(_rows(x, n, d), _rows(y, n, d), ybias, fw, fb, eps, type_emb,
                                    np.asarray(qtok)[:n], w1, b1, eps1)
            _rows(x, n, d)[:] = xn
            if hn is not None:
                _rows(h, n, d)[:] = ref.layer_norm(_rows(x, n, d), w1, b1, eps1)
        return self._l("final_norm", run)

    def rope(self, qkv, bias, cos, sin, lo, n, d, head_dim, parallel=None):
        if parallel is not None:
            self.load_parallel()  # as Kernels does

            def run_pos() -> None:
                view = _rows(qkv, n, 3 * d)
                view[:] = ref.rope(view, bias, cos, sin, np.asarray(lo)[:n], d, head_dim,
                                   np.asarray(parallel.pos)[:n])
            return self._l("rope_pos", run_pos)

        def run() -> None:
            view = _rows(qkv, n, 3 * d)
            view[:] = ref.rope(view, bias, cos, sin, np.asarray(lo)[:n], d, head_dim)
        return self._l("rope", run)

    def attention(self, qkv, lo, hi, n, d, heads, half_window, out, parallel=None):
        if parallel is not None:
            self.load_parallel()  # as Kernels does

            def run_par() -> None:
                # Over the keys the kernel's widened key range visits too (par_ref.key_ranges).
                _rows(out, n, d)[:] = par_ref.attention(
                    _rows(qkv, n, 3 * d), np.asarray(lo)[:n], np.asarray(hi)[:n],
                    np.asarray(parallel.pos)[:n], np.asarray(parallel.opt)[:n], d, heads,
                    half_window, np.asarray(parallel.shift)[:n])
            return self._l("attention_par", run_par)

        def run() -> None:
            _rows(out, n, d)[:] = ref.attention(_rows(qkv, n, 3 * d), np.asarray(lo)[:n],
                                                np.asarray(hi)[:n], d, heads, half_window)
        return self._l("attention", run)

    def geglu(self, big, bias, n, inter, out):
        def run() -> None:
            _rows(out, n, inter)[:] = ref.geglu(_rows(big, n, 2 * inter), bias, inter)
        return self._l("geglu", run)

    def bias_act(self, io, bias, n, width, relu):
        def run() -> None:
            view = _rows(io, n, width)
            view[:] = ref.bias_act(view, bias, relu)
        return self._l("bias_act", run)

    def gather_norm(self, x, mtok, w, b, eps, n, d, out):
        def run() -> None:
            _rows(out, n, d)[:] = ref.gather_norm(x, np.asarray(mtok)[:n], w, b, eps)
        return self._l("gather_norm", run)

    def score(self, s1, b1, w3, b3, n, d, logits):
        def run() -> None:
            np.asarray(logits)[:n] = ref.score(_rows(s1, n, d), b1, w3, b3)
        return self._l("score", run)

    def mean_pool(self, x, rfirst, hi, rows, n, d, out):
        def run() -> None:
            # hi[n] = n: a row starting at the plan's end is empty, as the kernel reads it.
            bounds = np.append(np.asarray(hi)[:n], n)
            _rows(out, rows, d)[:] = ref.mean_pool_slots(np.asarray(x).reshape(-1, d)[:n],
                                                         np.asarray(rfirst)[:rows], bounds)
        return self._l("mean_pool", run)

    def act_head(self, x, logits, mcu, rfirst, w0t, b0, w2, b2, rows, d, hidden, n_act, act):
        def run() -> None:
            mcu_h = np.asarray(mcu)[:rows + 1]
            out = ref.act_head(x, logits, mcu_h, np.asarray(rfirst)[:rows], w0t, b0, w2, b2)
            has = np.diff(mcu_h) > 0
            np.asarray(act)[:rows][has] = out[has]
        return self._l("act_head", run)


class FakeGemm:
    """`kime._cuda.gemm.Gemm` as a NumPy matmul in float64, output in the buffer's type. Float64,
    like every kernel reference here: BLAS may block a float32 product differently for another
    batch size (OpenBLAS's Haswell kernel does), which moved a row's logits by 1.5e-6 between a
    batch and the row alone; in float64 that stays below float32's precision."""

    def __init__(self, cublas: Any, stream_ptr: int, half: bool, cupy: Optional[FakeCupy] = None):
        self.cupy = cupy
        self.half = half

    def version(self) -> str:
        return "120901"

    def call(self, x, w, y, m, n, k, name, chunk=None):
        def run() -> None:
            a = _rows(x, m, k).astype(np.float64)
            b = _rows(w, n, k).astype(np.float64)
            _rows(y, m, n)[:] = a @ b.T
        return FakeLaunch(self.cupy, "gemm " + name, run)  # type: ignore[arg-type]
