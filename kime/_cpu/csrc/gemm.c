/* FP32 GEMM C[M, N] = A[M, K] W[N, K]^T + epilogue, over weights packed once at load (kernels.h).
 *
 * Layout. W is packed in panels of NR columns of C: panel p holds outputs [p*NR, p*NR + NR) as K
 * rows of NR floats, zero-padded past N. A GEGLU panel holds NR/2 outputs: lanes [0, NR/2) are
 * their "a" rows of W and lanes [NR/2, NR) the matching "g" rows, so one register tile sees both.
 * A is packed MR rows at a time as K rows of MR floats (zero-padded past M; see run).
 *
 * Determinism. Every C element is one register accumulator that starts at +0 and takes one FMA
 * per k, in increasing k, over all of K; the partial sums stay in registers, so no K block is
 * ever stored or reordered. The epilogue is one vector routine per ISA, run on every tile. Tiles
 * with fewer rows run the same code with fewer accumulators (the portable path computes the full
 * tile, so even a contracting compiler treats every tile alike). Hence a row's bits do not depend
 * on M, on which tile or thread computes it, or on the thread count.
 *
 * Blocking. A task is a chunk of rows walked in blocks of mc rows (a short request instead packs
 * A together and takes one panel per task; team.h): it packs the block's A (mc x K: up to 640 KB
 * with AVX-512, so a short request's rows at K = 768 are one block beside a 98 KB panel in a 1 MB
 * L2), then for each panel runs the micro-kernel down the block, so a panel (K x NR) comes from
 * L3 once per block and is reused from L2 by the block's tiles, and each A sliver is reused by
 * every panel. AVX2's short requests take a larger block than its long rows (short_bytes). K
 * is not split (kc = K): per k the 14 x 32 kernel reads 184 bytes for 28 FMAs, a stream L2
 * (even L3) sustains with room to spare, so K blocks would buy no bandwidth and cost partial
 * sums.
 *
 * aarch64: one NEON kernel (12 x 8) serves every level; it is one FMA per k from +0 like the x86
 * ones, and its epilogue (epilogue_neon.h) runs theirs, so it gives the AVX2/AVX-512 bits.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "kernels.h"
#include "team.h"

#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
#define KIME_X86 1
#include <immintrin.h>
#define T512 __attribute__((target("avx512f,avx512bw,avx512vl,fma")))
#define T256 __attribute__((target("avx2,fma")))
#include "vgelu.h"
#include "lanes256.h"
#include "sliver512.h"
#endif

#if defined(__aarch64__)
#define KIME_ARM64 1
#include <arm_neon.h>
#include "epilogue_neon.h"
#endif

#define MAX_TILE (14 * 32) /* floats of the largest MR x NR register tile, a multiple of 16 */

#include "epilogue512.h"

typedef struct {
    const char *name; /* the kernel, for kime doctor */
    int mr, nr;
    size_t a_bytes; /* a thread's packed A block, at most (one tile's sliver if K needs more) */
    /* acc[m][NR] = A sliver (K x MR, first m rows used) times B panel (K x NR) */
    void (*kernel)(int m, int K, const float *a, const float *b, float *acc);
    /* Apply the epilogue to tile rows [0, m) and store `nv` output columns from column n0. */
    void (*store)(const float *acc, int m, int n0, int nv, const epilogue *e, float *C);
    /* optional: pack_a's sliver (the same floats) faster; NULL: pack_a */
    void (*pack)(const float *A, int lda, int m, int K, int mr, float *dst);
    /* optional: `kernel` for a panel's first tile, fetching the panel ahead (team.h's
     * KIME_AHEAD); the same arithmetic, so the same bits. NULL: kernel */
    void (*first)(int m, int K, const float *a, const float *b, float *acc);
    /* optional: a short request's A block (team.h), where larger than a_bytes (0: a_bytes) */
    size_t short_bytes;
} gemm_impl;

static const float SQRT1_2 = 0.70710678118654752440f; /* rounded once, as torch does */

/* ---- portable ----------------------------------------------------------------------------- */

#define PMR 4
#define PNR 8

static void kernel_portable(int m, int K, const float *a, const float *b, float *acc)
{
    (void)m; /* always the full tile (see Determinism) */
    float c[PMR][PNR] = {{0}};
    for (int k = 0; k < K; k++, a += PMR, b += PNR)
        for (int i = 0; i < PMR; i++)
            for (int j = 0; j < PNR; j++)
                c[i][j] += a[i] * b[j];
    memcpy(acc, c, sizeof c);
}

static float gelu1(float x) { return x * 0.5f * (1.0f + erff(x * SQRT1_2)); }

static void store_portable(const float *acc, int m, int n0, int nv, const epilogue *e, float *C)
{
    for (int i = 0; i < m; i++, acc += PNR, C += e->ldc)
        for (int j = 0; j < nv; j++) {
            float x = acc[j] + (e->bias ? e->bias[n0 + j] : 0.0f);
            switch (e->epi) {
            case KIME_EPI_ACCUM: x = C[n0 + j] + x; break;
            case KIME_EPI_GELU: x = gelu1(x); break;
            case KIME_EPI_RELU: x = x < 0.0f ? 0.0f : x; break; /* keeps NaN, as torch */
            case KIME_EPI_GEGLU:
                x = gelu1(x) * (acc[j + PNR / 2] + (e->gbias ? e->gbias[n0 + j] : 0.0f));
                break;
            }
            C[n0 + j] = x;
        }
}

#ifdef KIME_X86
/* ---- AVX-512: 14 x 32 tiles (28 accumulators, 2 B vectors, A broadcast from memory) ------- */

#define AMR 14
#define ANR STORE512_NR

T512 static inline __attribute__((always_inline)) void
kernel512_m(const int m, int K, const float *a, const float *b, float *acc, const int ahead)
{
    __m512 c0[AMR], c1[AMR];
#pragma GCC unroll 16
    for (int i = 0; i < m; i++)
        c0[i] = c1[i] = _mm512_setzero_ps();
    for (int k = 0; k < K; k++, a += AMR, b += ANR) {
        if (ahead) /* the k step's two lines (team.h) */
            kime_fetch_ahead(b, 2);
        __m512 b0 = _mm512_loadu_ps(b), b1 = _mm512_loadu_ps(b + 16);
#pragma GCC unroll 16
        for (int i = 0; i < m; i++) {
            __m512 ai = _mm512_set1_ps(a[i]);
            c0[i] = _mm512_fmadd_ps(ai, b0, c0[i]);
            c1[i] = _mm512_fmadd_ps(ai, b1, c1[i]);
        }
    }
#pragma GCC unroll 16
    for (int i = 0; i < m; i++) {
        _mm512_store_ps(acc + i * ANR, c0[i]);
        _mm512_store_ps(acc + i * ANR + 16, c1[i]);
    }
}

/* pack_a's sliver, 16 k of every row at a time (sliver512.h) */
T512 static void pack512(const float *A, int lda, int m, int K, int mr, float *dst)
{
    __m512i r[16];
    for (int i = m; i < 16; i++)
        r[i] = _mm512_setzero_si512();
    for (int k = 0; k < K; k += 16) {
        const int ng = K - k < 16 ? K - k : 16;
        const __mmask16 km = (__mmask16)((1u << ng) - 1);
        for (int i = 0; i < m; i++)
            r[i] = _mm512_maskz_loadu_epi32(km, A + (size_t)i * lda + k);
        sliver_put16(r, mr, ng, (uint32_t *)(dst + (size_t)k * mr));
    }
}

#define K512(M, AHEAD) kernel512_m(M, K, a, b, acc, AHEAD)
T512 static void kernel512(int m, int K, const float *a, const float *b, float *acc)
{
    switch (m) { KIME_ROW_CASES14(K512, 0) }
}

/* kernel512 for a panel's first tile, fetching its weights ahead (team.h) */
T512 static void kernel512_first(int m, int K, const float *a, const float *b, float *acc)
{
    switch (m) { KIME_ROW_CASES14(K512, 1) }
}
#undef K512

/* ---- AVX2 + FMA: 6 x 16 tiles (12 accumulators) ------------------------------------------ */

#define HMR 6
#define HNR 16

T256 static inline __attribute__((always_inline)) void
kernel256_m(const int m, int K, const float *a, const float *b, float *acc, const int ahead)
{
    __m256 c0[HMR], c1[HMR];
#pragma GCC unroll 8
    for (int i = 0; i < m; i++)
        c0[i] = c1[i] = _mm256_setzero_ps();
    for (int k = 0; k < K; k++, a += HMR, b += HNR) {
        if (ahead) /* the k step's line (team.h) */
            kime_fetch_ahead(b, 1);
        __m256 b0 = _mm256_loadu_ps(b), b1 = _mm256_loadu_ps(b + 8);
#pragma GCC unroll 8
        for (int i = 0; i < m; i++) {
            __m256 ai = _mm256_broadcast_ss(a + i);
            c0[i] = _mm256_fmadd_ps(ai, b0, c0[i]);
            c1[i] = _mm256_fmadd_ps(ai, b1, c1[i]);
        }
    }
#pragma GCC unroll 8
    for (int i = 0; i < m; i++) {
        _mm256_store_ps(acc + i * HNR, c0[i]);
        _mm256_store_ps(acc + i * HNR + 8, c1[i]);
    }
}

#define K256(M, AHEAD) kernel256_m(M, K, a, b, acc, AHEAD)
T256 static void kernel256(int m, int K, const float *a, const float *b, float *acc)
{
    switch (m) { KIME_ROW_CASES6(K256, 0) }
}

/* kernel256 for a panel's first tile, fetching its weights ahead (team.h) */
T256 static void kernel256_first(int m, int K, const float *a, const float *b, float *acc)
{
    switch (m) { KIME_ROW_CASES6(K256, 1) }
}
#undef K256

T256 static void store256(const float *acc, int m, int n0, int nv, const epilogue *e, float *C)
{
    if (e->epi == KIME_EPI_GEGLU) {
        __m256i k = lanes8(nv);
        __m256 ba = maybe_load8(e->bias ? e->bias + n0 : NULL, nv, k);
        __m256 bg = maybe_load8(e->gbias ? e->gbias + n0 : NULL, nv, k);
        for (int i = 0; i < m; i++, acc += HNR, C += e->ldc) {
            __m256 x = _mm256_add_ps(_mm256_load_ps(acc), ba);
            __m256 g = _mm256_add_ps(_mm256_load_ps(acc + 8), bg);
            store8(C + n0, nv, k, _mm256_mul_ps(gelu8(x), g));
        }
        return;
    }
    for (int v = 0; v < HNR / 8 && 8 * v < nv; v++) {
        int j0 = n0 + 8 * v, left = nv - 8 * v;
        __m256i k = lanes8(left);
        __m256 bias = maybe_load8(e->bias ? e->bias + j0 : NULL, left, k);
        float *c = C + j0;
        for (int i = 0; i < m; i++, c += e->ldc) {
            __m256 x = _mm256_add_ps(_mm256_load_ps(acc + i * HNR + 8 * v), bias);
            switch (e->epi) {
            case KIME_EPI_ACCUM: x = _mm256_add_ps(load8(c, left, k), x); break;
            case KIME_EPI_GELU: x = gelu8(x); break;
            case KIME_EPI_RELU: x = _mm256_max_ps(_mm256_setzero_ps(), x); break;
            }
            store8(c, left, k, x);
        }
    }
}
#endif /* KIME_X86 */

#ifdef KIME_ARM64
/* ---- NEON (every aarch64 level): 12 x 8 tiles ---------------------------------------------
 * 24 accumulators, 2 B vectors and 3 A vectors: 29 of the 32 registers. Per k, 5 loads feed 24
 * fmla (by element: row i's A value is a lane of an A vector, so A needs no broadcast), enough
 * independent sums for 4 FMA pipes of 4-cycle latency. 8 columns keep a GEGLU tile's halves
 * vector-aligned (4 "a" lanes, 4 gate lanes). A 12 x 768 sliver is 36 KB and a 768 x 8 panel
 * 24 KB: the panel stays in a 64 KB L1 while a block's slivers stream from L2. */

#define NMR 12
#define NNR 8

static inline __attribute__((always_inline)) void
kernel_neon_m(const int m, int K, const float *a, const float *b, float *acc)
{
    float32x4_t c0[NMR], c1[NMR];
#pragma GCC unroll 12
    for (int i = 0; i < m; i++)
        c0[i] = c1[i] = vdupq_n_f32(0.0f);
    for (int k = 0; k < K; k++, a += NMR, b += NNR) {
        const float32x4_t b0 = vld1q_f32(b), b1 = vld1q_f32(b + 4);
        const float32x4_t a0 = vld1q_f32(a);
        const float32x4_t a1 = m > 4 ? vld1q_f32(a + 4) : a0, a2 = m > 8 ? vld1q_f32(a + 8) : a0;
        /* lane indices must be constants: one line per row, the m test folds away */
#define ROW(i, av, l)                                                                          \
    if (m > i) {                                                                               \
        c0[i] = vfmaq_laneq_f32(c0[i], b0, av, l);                                             \
        c1[i] = vfmaq_laneq_f32(c1[i], b1, av, l);                                             \
    }
        ROW(0, a0, 0) ROW(1, a0, 1) ROW(2, a0, 2) ROW(3, a0, 3)
        ROW(4, a1, 0) ROW(5, a1, 1) ROW(6, a1, 2) ROW(7, a1, 3)
        ROW(8, a2, 0) ROW(9, a2, 1) ROW(10, a2, 2) ROW(11, a2, 3)
#undef ROW
    }
#pragma GCC unroll 12
    for (int i = 0; i < m; i++) {
        vst1q_f32(acc + i * NNR, c0[i]);
        vst1q_f32(acc + i * NNR + 4, c1[i]);
    }
}

static void kernel_neon(int m, int K, const float *a, const float *b, float *acc)
{
    switch (m) { /* one register allocation per row count */
#define CASE(M) case M: kernel_neon_m(M, K, a, b, acc); break;
        CASE(1) CASE(2) CASE(3) CASE(4) CASE(5) CASE(6)
        CASE(7) CASE(8) CASE(9) CASE(10) CASE(11) CASE(12)
#undef CASE
    }
}

static void store_neon(const float *acc, int m, int n0, int nv, const epilogue *e, float *C)
{
    kime_store_neon(acc, NNR, NNR / 2, m, n0, nv, e, C);
}
#endif /* KIME_ARM64 */

static const gemm_impl IMPLS[3] = {
    {"portable 4x8", PMR, PNR, 128 << 10, kernel_portable, store_portable},
#ifdef KIME_X86
    /* A short request's A whole (182 x 768 is 546 KB) in a block of up to 1 MB, though past
     * Zen 3's 512 KB L2: one pack step and one panel step instead of five of each, and each
     * panel read once. Base W1 FP32 on Zen 3, 2 threads, 25 interleaved rounds: paired 0.87
     * of the time before, against 0.96 for an untouched copy of it; 1 thread and a 5120-row
     * GEMM (the long rows' 128 KB blocks) unchanged. */
    {"avx2 6x16", HMR, HNR, 128 << 10, kernel256, store256, NULL, kernel256_first, 1 << 20},
    {"avx512 14x32", AMR, ANR, 640 << 10, kernel512, store512, pack512, kernel512_first},
#endif
#ifdef KIME_ARM64
    {"neon 12x8", NMR, NNR, 256 << 10, kernel_neon, store_neon},
#endif
};

static const gemm_impl *impl_of(int isa)
{
#ifdef KIME_X86
    if (isa == KIME_ISA_AVX2 || isa == KIME_ISA_AVX512)
        return &IMPLS[isa];
#endif
#ifdef KIME_ARM64
    if (isa >= KIME_ISA_NEON && isa <= KIME_ISA_BF16) /* no level changes the FP32 kernel */
        return &IMPLS[1];
#endif
    (void)isa;
    return &IMPLS[0];
}

const char *kime_gemm_kernel_name(int isa)
{
    return impl_of(isa)->name;
}

/* ---- packing -------------------------------------------------------------------------------- */

static size_t panels(const gemm_impl *im, int N, int geglu)
{
    int width = geglu ? im->nr / 2 : im->nr, outputs = geglu ? N / 2 : N;
    return (size_t)((outputs + width - 1) / width);
}

size_t kime_gemm_packed_floats(int isa, int N, int K, int geglu)
{
    const gemm_impl *im = impl_of(isa);
    return panels(im, N, geglu) * (size_t)K * (size_t)im->nr;
}

void kime_gemm_pack(int isa, const float *W, int N, int K, int geglu, float *packed)
{
    const gemm_impl *im = impl_of(isa);
    const int nr = im->nr, half = nr / 2, I = N / 2;
    const size_t P = panels(im, N, geglu);
    for (size_t p = 0; p < P; p++)
        for (int j = 0; j < nr; j++) {
            /* the row of W feeding lane j of panel p, or -1 for zero padding */
            long row = geglu ? (long)p * half + (j % half) : (long)p * nr + j;
            if (geglu)
                row = row < I ? row + (j < half ? 0 : I) : -1;
            else if (row >= N)
                row = -1;
            float *dst = packed + p * (size_t)K * nr + j;
            for (int k = 0; k < K; k++)
                dst[(size_t)k * nr] = row < 0 ? 0.0f : W[(size_t)row * K + k];
        }
}

/* Rows of A a thread packs at once: a multiple of MR whose block fills about `bytes`. */
static int block_rows(const gemm_impl *im, size_t bytes, int K)
{
    size_t tiles = bytes / ((size_t)im->mr * (K > 0 ? K : 1) * sizeof(float));
    return im->mr * (int)(tiles < 1 ? 1 : tiles > 64 ? 64 : tiles);
}

static size_t short_bytes(const gemm_impl *im)
{
    return im->short_bytes > im->a_bytes ? im->short_bytes : im->a_bytes;
}

/* A thread's share of scratch: its register tile's spill (MAX_TILE floats), then its A block
 * (at most max(a_bytes, short_bytes, MR * K * 4) bytes, rising with K, so scratch sized for the
 * largest K of a model serves all its GEMMs); a multiple of 16 floats keeps every share 64-B
 * aligned. */
static size_t thread_floats(const gemm_impl *im, int K)
{
    size_t floats = short_bytes(im) / sizeof(float);
    size_t sliver = (size_t)im->mr * (size_t)(K > 0 ? K : 0);
    return MAX_TILE + (((floats > sliver ? floats : sliver) + 15) & ~(size_t)15);
}

size_t kime_gemm_scratch_floats(int isa, int K, int nthreads)
{
    return thread_floats(impl_of(isa), K) * (size_t)(nthreads > 1 ? nthreads : 1) + 16;
}

static void pack_a(const float *A, int lda, int m, int K, int mr, float *dst)
{
    for (int k = 0; k < K; k++, dst += mr)
        for (int i = 0; i < mr; i++)
            dst[i] = i < m ? A[(size_t)i * lda + k] : 0.0f;
}

/* ---- driver --------------------------------------------------------------------------------- */

typedef struct {
    const gemm_impl *im;
    const float *A, *packed;
    int lda, M, K, outputs, width, npanels;
    epilogue e;
    float *scratch;
} job;

/* Thread t's share of scratch: its accumulator tile, then its A block. */
static float *thread_base(const job *j, int t)
{
    return j->scratch + (size_t)t * thread_floats(j->im, j->K);
}

static void pack_tile(const void *p, int tid, int owner, int m0, int i, int m)
{
    const job *j = (const job *)p;
    (void)tid;
    (j->im->pack ? j->im->pack : pack_a)(j->A + (size_t)(m0 + i) * j->lda, j->lda, m, j->K,
                                         j->im->mr,
                                         thread_base(j, owner) + MAX_TILE + (size_t)i * j->K);
}

static void run_panels(const void *p, int tid, int owner, int m0, int mb, int p0, int p1)
{
    const job *j = (const job *)p;
    const gemm_impl *im = j->im;
    const int mr = im->mr, K = j->K;
    float *acc = thread_base(j, tid);
    const float *ap = thread_base(j, owner) + MAX_TILE;
    for (int q = p0; q < p1; q++) {
        const float *b = j->packed + (size_t)q * K * im->nr;
        const int n0 = q * j->width;
        const int nv = j->outputs - n0 < j->width ? j->outputs - n0 : j->width;
        for (int i = 0; i < mb; i += mr) {
            const int m = mb - i < mr ? mb - i : mr;
            float *c = j->e.C + (size_t)(m0 + i) * j->e.ldc;
            kime_prefetch_tile(c, j->e.ldc, m, n0, nv);
            (i == 0 && im->first ? im->first : im->kernel)(m, K, ap + (size_t)i * K, b, acc);
            im->store(acc, m, n0, nv, &j->e, c);
        }
    }
}

void kime_gemm(int isa, const float *A, int lda, int M, int K, int N, const float *packed,
               const float *bias, int epilogue_kind, float *C, int ldc, float *scratch,
               int nthreads)
{
    if (M <= 0 || N <= 0 || K < 0)
        return;
    const gemm_impl *im = impl_of(isa);
    const int geglu = epilogue_kind == KIME_EPI_GEGLU;
    job j = {im, A, packed, lda, M, K, geglu ? N / 2 : N, geglu ? im->nr / 2 : im->nr,
             (int)panels(im, N, geglu),
             {bias, geglu && bias ? bias + N / 2 : NULL, C, ldc, epilogue_kind},
             (float *)(((uintptr_t)scratch + 63) & ~(uintptr_t)63)};
    const kime_gemm_plan plan = {&j, M, im->mr, block_rows(im, im->a_bytes, K), j.npanels,
                                 pack_tile, run_panels, block_rows(im, short_bytes(im), K)};
    kime_gemm_drive(&plan, nthreads);
}
