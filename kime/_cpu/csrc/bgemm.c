/* BF16 GEMM with FP32 accumulation (bgemm.h).
 *
 * Layout. W is rounded to bfloat16 and packed in panels of NR = 32 columns of C, as the FP32
 * GEMM's panels (the GEGLU pairing included), but with two k per 32-bit lane: panel p holds
 * K2 = ceil(K/2) groups, and group g is NR words, word j holding W[row_j, 2g] in its low half and
 * W[row_j, 2g + 1] in its high half, zero-padded past K and N. That is the operand vdpbf16ps
 * takes: per 32-bit lane, acc += a_lo * b_lo + a_hi * b_hi. A's rows are rounded and packed MR
 * at a time as K2 groups of MR words, the same pairs, zero-padded past M and K.
 *
 * Kernel. 14 x 32 tiles, as the FP32 and VNNI kernels: 28 zmm accumulators, 2 B vectors and a
 * broadcast A pair per row. With AMX-BF16, 32 x 32 tiles of tdpbf16ps over the same panels
 * (K padded to 16 pairs for both), A packed in 1 KiB tiles (pack_a_amx). Per instruction it does twice the FP32 kernel's multiply-adds, and
 * per k it reads half the B bytes. The tile's FP32 sums go through the FP32 GEMM's store
 * (epilogue512.h), so the epilogues are the FP32 ones.
 *
 * Blocking and threads follow gemm.c: a thread owns a range of rows (or, for short batches, of
 * output panels, and then the threads pack each A block together), an A block holds about
 * A_BYTES, and each panel runs down the block, so a panel is fetched once per block and each A
 * sliver is reused by every panel. K is never split.
 *
 * aarch64 (bgemm_arm64.h): the same driver over a bfmmla kernel, 10 x 8 tiles, with its own
 * panel layout (4 k per column pair group); word counts per row (kw_of) cover both layouts.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "bf16.h" /* round_bf16: vcvtne2ps2bf16's rounding */
#include "bgemm.h"
#include "team.h"


/* The avx512bf16 target and its intrinsics arrived in GCC 10 and clang 9; older compilers build
 * the rest, and kime_bgemm_missing answers "build". */
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__)) && \
    (defined(__clang__) ? __clang_major__ >= 9 : __GNUC__ >= 10)
#define KB_BF16 1
#include <cpuid.h>
#include <immintrin.h>
#define T512 __attribute__((target("avx512f,avx512bw,avx512vl,fma")))
#define T256 __attribute__((target("avx2,fma")))
#define TB512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16,fma")))
#include "vgelu.h"
#include "sliver512.h"
#include "amx.h"
#ifdef KIME_AMX
#define KB_AMX 1
#define TBAMX __attribute__((target("amx-tile,amx-bf16,avx512f,avx512bw,avx512vl,avx512bf16")))
#endif
#endif

#include "epilogue512.h"

#if defined(__aarch64__)
#define KB_ARM 1 /* the kernel needs FEAT_BF16 (bfmmla), checked at run time */
#define BMR 10     /* bgemm_arm64.h's tile */
#define BNR 8
#else
#define BMR 14
#define BNR 32
#endif
#define AMX_MR 32 /* the AMX kernel's rows: 2 x 2 tiles of 16 x 16 */
#ifdef KB_AMX
#define BMAX_TILE (AMX_MR * BNR) /* floats of the largest tile (AMX's) */
#else
#define BMAX_TILE (BMR * BNR)  /* floats of the register tile */
#endif
#define A_BYTES (384 << 10)    /* a thread's packed A block: a third of a Zen 4 or 5 core's L2 */

#ifdef KB_BF16
_Static_assert(BNR == STORE512_NR, "the BF16 tile is stored by the FP32 GEMM's AVX-512 store");
#endif

/* ---- the CPU ---------------------------------------------------------------------------------- */

/* 1 when the CPU and its OS run AVX-512 (F, BW, VL) with AVX512_BF16; cached. */
static int cpu_bf16(void)
{
    static volatile int cached = -1; /* racing first calls all store the same value */
    int has = cached;
    if (has >= 0)
        return has;
    has = 0;
#ifdef KB_BF16
    unsigned eax, ebx, ecx, edx;
    __builtin_cpu_init(); /* libgcc's checks include the OS's XSAVE support for zmm state */
    /* AVX512_BF16 is cpuid leaf 7 subleaf 1, EAX bit 5, asked directly: older libgccs don't
     * know its name. */
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl") && __get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx) &&
        (eax >> 5 & 1))
        has = 1;
#endif
    cached = has;
    return has;
}

/* 1 when the AMX kernel runs at `isa`: AMX-BF16 that this process may use, at the CPU's own
 * avx512 level (a named KIME_ISA runs the level's own kernels, as qgemm.c's AMX), unless
 * KIME_BGEMM=avx512bf16 (read on every call) asks for the AVX-512 kernel. */
static int use_amx(int isa)
{
#ifdef KB_AMX
    static volatile int cached = -1;
    int has = cached;
    if (has < 0)
        cached = has = cpu_bf16() && (kime_amx_features() & KIME_AMX_BF16) ? 1 : 0;
    const char *want = getenv("KIME_BGEMM");
    return has && isa == KIME_ISA_AVX512 && kime_isa_uncapped(isa) &&
           !(want && strcmp(want, "avx512bf16") == 0);
#else
    (void)isa;
    return 0;
#endif
}

int kime_bgemm_amx(int isa) { return use_amx(isa); }

const char *kime_bgemm_missing(int isa)
{
#if defined(KB_ARM)
    (void)cpu_bf16;
    if (!(kime_isa_arm_features() & KIME_ARM_BF16))
        return "bf16";
    return isa >= KIME_ISA_BF16 ? NULL : "isa";
#elif defined(KB_BF16)
    if (!cpu_bf16())
        return "avx512_bf16";
    return isa >= KIME_ISA_AVX512 ? NULL : "isa";
#else
    (void)isa;
    (void)cpu_bf16;
    return "build";
#endif
}

/* ---- packing W -------------------------------------------------------------------------------- */

const char *kime_bgemm_kernels(void)
{
#if defined(KB_ARM)
    (void)use_amx;
    return "bfmmla";
#else
    return use_amx(kime_isa_detect()) ? "amx-bf16" : "avx512bf16";
#endif
}

/* 32-bit words a packed row (or column) takes: x86 pairs of k, padded to 16 pairs (an AMX
 * tile's rows, so its loads never pass the panel; both x86 kernels read the one layout);
 * aarch64 groups of 4 k, 2 words */
static size_t kw_of(int K)
{
#if defined(KB_ARM)
    return ((size_t)(K > 0 ? K : 0) + 3) / 4 * 2;
#else
    return ((size_t)(K > 0 ? K : 0) + 31) / 32 * 16;
#endif
}

/* bf16 index of (lane j, k) in a panel: x86 word g * NR + j holds k = 2g (low), 2g + 1 (high);
 * aarch64 group k / 4 holds column pairs of 8 bf16 (see bgemm_arm64.h) */
static size_t bpos(int j, size_t k)
{
#if defined(KB_ARM)
    return k / 4 * BNR * 4 + (size_t)(j / 2) * 8 + (size_t)(j % 2) * 4 + k % 4;
#else
    return (k / 2 * BNR + (size_t)j) * 2 + k % 2;
#endif
}

static size_t bpanels(int N, int geglu)
{
    int width = geglu ? BNR / 2 : BNR, outputs = geglu ? N / 2 : N;
    return (size_t)((outputs + width - 1) / width);
}

size_t kime_bgemm_packed_bytes(int N, int K, int geglu)
{
    return bpanels(N, geglu) * kw_of(K) * BNR * sizeof(uint32_t);
}

void kime_bgemm_pack(const float *W, int N, int K, int geglu, void *packed)
{
    const int half = BNR / 2, I = N / 2;
    const size_t P = bpanels(N, geglu), KW = kw_of(K);
    uint16_t *out = (uint16_t *)packed;
    for (size_t p = 0; p < P; p++)
        for (int j = 0; j < BNR; j++) {
            /* the row of W feeding lane j of panel p, or -1 for zero padding (as gemm.c) */
            long row = geglu ? (long)p * half + (j % half) : (long)p * BNR + j;
            if (geglu)
                row = row < I ? row + (j < half ? 0 : I) : -1;
            else if (row >= N)
                row = -1;
            uint16_t *dst = out + p * KW * BNR * 2;
            for (size_t k = 0; k < 2 * KW; k++)
                dst[bpos(j, k)] =
                    row < 0 || k >= (size_t)K ? 0 : round_bf16(W[(size_t)row * K + k]);
        }
}

/* ---- scratch ---------------------------------------------------------------------------------- */

/* Rows of A a thread packs at once: a multiple of mr whose block fills about A_BYTES. */
static int bblock_rows(int K, int mr)
{
    size_t k2 = kw_of(K) > 0 ? kw_of(K) : 1;
    size_t tiles = A_BYTES / ((size_t)mr * k2 * sizeof(uint32_t));
    return mr * (int)(tiles < 1 ? 1 : tiles > 64 ? 64 : tiles);
}

/* One row rounded to bf16, in whole 64-byte conversions (32 floats each). */
static size_t row_bytes(int K) { return (kw_of(K) * sizeof(uint32_t) + 63) & ~(size_t)63; }

/* A thread's share: the register tile's spill, one rounded row, then its A block; every part a
 * multiple of 64 bytes, so every share stays 64-B aligned. */
static size_t bthread_bytes(int K)
{
    const int rows = bblock_rows(K, BMR) > bblock_rows(K, AMX_MR) ? bblock_rows(K, BMR)
                                                                  : bblock_rows(K, AMX_MR);
    size_t block = (size_t)rows * kw_of(K) * sizeof(uint32_t);
    return BMAX_TILE * sizeof(float) + row_bytes(K) + ((block + 63) & ~(size_t)63);
}

size_t kime_bgemm_scratch_bytes(int K, int nthreads)
{
    return bthread_bytes(K) * (size_t)(nthreads > 1 ? nthreads : 1) + 64;
}

#ifdef KB_BF16
/* ---- AVX512_BF16 kernel ------------------------------------------------------------------------ */

/* Round rows [0, m) of A to bf16 pairs in a tile sliver (K2 groups of MR words); rows past m and
 * the odd K's last high half are zero. */
TB512 static void pack_a(const float *A, int lda, int m, int K, uint32_t *row, uint32_t *dst)
{
    (void)row; /* sliver512.h transposes in registers */
    const int K2 = (int)kw_of(K);
    __m512i r[16];
    for (int i = m; i < 16; i++)
        r[i] = _mm512_setzero_si512();
    for (int g = 0; g < K2; g += 16) { /* 32 k, 16 pairs, of every row at a time */
        const int k = 2 * g, left = K - k;
        const __mmask16 lo = left >= 16 ? 0xffff : left > 0 ? (__mmask16)((1u << left) - 1) : 0;
        const __mmask16 hi = left >= 32 ? 0xffff
                             : left > 16 ? (__mmask16)((1u << (left - 16)) - 1) : 0;
        for (int i = 0; i < m; i++) {
            const float *x = A + (size_t)i * lda + k;
            r[i] = (__m512i)_mm512_cvtne2ps_pbh(_mm512_maskz_loadu_ps(hi, x + 16),
                                                _mm512_maskz_loadu_ps(lo, x));
        }
        sliver_put16(r, BMR, K2 - g < 16 ? K2 - g : 16, dst + (size_t)g * BMR);
    }
}

TB512 static inline __attribute__((always_inline)) void
kernel_m(const int m, int K2, const uint32_t *a, const uint32_t *b, float *acc, const int ahead)
{
    __m512 c0[BMR], c1[BMR];
#pragma GCC unroll 16
    for (int i = 0; i < m; i++)
        c0[i] = c1[i] = _mm512_setzero_ps();
    for (int g = 0; g < K2; g++, a += BMR, b += BNR) {
        if (ahead) /* the pair's two lines (team.h) */
            kime_fetch_ahead(b, 2);
        const __m512bh b0 = (__m512bh)_mm512_loadu_si512(b);
        const __m512bh b1 = (__m512bh)_mm512_loadu_si512(b + 16);
#pragma GCC unroll 16
        for (int i = 0; i < m; i++) {
            const __m512bh ai = (__m512bh)_mm512_set1_epi32((int)a[i]);
            c0[i] = _mm512_dpbf16_ps(c0[i], ai, b0);
            c1[i] = _mm512_dpbf16_ps(c1[i], ai, b1);
        }
    }
#pragma GCC unroll 16
    for (int i = 0; i < m; i++) {
        _mm512_store_ps(acc + i * BNR, c0[i]);
        _mm512_store_ps(acc + i * BNR + 16, c1[i]);
    }
}

#define KB512(M, AHEAD) kernel_m(M, K2, a, b, acc, AHEAD)
TB512 static void kernel(int m, int K2, const uint32_t *a, const uint32_t *b, float *acc)
{
    switch (m) { KIME_ROW_CASES14(KB512, 0) } /* one register allocation per row count */
}

/* kernel for a panel's first tile, fetching its weights ahead (team.h) */
TB512 static void kernel_first(int m, int K2, const uint32_t *a, const uint32_t *b, float *acc)
{
    switch (m) { KIME_ROW_CASES14(KB512, 1) }
}
#undef KB512

#define store_tile store512

#ifdef KB_AMX
/* ---- AMX-BF16 kernel: 32 x 32 tiles of tdpbf16ps ------------------------------------------- */

/* Rows [0, m) of A rounded as pack_a rounds them, into the A tiles: per 16 pairs of k, the
 * sliver's AMX_MR rows of 16 words, so each tile is 1 KiB in one piece; the padded rows the
 * kernel loads hold zeros. */
TB512 static void pack_a_amx(const float *A, int lda, int m, int K, uint32_t *dst)
{
    const int K2 = (int)kw_of(K);
    for (int i = 0; i < m; i++) {
        const float *x = A + (size_t)i * lda;
        for (int g = 0; g < K2; g += 16) {
            const int k = 2 * g, left = K - k;
            const __mmask16 lo = left >= 16 ? 0xffff
                                 : left > 0 ? (__mmask16)((1u << left) - 1) : 0;
            const __mmask16 hi = left >= 32 ? 0xffff
                                 : left > 16 ? (__mmask16)((1u << (left - 16)) - 1) : 0;
            const __m512i r = (__m512i)_mm512_cvtne2ps_pbh(_mm512_maskz_loadu_ps(hi, x + k + 16),
                                                           _mm512_maskz_loadu_ps(lo, x + k));
            _mm512_storeu_si512(dst + ((size_t)g / 16 * AMX_MR + i) * 16, r);
        }
    }
    const int top = m <= 16 ? 16 : AMX_MR; /* the rows the kernel's tiles load */
    for (int i = m; i < top; i++)
        for (int g = 0; g < K2; g += 16)
            _mm512_storeu_si512(dst + ((size_t)g / 16 * AMX_MR + i) * 16, _mm512_setzero_si512());
}

/* tdpbf16ps sums a row's 32 products per tile row into FP32, as vdpbf16ps does per pair, in
 * hardware's own order within the tile: its bits are its own (the same at any thread count and
 * batch: every C element still takes every k in one fixed sequence of tiles). Tiles as qgemm.c's
 * AMX kernel: 0-3 the 2 x 2 accumulators, 4-5 A, 6-7 the panel's two halves at a stride of one
 * pair group (128 bytes). np: the lines of the next panel this tile asks for into L2 (team.h's
 * kime_next_panel: a panel's later tiles, which read it from L2, fetch the next from DRAM). */
TBAMX static void kernel_amx(int m, int K2, const uint32_t *a, const uint32_t *b, float *acc,
                             kime_next_panel np)
{
    const uint32_t *end = b + (size_t)K2 * BNR;
    _tile_zero(0);
    _tile_zero(1);
    if (m > 16) {
        _tile_zero(2);
        _tile_zero(3);
        for (int s = 0; b < end; b += 16 * BNR, a += AMX_MR * 16, s++) {
            kime_next_panel_step(np, s);
            _tile_loadd(6, b, BNR * 4);
            _tile_loadd(7, b + 16, BNR * 4);
            _tile_loadd(4, a, 64);
            _tile_loadd(5, a + 16 * 16, 64);
            _tile_dpbf16ps(0, 4, 6);
            _tile_dpbf16ps(1, 4, 7);
            _tile_dpbf16ps(2, 5, 6);
            _tile_dpbf16ps(3, 5, 7);
        }
        _tile_stored(2, acc + 16 * BNR, BNR * 4);
        _tile_stored(3, acc + 16 * BNR + 16, BNR * 4);
    } else {
        for (int s = 0; b < end; b += 16 * BNR, a += AMX_MR * 16, s++) {
            kime_next_panel_step(np, s);
            _tile_loadd(6, b, BNR * 4);
            _tile_loadd(7, b + 16, BNR * 4);
            _tile_loadd(4, a, 64);
            _tile_dpbf16ps(0, 4, 6);
            _tile_dpbf16ps(1, 4, 7);
        }
    }
    _tile_stored(0, acc, BNR * 4);
    _tile_stored(1, acc + 16, BNR * 4);
}
#endif /* KB_AMX */
#endif /* KB_BF16 */

#ifdef KB_ARM
#include "bgemm_arm64.h"
#define kernel_first kernel /* no prefetching twin on aarch64 */
#endif

#if defined(KB_BF16) || defined(KB_ARM)
/* ---- driver ----------------------------------------------------------------------------------- */

typedef struct {
    const float *A;
    const uint32_t *panels;
    int lda, M, K, outputs, width, npanels;
    epilogue e;
    char *scratch;
    int amx; /* the AMX kernel and its A tiles (use_amx) */
} bjob;

/* Thread t's share of scratch: its accumulator tile, one row's words, then its A block. */
static char *bthread_base(const bjob *j, int t)
{
    return j->scratch + (size_t)t * bthread_bytes(j->K);
}

static void bpack_tile(const void *p, int tid, int owner, int m0, int i, int m)
{
    const bjob *j = (const bjob *)p;
    uint32_t *row = (uint32_t *)(bthread_base(j, tid) + BMAX_TILE * sizeof(float));
    uint32_t *ap = (uint32_t *)(bthread_base(j, owner) + BMAX_TILE * sizeof(float) +
                                row_bytes(j->K));
#ifdef KB_AMX
    if (j->amx) {
        pack_a_amx(j->A + (size_t)(m0 + i) * j->lda, j->lda, m, j->K,
                   ap + (size_t)i * kw_of(j->K));
        return;
    }
#endif
    pack_a(j->A + (size_t)(m0 + i) * j->lda, j->lda, m, j->K, row, ap + (size_t)i * kw_of(j->K));
}

static void brun_panels(const void *p, int tid, int owner, int m0, int mb, int p0, int p1)
{
    const bjob *j = (const bjob *)p;
    const size_t K2 = kw_of(j->K); /* words per packed row */
    float *acc = (float *)bthread_base(j, tid);
    const uint32_t *ap = (const uint32_t *)(bthread_base(j, owner) + BMAX_TILE * sizeof(float) +
                                            row_bytes(j->K));
    const int mr = j->amx ? AMX_MR : BMR;
#ifdef KB_AMX
    if (j->amx)
        kime_amx_enter();
#endif
    for (int q = p0; q < p1; q++) {
        const uint32_t *b = j->panels + (size_t)q * K2 * BNR;
        const int n0 = q * j->width;
        const int nv = j->outputs - n0 < j->width ? j->outputs - n0 : j->width;
        for (int i = 0; i < mb; i += mr) {
            const int m = mb - i < mr ? mb - i : mr;
            float *c = j->e.C + (size_t)(m0 + i) * j->e.ldc;
            kime_prefetch_tile(c, j->e.ldc, m, n0, nv);
#ifdef KB_AMX
            if (j->amx)
                kernel_amx(m, (int)K2, ap + (size_t)i * K2, b, acc,
                           kime_next_panel_part(q + 1 < p1 ? b + K2 * BNR : NULL,
                                                (int)(K2 * BNR * 4 / 64), (mb + mr - 1) / mr,
                                                (int)((K2 + 15) / 16), i / mr));
            else
#endif
                (i == 0 ? kernel_first : kernel)(m, (int)K2, ap + (size_t)i * K2, b, acc);
            store_tile(acc, m, n0, nv, &j->e, c);
        }
    }
#ifdef KB_AMX
    if (j->amx)
        kime_amx_leave();
#endif
}
#endif /* KB_BF16 || KB_ARM */

void kime_bgemm(const float *A, int lda, int M, int K, int N, const void *packed,
                const float *bias, int epilogue_kind, float *C, int ldc, void *scratch,
                int nthreads)
{
#if defined(KB_BF16) || defined(KB_ARM)
    if (M <= 0 || N <= 0 || K < 0)
        return;
    const int geglu = epilogue_kind == KIME_EPI_GEGLU;
    bjob j = {A, (const uint32_t *)packed, lda, M, K, geglu ? N / 2 : N, geglu ? BNR / 2 : BNR,
              (int)bpanels(N, geglu),
              {bias, geglu && bias ? bias + N / 2 : NULL, C, ldc, epilogue_kind},
              (char *)(((uintptr_t)scratch + 63) & ~(uintptr_t)63),
              use_amx(kime_isa_detect())};
    const int mr = j.amx ? AMX_MR : BMR;
    const kime_gemm_plan plan = {&j, M, mr, bblock_rows(K, mr), j.npanels, bpack_tile,
                                 brun_panels};
    kime_gemm_drive(&plan, nthreads);
#else
    (void)A, (void)lda, (void)M, (void)K, (void)N, (void)packed, (void)bias;
    (void)epilogue_kind, (void)C, (void)ldc, (void)scratch, (void)nthreads;
#endif
}
