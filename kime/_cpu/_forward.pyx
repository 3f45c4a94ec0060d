# cython: language_level=3
"""The compiled forward pass: one call per batch, the GIL released, no allocation.

`Model` points the C model struct at the arrays of a packed weight blob (kept alive here);
`Arena` owns the activation buffers of one bucket, allocated once; `Model.run` hands both and
the batch buffers to `kime_forward` (csrc/forward.c). Python touches a forward pass once.

`Model.embed` runs the encoder alone and mean-pools each row (`kime_embed`): an embedding
batch, which reuses the same arena. `layer_norm`, `mean_pool`, `act_features` and `act_head` are
test entries only: thin wrappers that check
shapes, drop the GIL and call the very C functions the forward pass runs, so each piece has a
kernel test of its own against a float64 reference (tests/kernels/). `pool_probe` runs one step
of the forward pass's thread pool, for the pool's own tests.
"""
import numpy as np

cimport numpy as cnp
from libc.stdint cimport int32_t, uint16_t

cnp.import_array()

cdef extern from "pool.h":
    int kime_pool_spin_us() nogil
    void kime_pool_set_spin_us(int us) nogil
    int kime_pool_threaded() nogil
    void kime_pool_probe(int nthreads, int ntasks, const int *busy_us, int *tids) nogil

cdef extern from "kernels.h":
    int kime_isa_detect() nogil
    const char *kime_isa_name(int isa) nogil
    size_t kime_gemm_scratch_floats(int isa, int K, int nthreads) nogil
    size_t kime_attention_scratch_floats(int precision, int tokens, int heads, int hd,
                                         int nthreads) nogil
    enum: KIME_ATTN_F32
    enum: KIME_ATTN_BF16

cdef extern from "qgemm.h":
    size_t kime_qgemm_scratch_bytes(int isa, int K, int nthreads) nogil

cdef extern from "bgemm.h":
    const char *kime_bgemm_missing(int isa) nogil
    size_t kime_bgemm_scratch_bytes(int K, int nthreads) nogil

cdef extern from "kernels.h":
    size_t kime_gemm_packed_floats(int isa, int N, int K, int geglu) nogil

cdef extern from "forward.h":
    enum: KIME_MAX_LAYERS
    enum: KIME_ACT_HIDDEN
    enum: KIME_PREC_F32
    enum: KIME_PREC_INT8
    enum: KIME_PREC_BF16
    ctypedef struct kime_layer:
        const float *norm_w
        const float *norm_b
        const float *qkv
        const float *qkv_b
        const float *out
        const float *out_b
        const float *norm2_w
        const float *norm2_b
        const float *up
        const float *up_b
        const float *down
        const float *down_b
        int is_global
        int attn
        int prec
    ctypedef struct kime_model:
        int isa, int8, qisa, bf16, d, vocab, layers, heads, inter, half_window
        float norm_eps
        const uint16_t *tok_emb
        const float *emb_norm_w
        const float *emb_norm_b
        const float *final_norm_w
        const float *final_norm_b
        kime_layer enc[KIME_MAX_LAYERS]
        const float *cos_global
        const float *sin_global
        const float *cos_local
        const float *sin_local
        int max_pos
        const float *type_emb
        int head_layers, head_heads
        kime_layer head[KIME_MAX_LAYERS]
        const float *sc_norm_w
        const float *sc_norm_b
        const float *sc1
        const float *sc1_b
        const float *sc3
        float sc3_b
        const float *act0
        const float *act0_b
        const float *act2
        const float *act2_b
        int n_act
    ctypedef struct kime_arena:
        int max_tokens, max_rows, max_markers
        float *x
        float *h
        float *qkv
        float *attn
        float *ffn
        float *m
        float *m2
        float *act_in
        float *act_h
        int32_t *qcu
        float *gemm_scratch
        float *attn_scratch
        void *qgemm_scratch
        void *bgemm_scratch
    int kime_forward(const kime_model *m, const kime_arena *a, const int32_t *ids,
                     const int32_t *cu, int rows, const int32_t *markers, const int32_t *mcu,
                     const int32_t *qtype, const int32_t *pos, const int32_t *opt,
                     float *logits, float *act, int nthreads) nogil
    int kime_embed(const kime_model *m, const kime_arena *a, const int32_t *ids,
                   const int32_t *cu, int rows, float *pooled, int nthreads) nogil
    void kime_mean_pool(const float *x, const int32_t *cu, int rows, int d, float *out,
                        int nthreads) nogil
    void kime_layer_norm(const float *x, float *y, int n, int d, const float *w, const float *b,
                         float eps, int nthreads) nogil
    void kime_act_features(const float *logits, int k, float *out) nogil
    int kime_fused_layer(int n, int nthreads) nogil
    void kime_act_head(int isa, const float *x, const int32_t *cu, int rows, int d,
                       const float *logits, const int32_t *mcu, const float *w0, const float *b0,
                       const float *w2, const float *b2, int n_act, float *act_in, float *act_h,
                       float *gemm_scratch, float *act, int nthreads) nogil

cdef extern from *:
    """
    #ifndef KIME_SOURCE_DIGEST
    #error "KIME_SOURCE_DIGEST is setup.py's digest of the sources: build kime through setup.py"
    #endif
    static const char *kime_source_digest = KIME_SOURCE_DIGEST;
    """
    const char *kime_source_digest

MAX_LAYERS = KIME_MAX_LAYERS
ACT_HIDDEN = KIME_ACT_HIDDEN
FORWARD_ERRORS = {-1: "the batch does not fit the plan's arena",
                  -2: "a token id is outside the vocabulary",
                  -3: "a row is longer than the model's positions",
                  -4: "a position id is outside the model's positions"}
"""kime_forward's and kime_embed's refusals, by return code."""


def source_digest() -> str:
    """setup.py's digest of the C and Cython sources this build was compiled from: what the
    packed-weight cache is keyed on, so a change to how weights are packed never maps a blob
    packed before it."""
    return kime_source_digest.decode()


# A layer's GEMM precision, as the spec's `layer_prec` names it, and the dtype of its packed
# weights: FP32 panels, qgemm's bytes, bgemm's bfloat16.
_PRECISIONS = {"f32": KIME_PREC_F32, "int8": KIME_PREC_INT8, "bf16": KIME_PREC_BF16}
_WEIGHT_DTYPES = {KIME_PREC_F32: np.float32, KIME_PREC_INT8: np.uint8, KIME_PREC_BF16: np.uint16}


def _layer_precisions(dict spec):
    """Each layer's KIME_PREC_*, the encoder's then the decision head's: the spec's
    `layer_prec` (names from _PRECISIONS), or every layer the model's own precision (`int8`,
    `bf16`, else FP32)."""
    n = spec["layers"] + spec["head_layers"]
    names = spec.get("layer_prec")
    if names is None:
        uniform = "int8" if spec.get("int8") else "bf16" if spec.get("bf16") else "f32"
        names = [uniform] * n
    if len(names) != n or any(p not in _PRECISIONS for p in names):
        raise ValueError("layer_prec must name %s for each of the %d layers, got %r"
                         % (" / ".join(_PRECISIONS), n, names))
    return [_PRECISIONS[p] for p in names]


def pool_spin_us() -> int:
    """How long an idle worker of kime's thread pool spins before it sleeps, in microseconds."""
    return kime_pool_spin_us()


def set_pool_spin_us(int us) -> None:
    """Set the pool's bounded spin (microseconds, 0: sleep at once) for waits that start later."""
    kime_pool_set_spin_us(us)


def pool_threaded() -> bool:
    """Whether this build's forward pass runs its steps on several threads."""
    return kime_pool_threaded() == 1


def pool_probe(const int32_t[::1] busy_us, int32_t[::1] tids, int threads) -> None:
    """Run one step of the pool (a test entry): task i holds its thread `busy_us[i]`
    microseconds, then writes the id of the thread that ran it to `tids[i]` (0: the caller)."""
    if tids.shape[0] != busy_us.shape[0]:
        raise ValueError("busy_us and tids differ in length")
    cdef int n = <int>busy_us.shape[0]
    if n == 0:
        return
    with nogil:
        kime_pool_probe(threads, n, <const int *>&busy_us[0], <int *>&tids[0])


def isa_detect():
    return kime_isa_detect()


def isa_name(int isa):
    return kime_isa_name(isa).decode()


cdef const float *_f32(dict arrays, str name) except? NULL:
    """The data pointer of a float32 array in the blob, or NULL when the blob has no such entry."""
    arr = arrays.get(name)
    if arr is None:
        return NULL
    if arr.dtype != np.float32 or not arr.flags.c_contiguous:
        raise ValueError("weight %s must be C-contiguous float32" % name)
    return <const float *> cnp.PyArray_DATA(arr)


cdef const float *_weight(dict arrays, str name, object want) except? NULL:
    """A GEMM weight: packed FP32 panels, qgemm's packed bytes (uint8) when its layer is INT8,
    or bgemm's packed bfloat16 (uint16) when it is BF16; `want` is that dtype."""
    arr = arrays.get(name)
    if arr is None:
        return NULL
    if arr.dtype != want or not arr.flags.c_contiguous:
        raise ValueError("weight %s must be C-contiguous %s" % (name, np.dtype(want).name))
    return <const float *> cnp.PyArray_DATA(arr)


cdef class Model:
    """The C model over a blob's arrays. `arrays` maps entry names to arrays (see weights.py)."""

    cdef kime_model m
    cdef dict arrays
    cdef readonly int d, n_act, threads, max_pos

    def __init__(self, dict arrays, dict spec, int isa, int threads):
        cdef int i
        cdef kime_layer *L
        self.arrays = arrays
        self.threads = threads
        if spec["layers"] > KIME_MAX_LAYERS or spec["head_layers"] > KIME_MAX_LAYERS:
            raise ValueError("kime's CPU forward runs at most %d layers" % KIME_MAX_LAYERS)
        m = &self.m
        m.isa = isa
        m.int8 = int(spec.get("int8", 0))
        m.qisa = int(spec.get("qisa", isa))
        m.bf16 = int(spec.get("bf16", 0))
        if m.int8 and m.bf16:
            raise ValueError("a model's GEMM weights are INT8 or BF16, not both")
        precs = _layer_precisions(spec)
        if KIME_PREC_BF16 in precs and kime_bgemm_missing(isa) != NULL:
            # The kernels would stop the process on an illegal instruction.
            raise ValueError("the BF16 GEMM does not run at isa %d (missing: %s)"
                             % (isa, kime_bgemm_missing(isa).decode()))
        m.d = self.d = spec["d"]
        m.vocab = spec["vocab"]
        m.layers = spec["layers"]
        m.heads = spec["heads"]
        m.inter = spec["inter"]
        m.half_window = spec["half_window"]
        m.norm_eps = spec["norm_eps"]
        m.max_pos = self.max_pos = spec["max_pos"]
        m.head_layers = spec["head_layers"]
        m.head_heads = spec["head_heads"]
        m.n_act = self.n_act = spec["n_act"]
        emb = arrays["tok_emb"]
        if emb.dtype != np.uint16 or not emb.flags.c_contiguous:
            raise ValueError("tok_emb must be C-contiguous FP16 bits (uint16)")
        m.tok_emb = <const uint16_t *> cnp.PyArray_DATA(emb)
        m.emb_norm_w = _f32(arrays, "emb_norm.w")
        m.emb_norm_b = _f32(arrays, "emb_norm.b")
        m.final_norm_w = _f32(arrays, "final_norm.w")
        m.final_norm_b = _f32(arrays, "final_norm.b")
        m.cos_global = _f32(arrays, "rope.cos_global")
        m.sin_global = _f32(arrays, "rope.sin_global")
        m.cos_local = _f32(arrays, "rope.cos_local")
        m.sin_local = _f32(arrays, "rope.sin_local")
        m.type_emb = _f32(arrays, "type_emb")
        for i in range(m.layers):
            L = &m.enc[i]
            self._layer(L, "enc.%d." % i, precs[i])
            L.is_global = spec["global_layers"][i]
        for i in range(m.head_layers):
            self._layer(&m.head[i], "head.%d." % i, precs[m.layers + i])
        m.sc_norm_w = _f32(arrays, "scorer.norm.w")
        m.sc_norm_b = _f32(arrays, "scorer.norm.b")
        m.sc1 = _f32(arrays, "scorer.1")
        m.sc1_b = _f32(arrays, "scorer.1.b")
        m.sc3 = _f32(arrays, "scorer.3")
        m.sc3_b = float(arrays["scorer.3.b"][0])
        m.act0 = _f32(arrays, "act.0")
        m.act0_b = _f32(arrays, "act.0.b")
        m.act2 = _f32(arrays, "act.2")
        m.act2_b = _f32(arrays, "act.2.b")

    cdef _layer(self, kime_layer *L, str p, int prec):
        a = self.arrays
        want = _WEIGHT_DTYPES[prec]
        L.prec = prec
        L.norm_w = _f32(a, p + "norm.w")
        L.norm_b = _f32(a, p + "norm.b")
        L.qkv = _weight(a, p + "qkv", want)
        L.qkv_b = _f32(a, p + "qkv.b")
        L.out = _weight(a, p + "out", want)
        L.out_b = _f32(a, p + "out.b")
        L.norm2_w = _f32(a, p + "norm2.w")
        L.norm2_b = _f32(a, p + "norm2.b")
        L.up = _weight(a, p + "up", want)
        L.up_b = _f32(a, p + "up.b")
        L.down = _weight(a, p + "down", want)
        L.down_b = _f32(a, p + "down.b")
        L.is_global = 1
        # a layer below FP32 runs attention's products in BF16 (the precision contract)
        L.attn = KIME_ATTN_F32 if prec == KIME_PREC_F32 else KIME_ATTN_BF16

    def run(self, Arena arena, int32_t[::1] ids, int32_t[::1] cu, int rows,
            int32_t[::1] markers, int32_t[::1] mcu, int32_t[::1] qtype,
            float[::1] logits, float[:, ::1] act, int32_t[::1] positions=None,
            int32_t[::1] option_ids=None):
        """Run the first `rows` rows of the batch buffers into `logits` and `act` (in place).
        `positions` and `option_ids` (per token, like ids) are a parallel-layout batch's ids,
        given together; None runs the sequential layout."""
        cdef int rc
        cdef const int32_t *pos = NULL
        cdef const int32_t *opt = NULL
        if rows < 1 or cu.shape[0] < rows + 1 or mcu.shape[0] < rows + 1 or qtype.shape[0] < rows:
            raise ValueError("batch buffers are smaller than %d rows" % rows)
        if cu[rows] > ids.shape[0] or mcu[rows] > markers.shape[0] or mcu[rows] > logits.shape[0] \
                or act.shape[0] < rows or act.shape[1] != self.n_act:
            raise ValueError("batch buffers do not hold the batch")
        _check_arena(arena, self.threads)
        if (positions is None) != (option_ids is None):
            raise ValueError("positions and option_ids go together: give both or neither")
        if positions is not None:
            if positions.shape[0] < cu[rows] or option_ids.shape[0] < cu[rows] or cu[rows] < 1:
                raise ValueError("positions and option_ids do not hold the batch")
            pos, opt = &positions[0], &option_ids[0]
        with nogil:
            rc = kime_forward(&self.m, &arena.a, &ids[0], &cu[0], rows, &markers[0], &mcu[0],
                              &qtype[0], pos, opt, &logits[0], &act[0, 0], self.threads)
        _check_rc(rc)

    def embed(self, Arena arena, int32_t[::1] ids, int32_t[::1] cu, int rows,
              float[:, ::1] pooled):
        """Run the encoder alone over the first `rows` rows and write each row's mean-pooled
        last hidden state into `pooled[:rows]` (in place); the decision head does not run."""
        cdef int rc
        if rows < 1 or cu.shape[0] < rows + 1:
            raise ValueError("batch buffers are smaller than %d rows" % rows)
        if cu[rows] > ids.shape[0] or pooled.shape[0] < rows or pooled.shape[1] != self.d:
            raise ValueError("batch buffers do not hold the batch")
        _check_arena(arena, self.threads)
        with nogil:
            rc = kime_embed(&self.m, &arena.a, &ids[0], &cu[0], rows, &pooled[0, 0],
                            self.threads)
        _check_rc(rc)


cdef int _check_arena(Arena arena, int threads) except -1:
    """Each thread of a forward pass takes its own share of the arena's GEMM scratch: an arena
    sized for fewer threads than the model runs would be overrun."""
    if arena.threads < threads:
        raise ValueError(f"the arena holds scratch for {arena.threads} threads; this model runs "
                         f"{threads}")
    return 0


cdef int _check_rc(int rc) except -1:
    if rc != 0:
        raise ValueError(FORWARD_ERRORS.get(rc, "the forward pass failed with code %d, which "
                                            "this build does not know" % rc))
    return 0


def check_rc(int rc) -> None:
    """Test entry: what a return code of the forward pass raises (0: nothing)."""
    _check_rc(rc)


cdef class Arena:
    """One bucket's activation buffers, allocated once and reused by every batch."""

    cdef kime_arena a
    cdef list buffers
    cdef readonly size_t nbytes
    cdef readonly int threads  # the scratch holds this many threads' shares

    def __init__(self, dict spec, int isa, int threads, int max_tokens):
        _check_threads(threads)
        self.threads = threads
        d, inter = spec["d"], spec["inter"]
        ffn = max(inter, 4 * d)
        precs = _layer_precisions(spec)
        # A GEMM's packed-A block is sized per K, so the scratch must hold the largest over
        # every K the forward pass uses, not just the scratch of the largest K.
        gemm_scratch = max(kime_gemm_scratch_floats(isa, k, threads)
                           for k in (d, d + 4, inter, 4 * d, ACT_HIDDEN))
        sizes = {
            "x": max_tokens * d, "h": max_tokens * d, "qkv": max_tokens * 3 * d,
            "attn": max_tokens * d, "ffn": max_tokens * ffn, "m": max_tokens * d,
            "m2": max_tokens * d, "act_in": max_tokens * (d + 4),
            "act_h": max_tokens * ACT_HIDDEN,
            "qcu": max_tokens + 1,  # int32, as many bytes as floats
            "gemm_scratch": gemm_scratch,
            # the encoder's attention or the decision head's, whichever needs more
            "attn_scratch": max(kime_attention_scratch_floats(
                KIME_ATTN_F32 if p == KIME_PREC_F32 else KIME_ATTN_BF16, max_tokens, heads,
                d // heads, threads) for heads in (spec["heads"], spec["head_heads"])
                for p in set(precs)),
            # qgemm's and bgemm's scratch in bytes, as floats; one float when no layer has
            # such GEMMs.
            "qgemm_scratch": (max(kime_qgemm_scratch_bytes(spec.get("qisa", isa), k, threads)
                                  for k in (d, inter, 4 * d)) + 3) // 4
                             if KIME_PREC_INT8 in precs else 1,
            "bgemm_scratch": (max(kime_bgemm_scratch_bytes(k, threads)
                                  for k in (d, inter, 4 * d)) + 3) // 4
                             if KIME_PREC_BF16 in precs else 1,
        }
        self.buffers = []
        self.nbytes = 0
        ptrs = {}
        for name, n in sizes.items():
            # 64-byte aligned: the kernels use aligned vector loads where they can.
            raw = np.empty(int(n) + 16, dtype=np.float32)
            offset = (-raw.ctypes.data % 64) // 4
            buf = raw[offset:offset + int(n)]
            self.buffers.append(raw)
            self.nbytes += raw.nbytes
            ptrs[name] = buf
        self.a.max_tokens = max_tokens
        self.a.max_rows = max_tokens
        self.a.max_markers = max_tokens
        self.a.x = <float *> cnp.PyArray_DATA(ptrs["x"])
        self.a.h = <float *> cnp.PyArray_DATA(ptrs["h"])
        self.a.qkv = <float *> cnp.PyArray_DATA(ptrs["qkv"])
        self.a.attn = <float *> cnp.PyArray_DATA(ptrs["attn"])
        self.a.ffn = <float *> cnp.PyArray_DATA(ptrs["ffn"])
        self.a.m = <float *> cnp.PyArray_DATA(ptrs["m"])
        self.a.m2 = <float *> cnp.PyArray_DATA(ptrs["m2"])
        self.a.act_in = <float *> cnp.PyArray_DATA(ptrs["act_in"])
        self.a.act_h = <float *> cnp.PyArray_DATA(ptrs["act_h"])
        self.a.qcu = <int32_t *> cnp.PyArray_DATA(ptrs["qcu"])
        self.a.gemm_scratch = <float *> cnp.PyArray_DATA(ptrs["gemm_scratch"])
        self.a.attn_scratch = <float *> cnp.PyArray_DATA(ptrs["attn_scratch"])
        self.a.qgemm_scratch = <void *> cnp.PyArray_DATA(ptrs["qgemm_scratch"])
        self.a.bgemm_scratch = <void *> cnp.PyArray_DATA(ptrs["bgemm_scratch"])


cdef int _check_threads(int threads) except -1:
    if threads < 1:
        raise ValueError(f"threads must be at least 1, got {threads}")
    return 0


def fused_layer(int tokens, int threads) -> bool:
    """Test entry: whether a batch of `tokens` tokens on `threads` threads runs each encoder
    layer's row-local steps in chunks of rows (forward.c's fused layer)."""
    return kime_fused_layer(tokens, threads) != 0


def layer_norm(const float[:, ::1] x, const float[::1] weight, const float[::1] bias, float eps,
               float[:, ::1] out, int threads=1) -> None:
    """Test entry: forward.c's LayerNorm (`norm_row` over rows), the one every norm of the forward
    pass runs. bias may be None; out may be x, as the final norm runs in place."""
    _check_threads(threads)
    cdef int n = x.shape[0], d = x.shape[1]
    if d == 0:
        raise ValueError("layer_norm: x must have at least one column")
    if weight.shape[0] != d:
        raise ValueError(f"layer_norm: weight has {weight.shape[0]} elements, x has {d} columns")
    if bias is not None and bias.shape[0] != d:
        raise ValueError(f"layer_norm: bias has {bias.shape[0]} elements, x has {d} columns")
    if out.shape[0] != n or out.shape[1] != d:
        raise ValueError(f"layer_norm: out has shape ({out.shape[0]}, {out.shape[1]}), "
                         f"x has ({n}, {d}); they must match")
    if n == 0:
        return
    cdef const float *b = NULL if bias is None else &bias[0]
    with nogil:
        kime_layer_norm(&x[0, 0], &out[0, 0], n, d, &weight[0], b, eps, threads)


cdef int _check_offsets(const int32_t[::1] offsets, Py_ssize_t total, str name) except -1:
    """offsets[0] == 0, non-decreasing, ending at `total`: the packed batch's cu / mcu rule."""
    cdef Py_ssize_t i
    if offsets.shape[0] < 1 or offsets[0] != 0 or offsets[offsets.shape[0] - 1] != total:
        raise ValueError(f"{name} must run from 0 to {total}")
    for i in range(offsets.shape[0] - 1):
        if offsets[i + 1] < offsets[i]:
            raise ValueError(f"{name} must not decrease")
    return 0


def mean_pool(const float[:, ::1] x, const int32_t[::1] cu, float[:, ::1] out,
              int threads=1) -> None:
    """Test entry: out[r] = the mean of x[cu[r]:cu[r + 1]] as forward.c's kime_mean_pool
    computes it for an embedding (an empty row gives zeros)."""
    _check_threads(threads)
    cdef int rows = cu.shape[0] - 1, d = x.shape[1]
    _check_offsets(cu, x.shape[0], "cu")
    if d < 1 or out.shape[0] != rows or out.shape[1] != d:
        raise ValueError(f"mean_pool: out has shape ({out.shape[0]}, {out.shape[1]}), "
                         f"expected ({rows}, {d})")
    if rows == 0:
        return
    cdef const float *base = &x[0, 0] if x.shape[0] else NULL
    with nogil:
        kime_mean_pool(base, &cu[0], rows, d, &out[0, 0], threads)


def act_features(const float[::1] logits, const int32_t[::1] mcu, float[:, ::1] out) -> None:
    """Test entry: out[r] = the act head's four features of row r's logits
    logits[mcu[r]:mcu[r + 1]], as forward.c computes them (a row may have no options)."""
    cdef int rows = mcu.shape[0] - 1, r
    _check_offsets(mcu, logits.shape[0], "mcu")
    if out.shape[0] != rows or out.shape[1] != 4:
        raise ValueError(f"act_features: out has shape ({out.shape[0]}, {out.shape[1]}), "
                         f"expected ({rows}, 4)")
    if rows == 0:
        return
    cdef const float *base = &logits[0] if logits.shape[0] else NULL
    with nogil:
        for r in range(rows):
            kime_act_features(base + mcu[r] if base != NULL else NULL, mcu[r + 1] - mcu[r],
                              &out[r, 0])


def act_head(const float[:, ::1] x, const int32_t[::1] cu, const float[::1] logits,
             const int32_t[::1] mcu, const float[::1] w0, const float[::1] b0,
             const float[::1] w2, const float[::1] b2, float[:, ::1] act, int isa,
             int threads=1) -> None:
    """Test entry: forward.c's act head. x [tokens, d] holds the rows packed at offsets `cu`
    (each row's first token is read), logits the option logits at offsets `mcu`; w0 and w2 are
    `_gemm.pack(W, isa)` panels of act_head.0 [ACT_HIDDEN, d + 4] and act_head.2
    [n_act, ACT_HIDDEN]. The scratch a plan's arena would hold is allocated here."""
    _check_threads(threads)
    cdef int rows = cu.shape[0] - 1, d = x.shape[1], n_act = act.shape[1], r
    if isa < 0 or isa > kime_isa_detect():
        raise ValueError(f"isa {isa} is not available here")
    _check_offsets(cu, x.shape[0], "cu")
    _check_offsets(mcu, logits.shape[0], "mcu")
    if rows < 1 or d < 1 or mcu.shape[0] != rows + 1 or act.shape[0] != rows or n_act < 1:
        raise ValueError(f"act_head: {rows} rows of width {d} need mcu of {rows + 1} entries "
                         f"and act of {rows} rows")
    for r in range(rows):
        if cu[r + 1] == cu[r]:
            raise ValueError("act_head: every row needs a first token")
    if <size_t>w0.shape[0] != kime_gemm_packed_floats(isa, KIME_ACT_HIDDEN, d + 4, 0) \
            or b0.shape[0] != KIME_ACT_HIDDEN:
        raise ValueError(f"act_head: w0 and b0 must be act_head.0 [{KIME_ACT_HIDDEN}, {d + 4}]")
    if <size_t>w2.shape[0] != kime_gemm_packed_floats(isa, n_act, KIME_ACT_HIDDEN, 0) \
            or b2.shape[0] != n_act:
        raise ValueError(f"act_head: w2 and b2 must be act_head.2 [{n_act}, {KIME_ACT_HIDDEN}]")
    cdef size_t scratch_floats = max(kime_gemm_scratch_floats(isa, d + 4, threads),
                                     kime_gemm_scratch_floats(isa, KIME_ACT_HIDDEN, threads))
    cdef float[::1] act_in = _aligned(rows * (d + 4))
    cdef float[::1] act_h = _aligned(rows * KIME_ACT_HIDDEN)
    cdef float[::1] scratch = _aligned(scratch_floats + 1)
    cdef const float *logit_base = &logits[0] if logits.shape[0] else NULL
    with nogil:
        kime_act_head(isa, &x[0, 0], &cu[0], rows, d, logit_base, &mcu[0], &w0[0], &b0[0],
                      &w2[0], &b2[0], n_act, &act_in[0], &act_h[0], &scratch[0], &act[0, 0],
                      threads)


cdef float[::1] _aligned(size_t n):
    """n float32 starting on a 64-byte boundary, as an arena's buffers start."""
    raw = np.empty(n + 16, dtype=np.float32)
    cdef size_t skip = (-raw.ctypes.data % 64) // 4
    return raw[skip:skip + n]
