/* INT8 GEMM with fused dequantization (qgemm.h).
 *
 * Layout. Weights are quantized per output channel and packed in panels of NR columns of C:
 * panel p holds K4 = ceil(K/4) groups; group g is NR lanes of 4 consecutive k (int8), zero-padded
 * past K and N, so one 32-bit lane of a vector is 4 k of one column, as vpdpbusd and
 * vpmaddubsw + vpmaddwd consume them. A GEGLU panel holds NR/2 outputs: lanes [0, NR/2) their
 * "a" rows and lanes [NR/2, NR) the matching "g" rows. After all panels: float scale_w[P*NR] and
 * int32 comp[P*NR] = OFFSET * colsum(q_w) per lane (OFFSET 128 for the unsigned-A kernels, else
 * 0). A rows are quantized and packed MR at a time as K4 groups of MR x 4 bytes (see qrun).
 *
 * Kernels.
 *  - AVX-512 VNNI: A packed unsigned (u8 = q + 128), 14 x 32 tiles of vpdpbusd; the store
 *    subtracts 128 * colsum(q_w), which makes the sum exactly sum q_a q_w.
 *  - AMX: the same unsigned scheme, quantization and store, with 32 x 32 tiles of tdpbusd
 *    (amx.h) over vnni512's panels, K padded to 64 (QL_K64).
 *  - AVX-VNNI: the same unsigned scheme in ymm, 6 x 16 tiles (12 accumulators, 2 B vectors and
 *    a broadcast fill the 16 VEX registers), reusing the AVX2 quantization and store. Its body is
 *    written once (QKERNEL_YMM_VNNI) and built for the VEX instruction and for its EVEX twin.
 *  - AVX2: vpmaddubsw multiplies u8 by s8 and adds pairs into int16 with saturation; with
 *    u8 = q + 128 up to 255 a pair can reach 64770, so that scheme is not exact. Instead A stays
 *    signed and each product is formed as |q_a| * (q_w * sign(q_a)) (vpabsb, vpsignb): operands are
 *    at most 127 in magnitude, a pair at most 2 * 127 * 127 = 32258 < 32767, so no saturation,
 *    the same 8-bit quantization as the other paths and bit-identical INT32 sums. Then vpmaddwd
 *    with ones widens pairs into int32. 4 x 16 tiles (8 accumulators).
 *  - portable C: signed, 4 x 8 tiles, plain int32 loops.
 *  - aarch64 (qgemm_arm64.h): neon (smull/sadalp), sdot (dotprod) and smmla (i8mm), signed,
 *    8 columns wide; smmla uses its own layout (QL_MMLA: 8-k groups of column and row pairs).
 *
 * Determinism. The INT32 sums are exact, so independent of the order, the tile, the thread and
 * the batch. The dequantization and epilogue are one routine per kernel set, per element, from
 * (acc, scale_a[m], scale_w[n], bias[n]) only: x = ((float)acc * scale_a) * scale_w + bias.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "qgemm.h"
#include "team.h"


#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
#define KQ_X86 1
#include <immintrin.h>
#define TQ512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,fma")))
#define TQ256 __attribute__((target("avx2,fma")))
#define TQYMM_EVEX __attribute__((target("avx2,fma,avx512vl,avx512vnni")))
#include "amx.h" /* AMX (Sapphire Rapids and later): GCC 11 and clang 12 know its intrinsics */
#ifdef KIME_AMX
#define KQ_AMX 1
#define TQAMX __attribute__((target("amx-tile,amx-int8,avx512f,avx512bw,avx512vl")))
#endif
#include "sliver512.h"
#include <cpuid.h>
/* The "avxvnni" target and _mm256_dpbusd_avx_epi32 arrived in GCC 11 and clang 12; older
 * compilers build the rest and never pick the VEX impl. */
#if defined(__clang__) ? __clang_major__ >= 12 : __GNUC__ >= 11
#define KQ_AVXVNNI 1
#define TQYMM_VEX __attribute__((target("avx2,fma,avxvnni")))
#endif
#endif

#if defined(__aarch64__)
#define KQ_ARM 1
#endif

#define QMAX_TILE (32 * 32) /* int32 of the largest MR x NR tile (amx's) */
#define QMAX_MC (64 * 32)   /* most rows in a thread's A block: 64 of the tallest tiles */

typedef struct {
    const float *bias, *gbias;
    int ldc, epi;
} qepi;

/* Packed layouts. QL_K4: 4-k groups, lane j of a group is 4 consecutive k of column j (rows
 * of A the same). QL_MMLA (smmla): K padded to 8; per 8-k group, pairs of columns (rows) as 16
 * bytes, the first one's 8 k then the second's. QL_K64 (amx): the panels of QL_K4 with K padded
 * to 64, so that a tile of 16 groups never reads past its panel; A slivers in tiles (qpack_amx).
 */
enum { QL_K4 = 0, QL_MMLA = 1, QL_K64 = 2 };

typedef struct {
    int mr, nr, offset;
    size_t a_bytes;
    /* quantize x[0..K) into q[0..K4*4) (zero-padded), return the scale amax / 127 (NULL where
     * `pack` is set) */
    float (*quant)(const float *x, int K, int8_t *q);
    void (*kernel)(int m, int K4, const uint8_t *a, const int8_t *b, int32_t *acc);
    /* dequantize + epilogue tile rows [0, m), store nv outputs from column n0 */
    void (*store)(const int32_t *acc, int m, int n0, int nv, const qepi *e, const float *sa,
                  const float *sw, const int32_t *comp, float *C);
    int layout; /* QL_K4 (0) unless named */
    /* optional: qpack_a's sliver and scales (the same bytes) faster; NULL: quant, then qpack_a */
    void (*pack)(const float *A, int lda, int m, int K, int K4, int mr, uint8_t *dst, float *sa);
    /* optional: a thread's set-up before its tiles and its release after them (amx's tile
     * configuration, which is per thread) */
    void (*enter)(void);
    void (*leave)(void);
    /* optional: `kernel` for a panel's first tile, fetching the panel ahead (team.h's
     * KIME_AHEAD); the same sums. NULL: kernel */
    void (*first)(int m, int K4, const uint8_t *a, const int8_t *b, int32_t *acc);
} qimpl;

static const float QSQRT1_2 = 0.70710678118654752440f;

static inline void put32(void *dst, const void *src) { memcpy(dst, src, 4); }
static inline int32_t get32(const void *src)
{
    int32_t v;
    memcpy(&v, src, 4);
    return v;
}

/* ---- portable ----------------------------------------------------------------------------- */

#define QPMR 4
#define QPNR 8

static float quant_portable(const float *x, int K, int8_t *q)
{
    float amax = 0.0f;
    for (int k = 0; k < K; k++) {
        float a = fabsf(x[k]);
        amax = a > amax ? a : amax;
    }
    const float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
    for (int k = 0; k < K; k++) {
        float r = rintf(x[k] * inv);
        r = r > 127.0f ? 127.0f : r < -127.0f ? -127.0f : r;
        q[k] = (int8_t)(int)r;
    }
    for (int k = K; k < (K + 3) / 4 * 4; k++)
        q[k] = 0;
    return amax / 127.0f;
}

static void qkernel_portable(int m, int K4, const uint8_t *a, const int8_t *b, int32_t *acc)
{
    (void)m;
    int32_t c[QPMR][QPNR] = {{0}};
    const int8_t *sa = (const int8_t *)a;
    for (int g = 0; g < K4; g++, sa += QPMR * 4, b += QPNR * 4)
        for (int i = 0; i < QPMR; i++)
            for (int j = 0; j < QPNR; j++)
                for (int u = 0; u < 4; u++)
                    c[i][j] += (int32_t)sa[i * 4 + u] * (int32_t)b[j * 4 + u];
    memcpy(acc, c, sizeof c);
}

static float qgelu1(float x) { return x * 0.5f * (1.0f + erff(x * QSQRT1_2)); }

static inline float deq1(int32_t acc, int32_t comp, float sa, float sw, const float *bias, int j)
{
    float x = (float)(acc - comp) * sa;
    x = x * sw;
    return bias ? x + bias[j] : x;
}

static void qstore_portable(const int32_t *acc, int m, int n0, int nv, const qepi *e,
                            const float *sa, const float *sw, const int32_t *comp, float *C)
{
    const int half = QPNR / 2;
    for (int i = 0; i < m; i++, acc += QPNR, C += e->ldc)
        for (int j = 0; j < nv; j++) {
            float x = deq1(acc[j], comp[j], sa[i], sw[j], e->bias, n0 + j);
            switch (e->epi) {
            case KIME_EPI_ACCUM: x = C[n0 + j] + x; break;
            case KIME_EPI_GELU: x = qgelu1(x); break;
            case KIME_EPI_RELU: x = x < 0.0f ? 0.0f : x; break;
            case KIME_EPI_GEGLU:
                x = qgelu1(x) * deq1(acc[j + half], comp[j + half], sa[i], sw[j + half], e->gbias,
                                     n0 + j);
                break;
            }
            C[n0 + j] = x;
        }
}

#ifdef KQ_X86
/* The GELU epilogue is gemm.c's, from the one shared header. */
#define T512 __attribute__((target("avx512f,avx512bw,avx512vl,fma")))
#define T256 __attribute__((target("avx2,fma")))
#include "vgelu.h"
#include "lanes256.h"

/* ---- AVX-512 VNNI: 14 x 32 tiles ---------------------------------------------------------- */

#define VMR 14
#define VNR 32
#define V16(v) _mm512_set1_ps(v)

/* qpack_a's sliver and scales with quant_portable's arithmetic (scale amax / 127, q = rint(x *
 * 127 / amax) clamped to +-127), flipped to u8 (q ^ 0x80): a scale per row, then 64 k (16
 * groups) of every row at a time into sliver512.h's transpose. */
TQ512 static void qpack512(const float *A, int lda, int m, int K, int K4, int mr, uint8_t *dst,
                           float *sa)
{
    float inv[16];
    for (int i = 0; i < m; i++) {
        const float *x = A + (size_t)i * lda;
        __m512 vmax = _mm512_setzero_ps();
        int k = 0;
        for (; k + 16 <= K; k += 16)
            vmax = _mm512_max_ps(vmax, _mm512_abs_ps(_mm512_loadu_ps(x + k)));
        if (k < K)
            vmax = _mm512_max_ps(vmax, _mm512_abs_ps(_mm512_maskz_loadu_ps(
                                           (__mmask16)((1u << (K - k)) - 1), x + k)));
        const float amax = _mm512_reduce_max_ps(vmax);
        inv[i] = amax > 0.0f ? 127.0f / amax : 0.0f;
        sa[i] = amax / 127.0f;
    }
    const __m512i lo = _mm512_set1_epi32(-127), hi = _mm512_set1_epi32(127);
    const __m512i flip = _mm512_set1_epi32((int)0x80808080u);
    __m512i r[16];
    for (int i = m; i < 16; i++)
        r[i] = flip; /* a padded row: q = 0 */
    for (int g = 0; g < K4; g += 16) {
        for (int i = 0; i < m; i++) {
            const float *x = A + (size_t)i * lda + 4 * g;
            const __m512 vinv = _mm512_set1_ps(inv[i]);
            __m128i q[4];
            for (int c = 0; c < 4; c++) {
                const int left = K - 4 * g - 16 * c;
                const __mmask16 msk = left >= 16 ? 0xffff
                                      : left > 0 ? (__mmask16)((1u << left) - 1) : 0;
                __m512i v = _mm512_cvtps_epi32(
                    _mm512_mul_ps(_mm512_maskz_loadu_ps(msk, x + 16 * c), vinv));
                q[c] = _mm512_cvtepi32_epi8(_mm512_min_epi32(_mm512_max_epi32(v, lo), hi));
            }
            __m512i w = _mm512_castsi128_si512(q[0]);
            w = _mm512_inserti32x4(w, q[1], 1);
            w = _mm512_inserti32x4(w, q[2], 2);
            w = _mm512_inserti32x4(w, q[3], 3);
            r[i] = _mm512_xor_si512(w, flip);
        }
        sliver_put16(r, mr, K4 - g < 16 ? K4 - g : 16, (uint32_t *)(dst + (size_t)g * mr * 4));
    }
}

TQ512 static inline __attribute__((always_inline)) void
qkernel512_m(const int m, int K4, const uint8_t *a, const int8_t *b, int32_t *acc,
             const int ahead)
{
    __m512i c0[VMR], c1[VMR];
#pragma GCC unroll 16
    for (int i = 0; i < m; i++)
        c0[i] = c1[i] = _mm512_setzero_si512();
    for (int g = 0; g < K4; g++, a += VMR * 4, b += VNR * 4) {
        if (ahead) /* the group's two lines (team.h) */
            kime_fetch_ahead(b, 2);
        __m512i b0 = _mm512_loadu_si512(b), b1 = _mm512_loadu_si512(b + 64);
#pragma GCC unroll 16
        for (int i = 0; i < m; i++) {
            __m512i ai = _mm512_set1_epi32(get32(a + 4 * i));
            c0[i] = _mm512_dpbusd_epi32(c0[i], ai, b0);
            c1[i] = _mm512_dpbusd_epi32(c1[i], ai, b1);
        }
    }
#pragma GCC unroll 16
    for (int i = 0; i < m; i++) {
        _mm512_storeu_si512(acc + i * VNR, c0[i]);
        _mm512_storeu_si512(acc + i * VNR + 16, c1[i]);
    }
}

#define QK512(M, AHEAD) qkernel512_m(M, K4, a, b, acc, AHEAD)
TQ512 static void qkernel512(int m, int K4, const uint8_t *a, const int8_t *b, int32_t *acc)
{
    switch (m) { KIME_ROW_CASES14(QK512, 0) }
}

/* qkernel512 for a panel's first tile, fetching its weights ahead (team.h) */
TQ512 static void qkernel512_first(int m, int K4, const uint8_t *a, const int8_t *b,
                                   int32_t *acc)
{
    switch (m) { KIME_ROW_CASES14(QK512, 1) }
}
#undef QK512

TQ512 static inline __m512 deq16(const int32_t *acc, __m512i comp, __m512 sa, __m512 sw,
                                 __m512 bias)
{
    __m512 x = _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_loadu_si512(acc), comp));
    return _mm512_add_ps(_mm512_mul_ps(_mm512_mul_ps(x, sa), sw), bias);
}

TQ512 static void qstore512(const int32_t *acc, int m, int n0, int nv, const qepi *e,
                            const float *sa, const float *sw, const int32_t *comp, float *C)
{
    if (e->epi == KIME_EPI_GEGLU) {
        __mmask16 k = nv >= 16 ? 0xffff : (__mmask16)((1u << nv) - 1);
        __m512 ba = e->bias ? _mm512_maskz_loadu_ps(k, e->bias + n0) : _mm512_setzero_ps();
        __m512 bg = e->gbias ? _mm512_maskz_loadu_ps(k, e->gbias + n0) : _mm512_setzero_ps();
        __m512 swa = _mm512_loadu_ps(sw), swg = _mm512_loadu_ps(sw + 16);
        __m512i ca = _mm512_loadu_si512(comp), cg = _mm512_loadu_si512(comp + 16);
        for (int i = 0; i < m; i++, acc += VNR, C += e->ldc) {
            __m512 s = _mm512_set1_ps(sa[i]);
            __m512 x = deq16(acc, ca, s, swa, ba), g = deq16(acc + 16, cg, s, swg, bg);
            _mm512_mask_storeu_ps(C + n0, k, _mm512_mul_ps(gelu16(x), g));
        }
        return;
    }
    for (int v = 0; v < VNR / 16 && 16 * v < nv; v++) {
        int left = nv - 16 * v, j0 = n0 + 16 * v;
        __mmask16 k = left >= 16 ? 0xffff : (__mmask16)((1u << left) - 1);
        __m512 bias = e->bias ? _mm512_maskz_loadu_ps(k, e->bias + j0) : _mm512_setzero_ps();
        __m512 w = _mm512_loadu_ps(sw + 16 * v);
        __m512i cc = _mm512_loadu_si512(comp + 16 * v);
        float *c = C + j0;
        for (int i = 0; i < m; i++, c += e->ldc) {
            __m512 x = deq16(acc + i * VNR + 16 * v, cc, _mm512_set1_ps(sa[i]), w, bias);
            switch (e->epi) {
            case KIME_EPI_ACCUM: x = _mm512_add_ps(_mm512_maskz_loadu_ps(k, c), x); break;
            case KIME_EPI_GELU: x = gelu16(x); break;
            case KIME_EPI_RELU: x = _mm512_max_ps(_mm512_setzero_ps(), x); break;
            }
            _mm512_mask_storeu_ps(c, k, x);
        }
    }
}

/* ---- AVX2: 4 x 16 tiles, |a| * sign(a) w ------------------------------------------------- */

#define HQMR 4
#define HQNR 16
#define H8(v) _mm256_set1_ps(v)

TQ256 static float quant256(const float *x, int K, int8_t *q)
{
    __m256 vmax = _mm256_setzero_ps();
    const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    int k = 0;
    for (; k + 8 <= K; k += 8)
        vmax = _mm256_max_ps(vmax, _mm256_and_ps(_mm256_loadu_ps(x + k), absmask));
    float amax;
    {
        float t[8];
        _mm256_storeu_ps(t, vmax);
        amax = 0.0f;
        for (int i = 0; i < 8; i++)
            amax = t[i] > amax ? t[i] : amax;
        for (; k < K; k++) {
            float a = fabsf(x[k]);
            amax = a > amax ? a : amax;
        }
    }
    const float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
    const __m256 vinv = _mm256_set1_ps(inv);
    const __m256i lo = _mm256_set1_epi32(-127), hi = _mm256_set1_epi32(127);
    for (k = 0; k + 8 <= K; k += 8) {
        __m256i v = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + k), vinv));
        v = _mm256_min_epi32(_mm256_max_epi32(v, lo), hi);
        /* clamped to [-127, 127], so the saturating packs only narrow: 8 bytes, in order */
        const __m128i w = _mm_packs_epi32(_mm256_castsi256_si128(v),
                                          _mm256_extracti128_si256(v, 1));
        _mm_storel_epi64((__m128i *)(q + k), _mm_packs_epi16(w, w));
    }
    for (; k < K; k++) { /* same rounding as the vector lanes: cvtss2si, nearest even */
        int r = _mm_cvtss_si32(_mm_set_ss(x[k] * inv));
        q[k] = (int8_t)(r > 127 ? 127 : r < -127 ? -127 : r);
    }
    for (k = K; k < (K + 3) / 4 * 4; k++)
        q[k] = 0;
    return amax / 127.0f;
}

TQ256 static inline __attribute__((always_inline)) void
qkernel256_m(const int m, int K4, const uint8_t *a, const int8_t *b, int32_t *acc)
{
    __m256i c0[HQMR], c1[HQMR];
    const __m256i ones = _mm256_set1_epi16(1);
#pragma GCC unroll 4
    for (int i = 0; i < m; i++)
        c0[i] = c1[i] = _mm256_setzero_si256();
    for (int g = 0; g < K4; g++, a += HQMR * 4, b += HQNR * 4) {
        __m256i b0 = _mm256_loadu_si256((const __m256i *)b);
        __m256i b1 = _mm256_loadu_si256((const __m256i *)(b + 32));
#pragma GCC unroll 4
        for (int i = 0; i < m; i++) {
            __m256i ai = _mm256_set1_epi32(get32(a + 4 * i)), ua = _mm256_abs_epi8(ai);
            __m256i p0 = _mm256_maddubs_epi16(ua, _mm256_sign_epi8(b0, ai));
            __m256i p1 = _mm256_maddubs_epi16(ua, _mm256_sign_epi8(b1, ai));
            c0[i] = _mm256_add_epi32(c0[i], _mm256_madd_epi16(p0, ones));
            c1[i] = _mm256_add_epi32(c1[i], _mm256_madd_epi16(p1, ones));
        }
    }
#pragma GCC unroll 4
    for (int i = 0; i < m; i++) {
        _mm256_storeu_si256((__m256i *)(acc + i * HQNR), c0[i]);
        _mm256_storeu_si256((__m256i *)(acc + i * HQNR + 8), c1[i]);
    }
}

TQ256 static void qkernel256(int m, int K4, const uint8_t *a, const int8_t *b, int32_t *acc)
{
    switch (m) {
#define CASE(M) case M: qkernel256_m(M, K4, a, b, acc); break;
        CASE(1) CASE(2) CASE(3) CASE(4)
#undef CASE
    }
}

TQ256 static inline __m256 deq8(const int32_t *acc, __m256i comp, __m256 sa, __m256 sw,
                                __m256 bias)
{
    __m256 x = _mm256_cvtepi32_ps(
        _mm256_sub_epi32(_mm256_loadu_si256((const __m256i *)acc), comp));
    return _mm256_add_ps(_mm256_mul_ps(_mm256_mul_ps(x, sa), sw), bias);
}

TQ256 static void qstore256(const int32_t *acc, int m, int n0, int nv, const qepi *e,
                            const float *sa, const float *sw, const int32_t *comp, float *C)
{
    if (e->epi == KIME_EPI_GEGLU) {
        __m256i k = lanes8(nv);
        __m256 ba = maybe_load8(e->bias ? e->bias + n0 : NULL, nv, k);
        __m256 bg = maybe_load8(e->gbias ? e->gbias + n0 : NULL, nv, k);
        __m256 swa = _mm256_loadu_ps(sw), swg = _mm256_loadu_ps(sw + 8);
        __m256i ca = _mm256_loadu_si256((const __m256i *)comp);
        __m256i cg = _mm256_loadu_si256((const __m256i *)(comp + 8));
        for (int i = 0; i < m; i++, acc += HQNR, C += e->ldc) {
            __m256 s = _mm256_set1_ps(sa[i]);
            __m256 x = deq8(acc, ca, s, swa, ba), g = deq8(acc + 8, cg, s, swg, bg);
            store8(C + n0, nv, k, _mm256_mul_ps(gelu8(x), g));
        }
        return;
    }
    for (int v = 0; v < HQNR / 8 && 8 * v < nv; v++) {
        int j0 = n0 + 8 * v, left = nv - 8 * v;
        __m256i k = lanes8(left);
        __m256 bias = maybe_load8(e->bias ? e->bias + j0 : NULL, left, k);
        __m256 w = _mm256_loadu_ps(sw + 8 * v);
        __m256i cc = _mm256_loadu_si256((const __m256i *)(comp + 8 * v));
        float *c = C + j0;
        for (int i = 0; i < m; i++, c += e->ldc) {
            __m256 x = deq8(acc + i * HQNR + 8 * v, cc, _mm256_set1_ps(sa[i]), w, bias);
            switch (e->epi) {
            case KIME_EPI_ACCUM: x = _mm256_add_ps(load8(c, left, k), x); break;
            case KIME_EPI_GELU: x = gelu8(x); break;
            case KIME_EPI_RELU: x = _mm256_max_ps(_mm256_setzero_ps(), x); break;
            }
            store8(c, left, k, x);
        }
    }
}

/* ---- AVX-VNNI: 6 x 16 tiles of ymm vpdpbusd, u8 = q + 128 ----------------------------------- */

#define YMR 6
#define YNR 16 /* = HQNR: qstore256 reads these tiles as it reads the AVX2 ones */

/* NAME(m, K4, a, b, acc) with DPBUSD(acc, u8, s8) as the dot product, compiled for TARGET. The
 * production instance and its test twin differ only in the instruction's encoding. */
#define QKERNEL_YMM_VNNI(TARGET, NAME, DPBUSD)                                                   \
    TARGET static inline __attribute__((always_inline)) void                                     \
    NAME##_m(const int m, int K4, const uint8_t *a, const int8_t *b, int32_t *acc)               \
    {                                                                                            \
        __m256i c0[YMR], c1[YMR];                                                                \
        _Pragma("GCC unroll 6") for (int i = 0; i < m; i++)                                      \
            c0[i] = c1[i] = _mm256_setzero_si256();                                              \
        for (int g = 0; g < K4; g++, a += YMR * 4, b += YNR * 4) {                               \
            __m256i b0 = _mm256_loadu_si256((const __m256i *)b);                                 \
            __m256i b1 = _mm256_loadu_si256((const __m256i *)(b + 32));                          \
            _Pragma("GCC unroll 6") for (int i = 0; i < m; i++) {                                \
                __m256i ai = _mm256_set1_epi32(get32(a + 4 * i));                                \
                c0[i] = DPBUSD(c0[i], ai, b0);                                                   \
                c1[i] = DPBUSD(c1[i], ai, b1);                                                   \
            }                                                                                    \
        }                                                                                        \
        _Pragma("GCC unroll 6") for (int i = 0; i < m; i++) {                                    \
            _mm256_storeu_si256((__m256i *)(acc + i * YNR), c0[i]);                              \
            _mm256_storeu_si256((__m256i *)(acc + i * YNR + 8), c1[i]);                          \
        }                                                                                        \
    }                                                                                            \
    TARGET static void NAME(int m, int K4, const uint8_t *a, const int8_t *b, int32_t *acc)      \
    {                                                                                            \
        switch (m) {                                                                             \
        case 1: NAME##_m(1, K4, a, b, acc); break;                                               \
        case 2: NAME##_m(2, K4, a, b, acc); break;                                               \
        case 3: NAME##_m(3, K4, a, b, acc); break;                                               \
        case 4: NAME##_m(4, K4, a, b, acc); break;                                               \
        case 5: NAME##_m(5, K4, a, b, acc); break;                                               \
        case 6: NAME##_m(6, K4, a, b, acc); break;                                               \
        }                                                                                        \
    }

#ifdef KQ_AVXVNNI
QKERNEL_YMM_VNNI(TQYMM_VEX, qkernel_avxvnni, _mm256_dpbusd_avx_epi32)
#endif
QKERNEL_YMM_VNNI(TQYMM_EVEX, qkernel_avxvnni_evex, _mm256_dpbusd_epi32)
#undef QKERNEL_YMM_VNNI

#ifdef KQ_AMX
/* ---- AMX: 32 x 32 tiles of tdpbusd, u8 = q + 128 ------------------------------------------ */

/* One tdpbusd multiplies a tile of 16 rows x 16 4-k groups of A (u8) by 16 groups x 16 columns
 * of B (s8) into 16 x 16 int32, the same exact sums as vpdpbusd. Tiles 0-3 are a 2 x 2 block of
 * accumulators, 4-5 two A tiles (rows 0-15 and 16-31), 6-7 two B tiles: vnni512's 32-lane
 * panels read at a stride of one group (128 bytes), lanes 0-15 and 16-31. The sums land in
 * vnni512's acc layout (m rows of 32), and vnni512's store dequantizes them: the same bits. */
#define AMR 32

static void amx_enter(void) { kime_amx_enter(); }
static void amx_leave(void) { kime_amx_leave(); }

TQAMX static void qkernel_amx(int m, int K4, const uint8_t *a, const int8_t *b, int32_t *acc)
{
    const int8_t *end = b + (size_t)K4 * VNR * 4;
    _tile_zero(0);
    _tile_zero(1);
    if (m > 16) {
        _tile_zero(2);
        _tile_zero(3);
        for (; b < end; b += 16 * VNR * 4, a += AMR * 64) {
            _tile_loadd(6, b, VNR * 4);
            _tile_loadd(7, b + 64, VNR * 4);
            _tile_loadd(4, a, 64);
            _tile_loadd(5, a + 16 * 64, 64);
            _tile_dpbusd(0, 4, 6);
            _tile_dpbusd(1, 4, 7);
            _tile_dpbusd(2, 5, 6);
            _tile_dpbusd(3, 5, 7);
        }
        _tile_stored(2, acc + 16 * VNR, VNR * 4);
        _tile_stored(3, acc + 16 * VNR + 16, VNR * 4);
    } else {
        for (; b < end; b += 16 * VNR * 4, a += AMR * 64) {
            _tile_loadd(6, b, VNR * 4);
            _tile_loadd(7, b + 64, VNR * 4);
            _tile_loadd(4, a, 64);
            _tile_dpbusd(0, 4, 6);
            _tile_dpbusd(1, 4, 7);
        }
    }
    _tile_stored(0, acc, VNR * 4);
    _tile_stored(1, acc + 16, VNR * 4);
}

/* qpack512's quantization (the same operations, so the same bytes) into the A tiles: per 64
 * bytes of K (16 groups), the sliver's mr rows of 64 bytes, so each tile the kernel loads is 1 KiB
 * in one piece and a sliver is read front to back. The tile's padded rows, which the kernel
 * loads and whose sums the store drops, hold q = 0. */
TQ512 static void qpack_amx(const float *A, int lda, int m, int K, int K4, int mr, uint8_t *dst,
                            float *sa)
{
    const size_t ld = (size_t)K4 * 4;
    const __m512i lo = _mm512_set1_epi32(-127), hi = _mm512_set1_epi32(127);
    const __m128i flip = _mm_set1_epi8((char)0x80);
    for (int i = 0; i < m; i++) {
        const float *x = A + (size_t)i * lda;
        __m512 vmax = _mm512_setzero_ps();
        int k = 0;
        for (; k + 16 <= K; k += 16)
            vmax = _mm512_max_ps(vmax, _mm512_abs_ps(_mm512_loadu_ps(x + k)));
        if (k < K)
            vmax = _mm512_max_ps(vmax, _mm512_abs_ps(_mm512_maskz_loadu_ps(
                                           (__mmask16)((1u << (K - k)) - 1), x + k)));
        const float amax = _mm512_reduce_max_ps(vmax);
        const __m512 vinv = _mm512_set1_ps(amax > 0.0f ? 127.0f / amax : 0.0f);
        sa[i] = amax / 127.0f;
        uint8_t *d = dst + (size_t)i * 64;
        for (k = 0; k < K4 * 4; k += 16) {
            const int left = K - k;
            const __mmask16 msk = left >= 16 ? 0xffff
                                  : left > 0 ? (__mmask16)((1u << left) - 1) : 0;
            __m512i v = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_maskz_loadu_ps(msk, x + k), vinv));
            __m128i q = _mm512_cvtepi32_epi8(_mm512_min_epi32(_mm512_max_epi32(v, lo), hi));
            _mm_storeu_si128((__m128i *)(d + (size_t)(k / 64) * mr * 64 + k % 64),
                             _mm_xor_si128(q, flip));
        }
    }
    const int top = m <= 16 && mr > 16 ? 16 : mr; /* the rows the kernel's tiles load */
    for (int i = m; i < top; i++)
        for (size_t c = 0; c < ld / 64; c++)
            memset(dst + (c * mr + i) * 64, 0x80, 64);
}
#endif /* KQ_AMX */
#endif /* KQ_X86 */

#ifdef KQ_ARM
#include "qgemm_arm64.h"
#endif

static const qimpl QIMPLS[] = {
    [KIME_QGEMM_PORTABLE] = {QPMR, QPNR, 0, 64 << 10, quant_portable, qkernel_portable,
                             qstore_portable},
#ifdef KQ_X86
    [KIME_QGEMM_AVX2] = {HQMR, HQNR, 0, 64 << 10, quant256, qkernel256, qstore256},
    [KIME_QGEMM_VNNI512] = {VMR, VNR, 128, 256 << 10, NULL, qkernel512, qstore512,
                                 QL_K4, qpack512, NULL, NULL, qkernel512_first},
#ifdef KQ_AVXVNNI
    [KIME_QGEMM_AVXVNNI] = {YMR, YNR, 128, 64 << 10, quant256, qkernel_avxvnni, qstore256},
#endif
    [KIME_QGEMM_AVXVNNI_EVEX] = {YMR, YNR, 128, 64 << 10, quant256, qkernel_avxvnni_evex,
                                 qstore256},
#ifdef KQ_AMX
    [KIME_QGEMM_AMX] = {AMR, VNR, 128, 512 << 10, NULL, qkernel_amx, qstore512, QL_K64,
                        qpack_amx, amx_enter, amx_leave},
#endif
#endif
#ifdef KQ_ARM
    [KIME_QGEMM_NEON] = {NMR, ANR, 0, 64 << 10, quant_neon, qkernel_neon, qstore_neon, QL_K4},
    [KIME_QGEMM_SDOT] = {DMR, ANR, 0, 64 << 10, quant_neon, qkernel_sdot, qstore_neon, QL_K4},
    [KIME_QGEMM_SMMLA] = {MMR, ANR, 0, 64 << 10, quant_neon, qkernel_smmla, qstore_neon,
                          QL_MMLA},
#endif
};

static const char *const QIMPL_NAMES[] = {"portable", "avx2", "vnni512", "avxvnni",
                                          "avxvnni-evex", "neon", "sdot", "smmla", "amx"};

enum { QCPU_VNNI512 = 1, QCPU_VNNI_EVEX256 = 2, QCPU_AVXVNNI = 4, QCPU_AMX = 8 };

/* The VNNI flavours this CPU (and its OS's register state) runs; cached, as isa.c's answer. */
#ifdef KQ_X86
static int qcpu_features(void)
{
    static volatile int cached = -1; /* racing first calls all store the same value */
    int f = cached;
    if (f >= 0)
        return f;
    f = 0;
#ifdef KQ_X86
    __builtin_cpu_init(); /* libgcc's checks include the OS's XSAVE support for the registers */
    if (__builtin_cpu_supports("avx512vnni")) {
        f |= QCPU_VNNI512;
        if (__builtin_cpu_supports("avx512vl"))
            f |= QCPU_VNNI_EVEX256;
#ifdef KQ_AMX
        if ((f & QCPU_VNNI_EVEX256) && __builtin_cpu_supports("avx512bw") &&
            (kime_amx_features() & KIME_AMX_INT8))
            f |= QCPU_AMX;
#endif
    }
#ifdef KQ_AVXVNNI
    /* cpuid leaf 7 subleaf 1, EAX bit 4; asked directly, as older libgccs don't know the name.
     * The avx2 check already covers the OS saving ymm state. */
    unsigned eax, ebx, ecx, edx;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
        __get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx) && (eax >> 4 & 1))
        f |= QCPU_AVXVNNI;
#endif
#endif
    cached = f;
    return f;
}
#endif /* KQ_X86: the only caller */

int kime_qgemm_impl(int isa)
{
    if (isa & KIME_QGEMM_PINNED) { /* only kime_qgemm_pin makes these; still, stay in range */
        const int impl = isa & 0xff;
        const int n = (int)(sizeof QIMPLS / sizeof QIMPLS[0]);
        return impl < n && QIMPLS[impl].kernel ? impl : KIME_QGEMM_PORTABLE;
    }
#ifdef KQ_X86
    /* KIME_QGEMM caps the pick in this order; unset or unknown caps nothing. */
    enum { UPTO_PORTABLE, UPTO_AVX2, UPTO_AVXVNNI, UPTO_VNNI512, UPTO_AMX };
    static const int cap_of[] = {UPTO_PORTABLE, UPTO_AVX2, UPTO_VNNI512, UPTO_AVXVNNI};
    const char *want = getenv("KIME_QGEMM");
    int cap = UPTO_AMX;
    for (int k = 0; want && k <= KIME_QGEMM_AVXVNNI; k++)
        if (strcmp(want, QIMPL_NAMES[k]) == 0)
            cap = cap_of[k];
    const int cpu = qcpu_features();
    /* AMX is above the avx512 level's own set, as AVX-VNNI is above avx2's: it runs at the
     * CPU's own level, or where KIME_QGEMM names it. */
    if (cap >= UPTO_AMX && isa == KIME_ISA_AVX512 && (cpu & QCPU_AMX) &&
        (kime_isa_uncapped(isa) || (want && strcmp(want, "amx") == 0)))
        return KIME_QGEMM_AMX;
    if (cap >= UPTO_VNNI512 && isa == KIME_ISA_AVX512 && (cpu & QCPU_VNNI512))
        return KIME_QGEMM_VNNI512;
    /* AVX-VNNI is above the avx2 level, not in it: KIME_ISA=avx2 (or a level passed below the
     * CPU's) runs the AVX2 kernels on Zen 3, Zen 5 and Alder Lake alike, unless KIME_QGEMM
     * names avxvnni. An avx512 level keeps vnni512 where the CPU has it: there is no AVX-512
     * INT8 kernel without VNNI (Skylake-X runs the AVX2 one). */
    const int vex_ok = kime_isa_uncapped(isa) || cap == UPTO_AVXVNNI;
    if (cap >= UPTO_AVXVNNI && isa >= KIME_ISA_AVX2 && (cpu & QCPU_AVXVNNI) && vex_ok)
        return KIME_QGEMM_AVXVNNI;
    /* Only asking for avxvnni by name runs the twin: by default its EVEX instructions would slip
     * past a KIME_ISA=avx2 cap, and where it runs, vnni512 is the faster choice anyway. */
    if (cap == UPTO_AVXVNNI && isa >= KIME_ISA_AVX2 && (cpu & QCPU_VNNI_EVEX256))
        return KIME_QGEMM_AVXVNNI_EVEX;
    if (cap >= UPTO_AVX2 && isa >= KIME_ISA_AVX2)
        return KIME_QGEMM_AVX2;
#elif defined(KQ_ARM)
    /* KIME_QGEMM caps the pick in this order; unset or unknown caps nothing. The ISA levels
     * imply the features (kernels.h); the HWCAP bits are checked again for an isa passed in. */
    static const char *const arm_names[] = {"portable", "neon", "sdot", "smmla"};
    const char *want = getenv("KIME_QGEMM");
    int cap = 3;
    for (int k = 0; want && k < 4; k++)
        if (strcmp(want, arm_names[k]) == 0)
            cap = k;
    const unsigned cpu = kime_isa_arm_features();
    if (cap >= 3 && isa >= KIME_ISA_I8MM && (cpu & KIME_ARM_I8MM))
        return KIME_QGEMM_SMMLA;
    if (cap >= 2 && isa >= KIME_ISA_DOTPROD && (cpu & KIME_ARM_DOTPROD))
        return KIME_QGEMM_SDOT;
    if (cap >= 1 && isa >= KIME_ISA_NEON)
        return KIME_QGEMM_NEON;
#endif
    (void)isa;
    return KIME_QGEMM_PORTABLE;
}

int kime_qgemm_pin(int isa) { return KIME_QGEMM_PINNED | kime_qgemm_impl(isa); }

const char *kime_qgemm_impl_name(int impl)
{
    return impl >= 0 && impl <= KIME_QGEMM_AMX ? QIMPL_NAMES[impl] : "unknown";
}

static const qimpl *qimpl_of(int isa) { return &QIMPLS[kime_qgemm_impl(isa)]; }

/* ---- packing -------------------------------------------------------------------------------- */

static size_t qpanels(const qimpl *im, int N, int geglu)
{
    int width = geglu ? im->nr / 2 : im->nr, outputs = geglu ? N / 2 : N;
    return (size_t)((outputs + width - 1) / width);
}

static size_t k4_of(int K) { return (size_t)((K > 0 ? K : 0) + 3) / 4; }

/* 4-k groups of the packed rows, padding included (QL_MMLA pads K to a multiple of 8) */
static size_t kq_of(const qimpl *im, int K)
{
    if (im->layout == QL_K64)
        return (k4_of(K) + 15) & ~(size_t)15;
    return im->layout == QL_MMLA ? (k4_of(K) + 1) & ~(size_t)1 : k4_of(K);
}

/* byte offset of (lane j, k) in a panel of nr lanes, or in an A sliver of nr rows */
static size_t qoffset(const qimpl *im, int nr, int j, size_t k)
{
    if (im->layout == QL_MMLA)
        return k / 8 * 8 * (size_t)nr + (size_t)(j / 2) * 16 + (size_t)(j % 2) * 8 + k % 8;
    return k / 4 * 4 * (size_t)nr + 4 * (size_t)j + k % 4;
}

static size_t panel_bytes(const qimpl *im, int K) { return kq_of(im, K) * 4 * (size_t)im->nr; }

static size_t weights_bytes(const qimpl *im, int N, int K, int geglu)
{
    return (qpanels(im, N, geglu) * panel_bytes(im, K) + 63) & ~(size_t)63;
}

size_t kime_qgemm_packed_bytes(int isa, int N, int K, int geglu)
{
    const qimpl *im = qimpl_of(isa);
    size_t lanes = qpanels(im, N, geglu) * (size_t)im->nr;
    return weights_bytes(im, N, K, geglu) + lanes * (sizeof(float) + sizeof(int32_t));
}

void kime_qgemm_pack(int isa, const float *W, int N, int K, int geglu, void *packed)
{
    const qimpl *im = qimpl_of(isa);
    const int nr = im->nr, half = nr / 2, I = N / 2;
    const size_t P = qpanels(im, N, geglu), pb = panel_bytes(im, K);
    int8_t *panels_q = (int8_t *)packed;
    float *sw = (float *)((char *)packed + weights_bytes(im, N, K, geglu));
    int32_t *comp = (int32_t *)(sw + P * nr);
    for (size_t p = 0; p < P; p++)
        for (int j = 0; j < nr; j++) {
            long row = geglu ? (long)p * half + (j % half) : (long)p * nr + j;
            if (geglu)
                row = row < I ? row + (j < half ? 0 : I) : -1;
            else if (row >= N)
                row = -1;
            int8_t *dst = panels_q + p * pb;
            float scale = 0.0f;
            int32_t sum = 0;
            for (size_t k = 0; k < kq_of(im, K) * 4; k++)
                dst[qoffset(im, nr, j, k)] = 0;
            if (row >= 0 && K > 0) { /* quant_portable's arithmetic, straight into the panel */
                const float *x = W + (size_t)row * K;
                float amax = 0.0f;
                for (int k = 0; k < K; k++)
                    amax = fabsf(x[k]) > amax ? fabsf(x[k]) : amax;
                const float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
                for (int k = 0; k < K; k++) {
                    float r = rintf(x[k] * inv);
                    r = r > 127.0f ? 127.0f : r < -127.0f ? -127.0f : r;
                    dst[qoffset(im, nr, j, (size_t)k)] = (int8_t)(int)r;
                    sum += (int)r;
                }
                scale = amax / 127.0f;
            }
            sw[p * nr + j] = scale;
            /* 128 * colsum passes INT32_MAX near the K limit: wrap, as the SIMD sums do */
            comp[p * nr + j] = (int32_t)((uint32_t)im->offset * (uint32_t)sum);
        }
}

/* ---- A packing and scratch ------------------------------------------------------------------ */

static int qblock_rows(const qimpl *im, int K)
{
    size_t tiles = im->a_bytes / ((size_t)im->mr * 4 * (kq_of(im, K) > 0 ? kq_of(im, K) : 1));
    int mc = im->mr * (int)(tiles < 1 ? 1 : tiles > 64 ? 64 : tiles);
    return mc;
}

/* A thread's share: acc tile, row scales, one row's quantized bytes, then its A block. */
static size_t qthread_bytes(const qimpl *im, int K)
{
    size_t row = (kq_of(im, K) * 4 + 63) & ~(size_t)63;
    size_t block = (size_t)qblock_rows(im, K) * kq_of(im, K) * 4;
    return QMAX_TILE * 4 + QMAX_MC * 4 + row + ((block + 63) & ~(size_t)63);
}

size_t kime_qgemm_scratch_bytes(int isa, int K, int nthreads)
{
    return qthread_bytes(qimpl_of(isa), K) * (size_t)(nthreads > 1 ? nthreads : 1) + 64;
}

/* Quantize rows [0, m) of A into a tile sliver (K4 groups of mr x 4 bytes), padded rows zero. */
static void qpack_a(const qimpl *im, const float *A, int lda, int m, int K, int8_t *rowq,
                    uint8_t *dst, float *sa)
{
    const int mr = im->mr;
    const size_t K4 = kq_of(im, K);
    const uint8_t flip = im->offset ? 0x80 : 0; /* q + 128 as u8 is q ^ 0x80 */
    if (im->pack) {
        im->pack(A, lda, m, K, (int)K4, mr, dst, sa);
        return;
    }
    for (int i = 0; i < mr; i++) {
        if (i < m && K > 0) {
            sa[i] = im->quant(A + (size_t)i * lda, K, rowq);
        } else {
            if (i < m)
                sa[i] = 0.0f;
            memset(rowq, 0, K4 * 4);
        }
        if (flip)
            for (size_t k = 0; k < K4 * 4; k++)
                rowq[k] = (int8_t)((uint8_t)rowq[k] ^ flip);
        if (im->layout == QL_MMLA) /* quant_neon zero-pads rowq to the 8-k groups */
            for (size_t g = 0; g < K4 / 2; g++)
                memcpy(dst + qoffset(im, mr, i, 8 * g), rowq + 8 * g, 8);
        else
            for (size_t g = 0; g < K4; g++)
                put32(dst + (g * mr + i) * 4, rowq + 4 * g);
    }
}

/* ---- driver --------------------------------------------------------------------------------- */

typedef struct {
    const qimpl *im;
    const float *A;
    const int8_t *panels;
    const float *sw;
    const int32_t *comp;
    int lda, M, K, outputs, width, npanels, geglu, I;
    qepi e;
    float *C;
    int32_t *C32; /* test hook: raw sums instead */
    char *scratch;
} qjob;

static void store_int32(const qjob *j, const int32_t *acc, int m, int n0, int nv,
                        const int32_t *comp, int32_t *C)
{
    const int nr = j->im->nr, half = nr / 2;
    for (int i = 0; i < m; i++, acc += nr, C += j->e.ldc)
        for (int l = 0; l < nr; l++) {
            int col;
            if (j->geglu) {
                if (l % half >= nv)
                    continue;
                col = n0 + l % half + (l < half ? 0 : j->I);
            } else {
                if (l >= nv)
                    continue;
                col = n0 + l;
            }
            C[col] = (int32_t)((uint32_t)acc[l] - (uint32_t)comp[l]); /* see kime_qgemm_pack */
        }
}

/* Thread t's region of the scratch: its acc tile, row scales, one row's bytes and A block. */
static char *qthread_base(const qjob *j, int t, char **rowq, uint8_t **ap, float **sa)
{
    char *base = j->scratch + (size_t)t * qthread_bytes(j->im, j->K);
    *sa = (float *)(base + QMAX_TILE * 4);
    *rowq = base + QMAX_TILE * 4 + QMAX_MC * 4;
    *ap = (uint8_t *)*rowq + ((kq_of(j->im, j->K) * 4 + 63) & ~(size_t)63);
    return base;
}

static void qpack_tile(const void *p, int tid, int owner, int m0, int i, int m)
{
    const qjob *j = (const qjob *)p;
    char *rowq, *unused;
    uint8_t *ap;
    float *sa;
    qthread_base(j, tid, &rowq, &ap, &sa); /* the row scratch is ours; the block the owner's */
    qthread_base(j, owner, &unused, &ap, &sa);
    qpack_a(j->im, j->A + (size_t)(m0 + i) * j->lda, j->lda, m, j->K, (int8_t *)rowq,
            ap + (size_t)i * kq_of(j->im, j->K) * 4, sa + i);
}

static void qrun_panels(const void *p, int tid, int owner, int m0, int mb, int p0, int p1)
{
    const qjob *j = (const qjob *)p;
    const qimpl *im = j->im;
    const int mr = im->mr, K4 = (int)kq_of(im, j->K);
    const size_t pb = panel_bytes(im, j->K);
    char *rowq;
    uint8_t *ap;
    float *sa;
    int32_t *acc = (int32_t *)qthread_base(j, tid, &rowq, &ap, &sa);
    qthread_base(j, owner, &rowq, &ap, &sa);
    if (im->enter)
        im->enter();
    for (int q = p0; q < p1; q++) {
        const int8_t *b = j->panels + (size_t)q * pb;
        const float *sw = j->sw + (size_t)q * im->nr;
        const int32_t *comp = j->comp + (size_t)q * im->nr;
        const int n0 = q * j->width;
        const int nv = j->outputs - n0 < j->width ? j->outputs - n0 : j->width;
        for (int i = 0; i < mb; i += mr) {
            const int m = mb - i < mr ? mb - i : mr;
            if (j->C)
                kime_prefetch_tile(j->C + (size_t)(m0 + i) * j->e.ldc, j->e.ldc, m, n0, nv);
            (i == 0 && im->first ? im->first : im->kernel)(m, K4, ap + (size_t)i * K4 * 4, b, acc);
            if (j->C32)
                store_int32(j, acc, m, n0, nv, comp, j->C32 + (size_t)(m0 + i) * j->e.ldc);
            else
                im->store(acc, m, n0, nv, &j->e, sa + i, sw, comp,
                          j->C + (size_t)(m0 + i) * j->e.ldc);
        }
    }
    if (im->leave)
        im->leave();
}

static void qlaunch(qjob *j, int nthreads)
{
    const kime_gemm_plan plan = {j, j->M, j->im->mr, qblock_rows(j->im, j->K), j->npanels,
                                 qpack_tile, qrun_panels};
    kime_gemm_drive(&plan, nthreads);
}

static void qjob_init(qjob *j, int isa, const float *A, int lda, int M, int K, int N,
                      const void *packed, int geglu, void *scratch)
{
    const qimpl *im = qimpl_of(isa);
    const size_t P = qpanels(im, N, geglu);
    memset(j, 0, sizeof *j);
    j->im = im;
    j->A = A;
    j->panels = (const int8_t *)packed;
    j->sw = (const float *)((const char *)packed + weights_bytes(im, N, K, geglu));
    j->comp = (const int32_t *)(j->sw + P * im->nr);
    j->lda = lda;
    j->M = M;
    j->K = K;
    j->outputs = geglu ? N / 2 : N;
    j->width = geglu ? im->nr / 2 : im->nr;
    j->npanels = (int)P;
    j->geglu = geglu;
    j->I = N / 2;
    j->scratch = (char *)(((uintptr_t)scratch + 63) & ~(uintptr_t)63);
}

void kime_qgemm(int isa, const float *A, int lda, int M, int K, int N, const void *packed,
                const float *bias, int epilogue_kind, float *C, int ldc, void *scratch,
                int nthreads)
{
    if (M <= 0 || N <= 0 || K < 0)
        return;
    const int geglu = epilogue_kind == KIME_EPI_GEGLU;
    qjob j;
    qjob_init(&j, isa, A, lda, M, K, N, packed, geglu, scratch);
    j.e.bias = bias;
    j.e.gbias = geglu && bias ? bias + N / 2 : NULL;
    j.e.ldc = ldc;
    j.e.epi = epilogue_kind;
    j.C = C;
    qlaunch(&j, nthreads);
}

void kime_qgemm_int32(int isa, const float *A, int lda, int M, int K, int N, const void *packed,
                      int geglu, int32_t *C, int ldc, void *scratch, int nthreads)
{
    if (M <= 0 || N <= 0 || K < 0)
        return;
    qjob j;
    qjob_init(&j, isa, A, lda, M, K, N, packed, geglu, scratch);
    j.e.ldc = ldc;
    j.C32 = C;
    qlaunch(&j, nthreads);
}
