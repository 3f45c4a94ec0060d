/* RoPE and blocked online-softmax attention over unpadded rows (interface in kernels.h).
 *
 * One work item is a row, a head and a block of QB queries; the queries are the vector lanes
 * throughout. Per item the scratch holds
 *   QT [hd][QB]  the block's queries transposed, pre-scaled by hd^-0.5 * log2(e) so the softmax
 *                can use exp2,
 *   S  [KB][QB]  one key block's scores, then their probabilities,
 *   OT [hd][QB]  the output accumulator, transposed,
 *   m, l, alpha  the running max and sum per query, and the last block's rescale factor.
 * With queries in the lanes the softmax is all vertical vector ops (no horizontal reductions),
 * and both products are rank-1 updates broadcasting one K or V element against a row of QT or S,
 * so hd is the broadcast dimension and any head dim runs without vector tails.
 *
 * The parallel option layout (position ids and option ids per token) takes attend_block_masked,
 * chosen per item: it visits the row's key blocks in the same order, skips a block whose keys no
 * query of the item may see (the running max and sum would not change), and sets the scores of
 * the pairs it may not see to -inf before the same softmax (exact zero weights). The mask is
 * plain C, shared by every ISA path. A sequential row never reaches it.
 *
 * BF16 products (KIME_ATTN_BF16, attention_bf16.h) keep this structure: the call first rounds
 * every key and value into bfloat16 pairs (a step of its own), then each item rounds its queries
 * and each block's probabilities and runs the same tiles over pairs; the softmax and the output
 * are this file's, and one arithmetic (vdpbf16ps's) gives the same bits at every SIMD level.
 * On AMX-BF16 (where the BF16 GEMM runs on tiles: kime_bgemm_amx) and head dims of a multiple of
 * 32 the products run on AMX tiles instead, with their own bits, the values laid out per row
 * with the dim as the tile row (vt) and the queries and probabilities in two terms.
 *
 * Determinism: an item reads only its own row's tokens, key blocks start at multiples of KB in
 * the row and are visited in ascending order, and every sum runs in one fixed order, so a query's
 * result does not depend on the thread count or on the other rows of the batch. Different ISA
 * paths give (slightly) different FP32 bits; the path is fixed per call.
 */
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define KIME_X86 1
#elif defined(__aarch64__)
#include <arm_neon.h>
#define KIME_NEON 1
#endif
#include "amx.h"
#include "bgemm.h"
#include "kernels.h"
#include "pool.h"
#ifdef KIME_X86
#include "sliver512.h" /* put16_strided: the AMX path's value lines */
#endif

/* Built with -ffp-contract=off (setup.py's CSRC_FLAGS): the plain C and NEON code rounds every
 * product as the x86-64 baseline does; and on aarch64 with -fno-schedule-insns, since GCC's
 * pre-allocation scheduling hoists all six A loads of a k-step of tile_rows_neon ahead of their
 * FMAs and spills three of its 24 accumulators (as in qgemm_neon.c). */

#define QB 32 /* queries per work item: the lanes (2 zmm, 4 ymm)                        */
#define KB 32 /* keys per softmax block; small so local windows skip most of the row     */
#define LOG2E 1.4426950408889634f

#include "attention_bf16.h"

/* c[r][0:QB] = (alpha ? c[r] * alpha : 0) + sum_x a[r*ra + x*xa] * b[x][0:QB] for r < R, with x
 * ascending. Scores: a = K (r = key, x = dim), b = QT. Output: a = V (r = dim, x = key), b = S. */
typedef void (*tile_fn)(const float *a, ptrdiff_t ra, ptrdiff_t xa, int R, const float *b, int X,
                        float *c, const float *alpha);
/* Masks key block s [kn][QB] to the window (w >= 0; key j is delta + j positions after query 0),
 * turns it into exp2(s - running max), and updates m, l and alpha. */
typedef void (*softmax_fn)(float *s, int kn, int delta, int w, float *m, float *l, float *alpha);

/* exp2(x) for x <= 0 (all the softmax needs): Taylor degree 7 on the remainder f = x - round(x),
 * |f| <= 1/2, times 2^round(x). x < -125 gives 0, which keeps 2^n normal and maps the window's
 * -inf to an exact 0. */
#define EXP2_POLY(F, FMA, SET)                                                                    \
    FMA(FMA(FMA(FMA(FMA(FMA(FMA(SET(1.5252733804059838e-05f), F, SET(1.5403530393381606e-04f)), \
                            F, SET(1.3333558146428441e-03f)),                                     \
                        F, SET(9.618129107628477e-03f)),                                          \
                    F, SET(5.5504108664821576e-02f)),                                             \
                F, SET(2.402265069591007e-01f)),                                                  \
            F, SET(6.931471805599453e-01f)),                                                      \
        F, SET(1.0f))

#define MADD(a, b, c) ((a) * (b) + (c))
#define SAME(x) (x)

static inline float exp2_c(float x)
{
    const float y = x > -125.0f ? x : -125.0f;
    const float n = (y + 12582912.0f) - 12582912.0f; /* round to nearest: 1.5 * 2^23 */
    const union { uint32_t i; float f; } e = {(uint32_t)((int32_t)n + 127) << 23};
    return x >= -125.0f ? EXP2_POLY(y - n, MADD, SAME) * e.f : 0.0f;
}

/* ---- RoPE ----------------------------------------------------------------------------------- */

/* One rotate-half pair: a = x[i], b = x[i + hd/2] by the table entries c, s. Plain C: without FMA
 * contraction (the x86-64 baseline; this file's -ffp-contract=off elsewhere) it gives the same
 * bits as the reference's x * cos + rotate_half(x) * sin, wherever it is inlined. */
static inline void rope_pair(float a, float b, float c, float s, float *lo, float *hi)
{
    const float ac = a * c, bs = b * s, bc = b * c, as = a * s;
    *lo = ac - bs;
    *hi = bc + as;
}

/* One head's hd values x rotated into y (not x). c, s: hd/2 entries. */
typedef void (*rope_head_fn)(const float *x, float *y, int hd, const float *c, const float *s);
static void rope_head(const float *x, float *y, int hd, const float *c, const float *s)
{
    const int half = hd / 2;
    const float *restrict xa = x, *restrict xb = x + half;
    float *restrict ya = y, *restrict yb = y + half;
    for (int i = 0; i < half; i++)
        rope_pair(xa[i], xb[i], c[i], s[i], ya + i, yb + i);
}
#ifdef KIME_X86
/* rope_pair's arithmetic on 8 lanes, the rest one at a time. The BF16 path rotates every key
 * and query here: the portable loop took 1.6% of W3 INT8's samples on Zen 3. */
__attribute__((target("avx2"))) static void rope_head_256(const float *x, float *y, int hd,
                                                          const float *c, const float *s)
{
    const int half = hd / 2;
    int i = 0;
    for (; i + 8 <= half; i += 8) {
        const __m256 a = _mm256_loadu_ps(x + i), b = _mm256_loadu_ps(x + half + i);
        const __m256 vc = _mm256_loadu_ps(c + i), vs = _mm256_loadu_ps(s + i);
        _mm256_storeu_ps(y + i, _mm256_sub_ps(_mm256_mul_ps(a, vc), _mm256_mul_ps(b, vs)));
        _mm256_storeu_ps(y + half + i, _mm256_add_ps(_mm256_mul_ps(b, vc), _mm256_mul_ps(a, vs)));
    }
    for (; i < half; i++)
        rope_pair(x[i], x[half + i], c[i], s[i], y + i, y + half + i);
}

/* rope_pair's arithmetic on 16 lanes (a product and a difference or sum, each rounded once) */
__attribute__((target("avx512f"))) static void rope_head_512(const float *x, float *y, int hd,
                                                             const float *c, const float *s)
{
    const int half = hd / 2;
    for (int i = 0; i < half; i += 16) {
        const __mmask16 m = half - i >= 16 ? 0xffff : (__mmask16)((1u << (half - i)) - 1);
        const __m512 a = _mm512_maskz_loadu_ps(m, x + i), b = _mm512_maskz_loadu_ps(m, x + half + i);
        const __m512 vc = _mm512_maskz_loadu_ps(m, c + i), vs = _mm512_maskz_loadu_ps(m, s + i);
        _mm512_mask_storeu_ps(y + i, m, _mm512_sub_ps(_mm512_mul_ps(a, vc), _mm512_mul_ps(b, vs)));
        _mm512_mask_storeu_ps(y + half + i, m,
                              _mm512_add_ps(_mm512_mul_ps(b, vc), _mm512_mul_ps(a, vs)));
    }
}
#endif

/* ---- portable C -------------------------------------------------------------------------- */

static void tile_c(const float *a, ptrdiff_t ra, ptrdiff_t xa, int R,
                   const float *b, int X, float *c, const float *alpha)
{
    for (int r = 0; r < R; r++, c += QB) {
        float acc[QB];
        for (int i = 0; i < QB; i++)
            acc[i] = alpha ? c[i] * alpha[i] : 0.0f;
        for (int x = 0; x < X; x++) {
            const float s = a[r * ra + x * xa], *bx = b + x * QB;
            for (int i = 0; i < QB; i++)
                acc[i] += s * bx[i];
        }
        memcpy(c, acc, sizeof acc);
    }
}

/* Lanes innermost: unit-stride loops the compiler can vectorise where its FP rules allow. */
static void softmax_c(float *s, int kn, int delta, int w, float *m, float *l,
                      float *alpha)
{
    float mx[QB], use[QB], sum[QB] = {0};
    memcpy(mx, m, sizeof mx);
    for (int j = 0; j < kn; j++)
        for (int i = 0; i < QB; i++) {
            float *x = s + j * QB + i;
            *x = w >= 0 && abs(i - j - delta) > w ? -INFINITY : *x;
            mx[i] = *x > mx[i] ? *x : mx[i];
        }
    /* A query whose keys so far are all masked keeps 0 weight instead of exp2(-inf + inf). */
    for (int i = 0; i < QB; i++)
        use[i] = mx[i] == -INFINITY ? 0.0f : mx[i];
    for (int j = 0; j < kn; j++)
        for (int i = 0; i < QB; i++) {
            float *x = s + j * QB + i;
            *x = exp2_c(*x - use[i]);
            sum[i] += *x;
        }
    for (int i = 0; i < QB; i++) {
        alpha[i] = exp2_c(m[i] - use[i]);
        l[i] = l[i] * alpha[i] + sum[i];
        m[i] = mx[i];
    }
}

#ifdef KIME_X86
/* ---- AVX-512: rows of 8 x 2 zmm accumulators ----------------------------------------------- */

__attribute__((target("avx512f"))) static inline __m512 exp2_512(__m512 x)
{
    const __mmask16 ok = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-125.0f), _CMP_GE_OQ);
    x = _mm512_max_ps(x, _mm512_set1_ps(-125.0f));
    const __m512 n = _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m512 f = _mm512_sub_ps(x, n);
    return _mm512_maskz_scalef_ps(ok, EXP2_POLY(f, _mm512_fmadd_ps, _mm512_set1_ps), n);
}

__attribute__((target("avx512f"), always_inline)) static inline void
tile_rows_512(const float *a, ptrdiff_t ra, ptrdiff_t xa, const int R, const float *b, int X,
              float *c, const float *alpha)
{
    __m512 acc[8][2];
#pragma GCC unroll 8
    for (int r = 0; r < R; r++)
        for (int v = 0; v < 2; v++)
            acc[r][v] = alpha ? _mm512_mul_ps(_mm512_loadu_ps(c + r * QB + 16 * v),
                                              _mm512_loadu_ps(alpha + 16 * v))
                              : _mm512_setzero_ps();
    for (int x = 0; x < X; x++, a += xa, b += QB) {
        const __m512 b0 = _mm512_loadu_ps(b), b1 = _mm512_loadu_ps(b + 16);
#pragma GCC unroll 8
        for (int r = 0; r < R; r++) {
            const __m512 s = _mm512_set1_ps(a[r * ra]);
            acc[r][0] = _mm512_fmadd_ps(s, b0, acc[r][0]);
            acc[r][1] = _mm512_fmadd_ps(s, b1, acc[r][1]);
        }
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; r++)
        for (int v = 0; v < 2; v++)
            _mm512_storeu_ps(c + r * QB + 16 * v, acc[r][v]);
}

__attribute__((target("avx512f"))) static void
tile_512(const float *a, ptrdiff_t ra, ptrdiff_t xa, int R, const float *b, int X, float *c,
         const float *alpha)
{
    int r = 0;
    for (; r + 8 <= R; r += 8)
        tile_rows_512(a + r * ra, ra, xa, 8, b, X, c + r * QB, alpha);
    for (; r < R; r++)
        tile_rows_512(a + r * ra, ra, xa, 1, b, X, c + r * QB, alpha);
}

__attribute__((target("avx512f"))) static void
softmax_512(float *s, int kn, int delta, int w, float *m, float *l, float *alpha)
{
    const __m512 ninf = _mm512_set1_ps(-INFINITY);
    for (int v = 0; v < 2; v++) {
        float *sv = s + 16 * v;
        const __m512 m0 = _mm512_loadu_ps(m + 16 * v);
        __m512 mx = m0, sum = _mm512_setzero_ps();
        /* lane i minus key j's offset, counted down as j advances */
        __m512i diff = _mm512_sub_epi32(
            _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
            _mm512_set1_epi32(delta - 16 * v));
        for (int j = 0; j < kn; j++, diff = _mm512_sub_epi32(diff, _mm512_set1_epi32(1))) {
            __m512 x = _mm512_loadu_ps(sv + j * QB);
            if (w >= 0) {
                const __mmask16 out =
                    _mm512_cmpgt_epi32_mask(_mm512_abs_epi32(diff), _mm512_set1_epi32(w));
                x = _mm512_mask_mov_ps(x, out, ninf);
                _mm512_storeu_ps(sv + j * QB, x);
            }
            mx = _mm512_max_ps(mx, x);
        }
        const __m512 use = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(mx, ninf, _CMP_NEQ_OQ), mx);
        for (int j = 0; j < kn; j++) {
            const __m512 p = exp2_512(_mm512_sub_ps(_mm512_loadu_ps(sv + j * QB), use));
            _mm512_storeu_ps(sv + j * QB, p);
            sum = _mm512_add_ps(sum, p);
        }
        const __m512 al = exp2_512(_mm512_sub_ps(m0, use));
        _mm512_storeu_ps(alpha + 16 * v, al);
        /* l * al + sum in one rounding: what GCC made of the mul and add written here before */
        _mm512_storeu_ps(l + 16 * v, _mm512_fmadd_ps(_mm512_loadu_ps(l + 16 * v), al, sum));
        _mm512_storeu_ps(m + 16 * v, mx);
    }
}

/* ---- AVX2: half the lanes at a time, rows of 6 x 2 ymm accumulators (16 registers) ------- */

__attribute__((target("avx2,fma"))) static inline __m256 exp2_256(__m256 x)
{
    const __m256 ok = _mm256_cmp_ps(x, _mm256_set1_ps(-125.0f), _CMP_GE_OQ);
    x = _mm256_max_ps(x, _mm256_set1_ps(-125.0f));
    const __m256 n = _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m256 f = _mm256_sub_ps(x, n);
    const __m256i e = _mm256_slli_epi32(
        _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_and_ps(ok, _mm256_mul_ps(EXP2_POLY(f, _mm256_fmadd_ps, _mm256_set1_ps),
                                           _mm256_castsi256_ps(e)));
}

__attribute__((target("avx2,fma"), always_inline)) static inline void
tile_rows_256(const float *a, ptrdiff_t ra, ptrdiff_t xa, const int R, const float *b, int X,
              float *c, const float *alpha)
{
    __m256 acc[6][2];
#pragma GCC unroll 6
    for (int r = 0; r < R; r++)
        for (int v = 0; v < 2; v++)
            acc[r][v] = alpha ? _mm256_mul_ps(_mm256_loadu_ps(c + r * QB + 8 * v),
                                              _mm256_loadu_ps(alpha + 8 * v))
                              : _mm256_setzero_ps();
    for (int x = 0; x < X; x++, a += xa, b += QB) {
        const __m256 b0 = _mm256_loadu_ps(b), b1 = _mm256_loadu_ps(b + 8);
#pragma GCC unroll 6
        for (int r = 0; r < R; r++) {
            const __m256 s = _mm256_broadcast_ss(a + r * ra);
            acc[r][0] = _mm256_fmadd_ps(s, b0, acc[r][0]);
            acc[r][1] = _mm256_fmadd_ps(s, b1, acc[r][1]);
        }
    }
#pragma GCC unroll 6
    for (int r = 0; r < R; r++)
        for (int v = 0; v < 2; v++)
            _mm256_storeu_ps(c + r * QB + 8 * v, acc[r][v]);
}

__attribute__((target("avx2,fma"))) static void
tile_256(const float *a, ptrdiff_t ra, ptrdiff_t xa, int R, const float *b, int X, float *c,
         const float *alpha)
{
    for (int h = 0; h < QB; h += 16) {
        int r = 0;
        for (; r + 6 <= R; r += 6)
            tile_rows_256(a + r * ra, ra, xa, 6, b + h, X, c + r * QB + h, alpha ? alpha + h : 0);
        for (; r < R; r++)
            tile_rows_256(a + r * ra, ra, xa, 1, b + h, X, c + r * QB + h, alpha ? alpha + h : 0);
    }
}

__attribute__((target("avx2,fma"))) static void
softmax_256(float *s, int kn, int delta, int w, float *m, float *l, float *alpha)
{
    const __m256 ninf = _mm256_set1_ps(-INFINITY);
    for (int v = 0; v < QB / 8; v++) {
        float *sv = s + 8 * v;
        const __m256 m0 = _mm256_loadu_ps(m + 8 * v);
        __m256 mx = m0, sum = _mm256_setzero_ps();
        __m256i diff = _mm256_sub_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7),
                                        _mm256_set1_epi32(delta - 8 * v));
        for (int j = 0; j < kn; j++, diff = _mm256_sub_epi32(diff, _mm256_set1_epi32(1))) {
            __m256 x = _mm256_loadu_ps(sv + j * QB);
            if (w >= 0) {
                const __m256i out =
                    _mm256_cmpgt_epi32(_mm256_abs_epi32(diff), _mm256_set1_epi32(w));
                x = _mm256_blendv_ps(x, ninf, _mm256_castsi256_ps(out));
                _mm256_storeu_ps(sv + j * QB, x);
            }
            mx = _mm256_max_ps(mx, x);
        }
        const __m256 use = _mm256_andnot_ps(_mm256_cmp_ps(mx, ninf, _CMP_EQ_OQ), mx);
        for (int j = 0; j < kn; j++) {
            const __m256 p = exp2_256(_mm256_sub_ps(_mm256_loadu_ps(sv + j * QB), use));
            _mm256_storeu_ps(sv + j * QB, p);
            sum = _mm256_add_ps(sum, p);
        }
        const __m256 al = exp2_256(_mm256_sub_ps(m0, use));
        _mm256_storeu_ps(alpha + 8 * v, al);
        /* l * al + sum in one rounding: what GCC made of the mul and add written here before */
        _mm256_storeu_ps(l + 8 * v, _mm256_fmadd_ps(_mm256_loadu_ps(l + 8 * v), al, sum));
        _mm256_storeu_ps(m + 8 * v, mx);
    }
}
#endif /* KIME_X86 */

#ifdef KIME_NEON
/* ---- NEON: AVX2's bits. Half the lanes at a time, rows of 6 x 4 q-register accumulators ---- */
/* Every lane does what its AVX2 lane does, operation for operation: one FMA per x in ascending
 * x from alpha * c or +0, the same polynomial with fused steps, nearest-even rounding, the same
 * masks; so the blocking (6 rows x 16 lanes: 24 accumulators and 4 B vectors of 32 registers) is
 * free to suit NEON. vfmaq_f32(a, b, c) is a + b * c where _mm256_fmadd_ps(a, b, c) is a * b + c. */

#define FMA_NEON(a, b, c) vfmaq_f32((c), (a), (b))

static inline float32x4_t exp2_neon(float32x4_t x)
{
    const uint32x4_t ok = vcgeq_f32(x, vdupq_n_f32(-125.0f));
    x = vmaxq_f32(x, vdupq_n_f32(-125.0f)); /* a NaN lane differs from x86's max, but ok drops it */
    const float32x4_t n = vrndnq_f32(x);
    const float32x4_t f = vsubq_f32(x, n);
    const int32x4_t e = vshlq_n_s32(vaddq_s32(vcvtq_s32_f32(n), vdupq_n_s32(127)), 23);
    const float32x4_t p = vmulq_f32(EXP2_POLY(f, FMA_NEON, vdupq_n_f32), vreinterpretq_f32_s32(e));
    return vreinterpretq_f32_u32(vandq_u32(ok, vreinterpretq_u32_f32(p)));
}

__attribute__((always_inline)) static inline void
tile_rows_neon(const float *a, ptrdiff_t ra, ptrdiff_t xa, const int R, const float *b, int X,
               float *c, const float *alpha)
{
    float32x4_t acc[6][4];
#pragma GCC unroll 6
    for (int r = 0; r < R; r++)
        for (int v = 0; v < 4; v++)
            acc[r][v] = alpha ? vmulq_f32(vld1q_f32(c + r * QB + 4 * v), vld1q_f32(alpha + 4 * v))
                              : vdupq_n_f32(0.0f);
    for (int x = 0; x < X; x++, a += xa, b += QB) {
        const float32x4_t b0 = vld1q_f32(b), b1 = vld1q_f32(b + 4), b2 = vld1q_f32(b + 8),
                          b3 = vld1q_f32(b + 12);
#pragma GCC unroll 6
        for (int r = 0; r < R; r++) {
            const float s = a[r * ra];
            acc[r][0] = vfmaq_n_f32(acc[r][0], b0, s);
            acc[r][1] = vfmaq_n_f32(acc[r][1], b1, s);
            acc[r][2] = vfmaq_n_f32(acc[r][2], b2, s);
            acc[r][3] = vfmaq_n_f32(acc[r][3], b3, s);
        }
    }
#pragma GCC unroll 6
    for (int r = 0; r < R; r++)
        for (int v = 0; v < 4; v++)
            vst1q_f32(c + r * QB + 4 * v, acc[r][v]);
}

/* Six rows out of line: its one loop is the hot loop (tools/mca_arm64_kernels.txt measures it). */
__attribute__((noinline)) static void
tile6_neon(const float *a, ptrdiff_t ra, ptrdiff_t xa, const float *b, int X, float *c,
           const float *alpha)
{
    tile_rows_neon(a, ra, xa, 6, b, X, c, alpha);
}

static void tile_neon(const float *a, ptrdiff_t ra, ptrdiff_t xa, int R,
                      const float *b, int X, float *c, const float *alpha)
{
    for (int h = 0; h < QB; h += 16) {
        const float *al = alpha ? alpha + h : NULL;
        int r = 0;
        for (; r + 6 <= R; r += 6)
            tile6_neon(a + r * ra, ra, xa, b + h, X, c + r * QB + h, al);
        switch (R - r) { /* the last rows, in one pass */
        case 5: tile_rows_neon(a + r * ra, ra, xa, 5, b + h, X, c + r * QB + h, al); break;
        case 4: tile_rows_neon(a + r * ra, ra, xa, 4, b + h, X, c + r * QB + h, al); break;
        case 3: tile_rows_neon(a + r * ra, ra, xa, 3, b + h, X, c + r * QB + h, al); break;
        case 2: tile_rows_neon(a + r * ra, ra, xa, 2, b + h, X, c + r * QB + h, al); break;
        case 1: tile_rows_neon(a + r * ra, ra, xa, 1, b + h, X, c + r * QB + h, al); break;
        }
    }
}

/* softmax_256 on 4 vectors (16 lanes) at a time: the running maxima are 4 independent chains. */
static void softmax_neon(float *s, int kn, int delta, int w, float *m, float *l,
                         float *alpha)
{
    const float32x4_t ninf = vdupq_n_f32(-INFINITY);
    const int32x4_t lanes = {0, 1, 2, 3}, one = vdupq_n_s32(1), wv = vdupq_n_s32(w);
    for (int g = 0; g < QB; g += 16) {
        float32x4_t m0[4], mx[4], use[4], sum[4];
        int32x4_t diff[4]; /* lane i minus key j's offset, counted down as j advances */
        for (int v = 0; v < 4; v++) {
            m0[v] = mx[v] = vld1q_f32(m + g + 4 * v);
            sum[v] = vdupq_n_f32(0.0f);
            diff[v] = vsubq_s32(lanes, vdupq_n_s32(delta - g - 4 * v));
        }
        for (int j = 0; j < kn; j++) {
            float *sj = s + j * QB + g;
            for (int v = 0; v < 4; v++) {
                float32x4_t x = vld1q_f32(sj + 4 * v);
                if (w >= 0) {
                    x = vbslq_f32(vcgtq_s32(vabsq_s32(diff[v]), wv), ninf, x);
                    vst1q_f32(sj + 4 * v, x);
                    diff[v] = vsubq_s32(diff[v], one);
                }
                mx[v] = vbslq_f32(vcgtq_f32(mx[v], x), mx[v], x); /* _mm256_max_ps(mx, x) */
            }
        }
        for (int v = 0; v < 4; v++) /* 0 where the maximum is -inf: _mm256_andnot_ps */
            use[v] = vreinterpretq_f32_u32(
                vbicq_u32(vreinterpretq_u32_f32(mx[v]), vceqq_f32(mx[v], ninf)));
        for (int j = 0; j < kn; j++) {
            float *sj = s + j * QB + g;
            for (int v = 0; v < 4; v++) {
                const float32x4_t p = exp2_neon(vsubq_f32(vld1q_f32(sj + 4 * v), use[v]));
                vst1q_f32(sj + 4 * v, p);
                sum[v] = vaddq_f32(sum[v], p);
            }
        }
        for (int v = 0; v < 4; v++) {
            const float32x4_t al = exp2_neon(vsubq_f32(m0[v], use[v]));
            vst1q_f32(alpha + g + 4 * v, al);
            vst1q_f32(l + g + 4 * v, vfmaq_f32(sum[v], vld1q_f32(l + g + 4 * v), al));
            vst1q_f32(m + g + 4 * v, mx[v]);
        }
    }
}
#endif /* KIME_NEON */

/* ---- driver ------------------------------------------------------------------------------ */

/* Floats of one thread's scratch, a multiple of 16 so every thread's slice stays 64-B aligned:
 * the FP32 path's QT, OT, S, m, l and alpha, then the BF16 path's words (attention_bf16.h). */
static size_t rope_block_floats(int hd) { return (size_t)QB * hd; }

static size_t thread_floats(int hd)
{
    return ((size_t)2 * hd * QB + KB * QB + 3 * QB + bf16_item_words(hd) + rope_block_floats(hd) +
            15) & ~(size_t)15;
}

/* kv_task's words per thread: the pair's two rotated key rows; kv_task_amx's, a head's two and
 * 16 pairs' values (18 hd) */
#define KV_THREAD_WORDS(H, hd) ((size_t)2 * (H) * (hd) + (size_t)16 * (hd))

size_t kime_attention_scratch_floats(int precision, int tokens, int heads, int hd, int nthreads)
{
    size_t n = (size_t)(nthreads < 1 ? 1 : nthreads) * thread_floats(hd) + 16; /* + alignment */
    /* k2 (with KB rows of slack: AMX's score tiles read whole 16-key tiles), v2 and kr, each
     * from a 64-byte boundary */
    if (precision == KIME_ATTN_BF16)
        n += bf16_keys_words(tokens + KB, heads, hd) + bf16_values_words(tokens, heads, hd) +
             (size_t)(nthreads < 1 ? 1 : nthreads) * KV_THREAD_WORDS(heads, hd) + 48;
    return n;
}

/* The row holding token t, scanning on from the last answer (a thread's tokens ascend). */
static int row_of(const int32_t *cu, int t, int r)
{
    if (t < cu[r])
        r = 0;
    while (t >= cu[r + 1])
        r++;
    return r;
}

static int64_t row_items(const int32_t *cu, int r, int H)
{
    return (int64_t)H * ((cu[r + 1] - cu[r] + QB - 1) / QB);
}

/* ---- a block's queries in, its results out ------------------------------------------------ */

#ifdef KIME_X86
/* r[0..8) as the rows of an 8 x 8 matrix, transposed in place. */
__attribute__((target("avx2"), always_inline)) static inline void transpose8(__m256 *r)
{
    const __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
    const __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
    const __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
    const __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
    const __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE);
    const __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE);
    const __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE);
    const __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
    r[0] = _mm256_permute2f128_ps(u0, u4, 0x20), r[1] = _mm256_permute2f128_ps(u1, u5, 0x20);
    r[2] = _mm256_permute2f128_ps(u2, u6, 0x20), r[3] = _mm256_permute2f128_ps(u3, u7, 0x20);
    r[4] = _mm256_permute2f128_ps(u0, u4, 0x31), r[5] = _mm256_permute2f128_ps(u1, u5, 0x31);
    r[6] = _mm256_permute2f128_ps(u2, u6, 0x31), r[7] = _mm256_permute2f128_ps(u3, u7, 0x31);
}

/* queries_in's 8 x 8 blocks of whole queries and dims; returns the queries it did. A product is
 * the same one rounding as the scalar loop's, so the bits do not change. */
__attribute__((target("avx2"))) static int queries_in_256(const float *q, ptrdiff_t ldq, int qn,
                                                          int hd, float scale, float *qt)
{
    const __m256 sc = _mm256_set1_ps(scale);
    const int hd8 = hd / 8 * 8;
    int i0 = 0;
    for (; i0 + 8 <= qn; i0 += 8) {
        for (int d0 = 0; d0 < hd8; d0 += 8) {
            __m256 r[8];
            for (int k = 0; k < 8; k++)
                r[k] = _mm256_loadu_ps(q + (i0 + k) * ldq + d0);
            transpose8(r);
            for (int k = 0; k < 8; k++)
                _mm256_storeu_ps(qt + (size_t)(d0 + k) * QB + i0, _mm256_mul_ps(r[k], sc));
        }
        for (int i = i0; i < i0 + 8; i++)
            for (int d = hd8; d < hd; d++)
                qt[d * QB + i] = q[i * ldq + d] * scale;
    }
    return i0;
}

/* results_out's 8 x 8 blocks: query i's dims times 1 / l[i], one rounding each, as the scalar
 * loop's. Returns the queries it did. */
__attribute__((target("avx2"))) static int results_out_256(const float *ot, const float *l, int qn,
                                                           int hd, float *out, int ldo)
{
    const int hd8 = hd / 8 * 8;
    int i0 = 0;
    for (; i0 + 8 <= qn; i0 += 8) {
        float inv[8];
        for (int k = 0; k < 8; k++)
            inv[k] = 1.0f / l[i0 + k];
        for (int d0 = 0; d0 < hd8; d0 += 8) {
            __m256 r[8];
            for (int k = 0; k < 8; k++)
                r[k] = _mm256_loadu_ps(ot + (size_t)(d0 + k) * QB + i0);
            transpose8(r);
            for (int k = 0; k < 8; k++)
                _mm256_storeu_ps(out + (ptrdiff_t)(i0 + k) * ldo + d0,
                                 _mm256_mul_ps(r[k], _mm256_set1_ps(inv[k])));
        }
        for (int k = 0; k < 8; k++)
            for (int d = hd8; d < hd; d++)
                out[(ptrdiff_t)(i0 + k) * ldo + d] = ot[d * QB + i0 + k] * inv[k];
    }
    return i0;
}
#endif

/* qt[d][i] = q's query i, dim d, times scale: the block's queries as lanes (padded lanes 0, so
 * they score 0 and are never written out). */
static void queries_in(int vec, const float *q, ptrdiff_t ldq, int qn, int hd, float scale,
                       float *qt)
{
    int done = 0;
#ifdef KIME_X86
    if (vec)
        done = queries_in_256(q, ldq, qn, hd, scale, qt);
#else
    (void)vec;
#endif
    for (int i = done; i < QB; i++)
        for (int d = 0; d < hd; d++)
            qt[d * QB + i] = i < qn ? q[i * ldq + d] * scale : 0.0f;
}

/* out's row i = ot's lane i / l[i] for the block's real queries. */
static void results_out(int vec, const float *ot, const float *l, int qn, int hd, float *out,
                        int ldo)
{
    int done = 0;
#ifdef KIME_X86
    if (vec)
        done = results_out_256(ot, l, qn, hd, out, ldo);
#else
    (void)vec;
#endif
    for (int i = done; i < qn; i++) {
        const float inv = 1.0f / l[i];
        float *o = out + (ptrdiff_t)i * ldo;
        for (int d = 0; d < hd; d++)
            o[d] = ot[d * QB + i] * inv;
    }
}

/* BF16 products (attention_bf16.h): rows of QB lanes into pairs (QT, and S), a row's token pair
 * into k2 and v2, and the tile over pairs. */
typedef struct {
    void (*lanes)(const float *x, int n, uint32_t *out);
    void (*kv_pair)(const float *kx0, const float *kx1, const float *vx0, const float *vx1, int H,
                    int hd, uint32_t *k0, uint32_t *k1, uint32_t *vp);
    void (*tile)(const uint32_t *a, ptrdiff_t ra, ptrdiff_t xa, int R, const uint32_t *b, int X,
                 float *c, const float *alpha, uint32_t *work);
} bf16_ops;

typedef struct {
    tile_fn tile;
    softmax_fn softmax;
    int vec; /* queries_in / results_out in AVX2 */
    const bf16_ops *bf16; /* NULL: FP32 products */
    int amx;              /* BF16 products on AMX tiles (attention_bf16.h), v2 as vt */
    const float *q, *qkv;
    ptrdiff_t ldq, ld;
    const int32_t *qcu, *cu, *pos, *opt;
    int R, H, hd, half_window, ldo, chunk;
    int64_t total;
    float *out, *base;
    uint32_t *k2, *v2; /* BF16: every key and value of the call (attention_bf16.h) */
    /* RoPE tables ([max_pos][hd/2]) when the call rotates q and k as it reads them (BF16
     * products: kime_attention_rope), else NULL; kr: each thread's two rotated key rows */
    const float *rcos, *rsin;
    float *kr;
    rope_head_fn rope;
} attend_job;

/* One item's scratch (the FP32 path's arrays, then the BF16 path's words), and for BF16 its
 * row's keys and values in pairs, from the item's head. */
typedef struct {
    float *qt, *ot, *s, *m, *l, *alpha;
    uint32_t *q2, *p2, *ql, *pl, *pad; /* ql, pl, pad: AMX's lo terms and padded values */
    uint32_t *work;                    /* the tile's (bf16_work_words) */
    float *qr; /* the block's queries rotated (RoPE), [QB][hd] */
    const uint32_t *k2, *v2;
    int n2; /* AMX: the row's pair rows, vt's line length */
} item_scratch;

static item_scratch item_arrays(const attend_job *j, float *scr, const uint32_t *k2,
                                const uint32_t *v2, int h, int n)
{
    const int hd = j->hd;
    item_scratch a;
    a.qt = scr, a.ot = a.qt + (size_t)hd * QB, a.s = a.ot + (size_t)hd * QB;
    a.m = a.s + KB * QB, a.l = a.m + QB, a.alpha = a.l + QB;
    a.q2 = (uint32_t *)(a.alpha + QB);
    a.p2 = a.q2 + (size_t)(hd + 1) / 2 * QB;
    a.ql = a.p2 + (size_t)KB / 2 * QB;
    a.pl = a.ql + (size_t)(hd + 1) / 2 * QB;
    a.pad = a.pl + (size_t)KB / 2 * QB;
    a.work = a.pad + (size_t)hd * 16;
    a.qr = scr + thread_floats(hd) - rope_block_floats(hd);
    a.n2 = (n + 1) / 2;
    a.k2 = k2 ? k2 + (size_t)h * ((hd + 1) / 2) : NULL;
    a.v2 = v2 ? v2 + (size_t)h * hd * (j->amx ? a.n2 : 1) : NULL;
    return a;
}

/* The item's queries in: QT, and its pairs for BF16 products; OT, m and l cleared. When the
 * call rotates (j->rcos), query i is at position qpos[i] (qpos: the row's position ids from the
 * block's first query) or i0 + i, rotated into qr first. */
static void item_start(const attend_job *j, const float *q, ptrdiff_t ldq, int qn,
                       const item_scratch *a, const int32_t *qpos, int i0)
{
    const int hd = j->hd;
    if (j->rcos) {
        const int half = hd / 2;
        for (int i = 0; i < qn; i++) {
            const ptrdiff_t p = (ptrdiff_t)(qpos ? qpos[i] : i0 + i) * half;
            j->rope(q + i * ldq, a->qr + (size_t)i * hd, hd, j->rcos + p, j->rsin + p);
        }
        q = a->qr, ldq = hd;
    }
    queries_in(j->vec, q, ldq, qn, hd, LOG2E / sqrtf((float)hd), a->qt);
    if (j->bf16)
        j->bf16->lanes(a->qt, hd, a->q2);
#ifdef KIME_ATTN_AMX
    if (j->amx)
        lanes_lo_512(a->qt, hd, a->ql);
#endif
    memset(a->ot, 0, (size_t)hd * QB * sizeof *a->ot);
    for (int i = 0; i < QB; i++)
        a->m[i] = -INFINITY, a->l[i] = 0.0f;
}

/* S = the scores of the kn keys from the row's key j0 (k: its head's keys, rows ld apart) */
static inline void block_scores(const attend_job *j, const float *k, int j0, int kn,
                                const item_scratch *a)
{
#ifdef KIME_ATTN_AMX
    if (j->amx) {
        scores_amx(a->k2 + (size_t)j0 * j->H * (j->hd / 2), (ptrdiff_t)j->H * (j->hd / 2), kn,
                   a->q2, a->ql, j->hd / 2, a->s);
        return;
    }
#endif
    if (j->bf16) {
        const int hd2 = (j->hd + 1) / 2;
        j->bf16->tile(a->k2 + (size_t)j0 * j->H * hd2, (ptrdiff_t)j->H * hd2, 1, kn, a->q2, hd2,
                      a->s, NULL, a->work);
    } else {
        j->tile(k + (ptrdiff_t)j0 * j->ld, j->ld, 1, kn, a->qt, j->hd, a->s, NULL);
    }
}

/* OT = alpha OT + the kn values from the row's key j0 (v: its head's) weighted by S */
static inline void block_values(const attend_job *j, const float *v, int j0, int kn,
                                const item_scratch *a)
{
#ifdef KIME_ATTN_AMX
    if (j->amx) { /* vt: the head's lines of n2 pairs; the block starts at pair j0 / 2 */
        j->bf16->lanes(a->s, kn, a->p2);
        lanes_lo_512(a->s, kn, a->pl);
        values_amx(a->v2 + j0 / 2, a->n2, (kn + 1) / 2, j->hd, a->p2, a->pl, a->pad, a->ot,
                   a->alpha);
        return;
    }
#endif
    if (j->bf16) {
        const ptrdiff_t row = (ptrdiff_t)j->H * j->hd; /* words of a pair row */
        j->bf16->lanes(a->s, kn, a->p2);
        j->bf16->tile(a->v2 + (size_t)(j0 / 2) * row, 1, row, j->hd, a->p2, (kn + 1) / 2, a->ot,
                      a->alpha, a->work);
    } else {
        j->tile(v + (ptrdiff_t)j0 * j->ld, 1, j->ld, j->hd, a->s, kn, a->ot, a->alpha);
    }
}

/* Head h of qn <= QB queries (q: the first query's head-h columns, rows ldq apart; the first at
 * position i0 of its row) against the row of n tokens whose keys and values start at kv[0];
 * results go to out's rows, ldo apart, from the first query's. */
static void attend_block(const attend_job *j, const float *q, ptrdiff_t ldq, int qn,
                         const float *kv, const uint32_t *k2, const uint32_t *v2, int n, int h,
                         int i0, int w, float *out, float *scr)
{
    const int H = j->H, hd = j->hd;
    const item_scratch a = item_arrays(j, scr, k2, v2, h, n);
    const float *k = kv + (ptrdiff_t)(H + h) * hd, *v = k + (ptrdiff_t)H * hd;
    if (w >= n - 1) /* a window covering the row is full attention, and needs no mask */
        w = -1;
    item_start(j, q, ldq, qn, &a, NULL, i0);
    /* Keys any query of the block can see; blocks wholly outside the window are never visited. */
    const int lo = w < 0 || i0 < w ? 0 : i0 - w;
    const int hi = w < 0 || i0 + qn + w > n ? n : i0 + qn + w;
    for (int j0 = lo / KB * KB; j0 < hi; j0 += KB) {
        const int kn = n - j0 < KB ? n - j0 : KB;
        const int inside = j0 + kn - 1 - i0 <= w && i0 + qn - 1 - j0 <= w;
        block_scores(j, k, j0, kn, &a);
        j->softmax(a.s, kn, j0 - i0, w < 0 || inside ? -1 : w, a.m, a.l, a.alpha);
        block_values(j, v, j0, kn, &a);
    }
    results_out(j->vec, a.ot, a.l, qn, hd, out, j->ldo);
}

/* attend_block for a row in the parallel option layout: pos and opt are the row's position and
 * option ids (from its first token). Query i sees key j unless both lie in option slots and the
 * slots differ, and, in a local layer (w >= 0), only if |pos[i] - pos[j]| <= w. Every query sees
 * itself, so no query is left without keys. */
static void attend_block_masked(const attend_job *j, const float *q, ptrdiff_t ldq, int qn,
                                const float *kv, const uint32_t *k2, const uint32_t *v2, int n,
                                int h, int i0, int w, const int32_t *pos, const int32_t *opt,
                                float *out, float *scr)
{
    const int H = j->H, hd = j->hd;
    const item_scratch a = item_arrays(j, scr, k2, v2, h, n);
    const float *k = kv + (ptrdiff_t)(H + h) * hd, *v = k + (ptrdiff_t)H * hd;
    item_start(j, q, ldq, qn, &a, pos + i0, i0);
    /* Padded lanes take query 0's ids: they see what it sees (and are never written out), so
     * the bounds below are those of the real queries. */
    int32_t qp[QB], qo[QB];
    int qmin = INT_MAX, qmax = INT_MIN, qomin = INT_MAX, qomax = INT_MIN;
    for (int i = 0; i < QB; i++) {
        qp[i] = pos[i0 + (i < qn ? i : 0)], qo[i] = opt[i0 + (i < qn ? i : 0)];
        qmin = qp[i] < qmin ? qp[i] : qmin, qmax = qp[i] > qmax ? qp[i] : qmax;
        qomin = qo[i] < qomin ? qo[i] : qomin, qomax = qo[i] > qomax ? qo[i] : qomax;
    }
    for (int j0 = 0; j0 < n; j0 += KB) {
        const int kn = n - j0 < KB ? n - j0 : KB;
        const int32_t *kp = pos + j0, *ko = opt + j0;
        int kmin = INT_MAX, kmax = INT_MIN, komin = INT_MAX, komax = INT_MIN;
        for (int t = 0; t < kn; t++) {
            kmin = kp[t] < kmin ? kp[t] : kmin, kmax = kp[t] > kmax ? kp[t] : kmax;
            komin = ko[t] < komin ? ko[t] : komin, komax = ko[t] > komax ? ko[t] : komax;
        }
        /* A block no query may see is skipped: all keys outside every query's window, or all
         * keys and queries in slots with no slot in common. (A block these bounds keep whose
         * pairs are all masked changes nothing: zero weights, and alpha 1, or 0 before any key
         * was seen.) */
        if (w >= 0 && (kmin > qmax + w || kmax < qmin - w))
            continue;
        if (qomin > 0 && komin > 0 && (komin > qomax || komax < qomin))
            continue;
        const int window = w >= 0 && (kmax - qmin > w || qmax - kmin > w);
        const int slots = qomax > 0 && komax > 0; /* some pair lies in two slots */
        block_scores(j, k, j0, kn, &a);
        if (window || slots)
            for (int t = 0; t < kn; t++) {
                float *sj = a.s + t * QB;
                const int32_t p = kp[t], o = ko[t];
                for (int i = 0; i < QB; i++) {
                    const int far = window & ((qp[i] - p > w) | (p - qp[i] > w));
                    const int other = slots & (o > 0) & (qo[i] > 0) & (qo[i] != o);
                    sj[i] = far | other ? -INFINITY : sj[i];
                }
            }
        j->softmax(a.s, kn, 0, -1, a.m, a.l, a.alpha);
        block_values(j, v, j0, kn, &a);
    }
    results_out(j->vec, a.ot, a.l, qn, hd, out, j->ldo);
}

static const bf16_ops BF16_C = {lanes_bf16_c, kv_pair_bf16_c, ptile_c};
#ifdef KIME_X86
static const bf16_ops BF16_AVX2 = {lanes_bf16_256, kv_pair_bf16_256, ptile_256};
#endif
#ifdef KIME_ATTN_DPBF16
static const bf16_ops BF16_DP = {lanes_bf16_512, kv_pair_bf16_512, dtile_512};
#endif
#ifdef KIME_NEON
static const bf16_ops BF16_NEON = {lanes_bf16_neon, kv_pair_bf16_neon, ptile_neon};
#endif

/* The BF16 products at an ISA level: one arithmetic, vdpbf16ps's (attention_bf16.h), the
 * instruction itself where the CPU has it, FMAs that give its bits elsewhere; and its name. */
static const bf16_ops *bf16_ops_for(int isa, const char **name)
{
#ifdef KIME_ATTN_DPBF16
    if (isa >= KIME_ISA_AVX512 && !kime_bgemm_missing(isa)) /* AVX512_BF16 */
        return *name = "vdpbf16ps", &BF16_DP;
#endif
#ifdef KIME_X86
    if (isa >= KIME_ISA_AVX2)
        return *name = "avx2 fma", &BF16_AVX2;
#elif defined(KIME_NEON)
    if (isa >= KIME_ISA_NEON)
        return *name = "neon fma", &BF16_NEON;
#endif
    return *name = "c", &BF16_C;
}

/* 1 when a call at `isa` with head dim hd runs its BF16 products on AMX tiles: where the BF16
 * GEMM does (kime_bgemm_amx), for head dims of a multiple of 32 (whole 16-pair tile rows). */
static int amx_for(int isa, int hd)
{
#ifdef KIME_ATTN_AMX
    return hd % 32 == 0 && kime_bgemm_amx(isa);
#else
    (void)isa, (void)hd;
    return 0;
#endif
}

const char *kime_attention_bf16_kernels(int isa)
{
    const char *name;
    bf16_ops_for(isa, &name);
    return amx_for(isa, 32) ? "amx-bf16" : name;
}

/* A row's pair rows in v2: ceil(n / 2) for n keys. */
static int row_pairs(const int32_t *cu, int r) { return (cu[r + 1] - cu[r] + 1) / 2; }

#define KV_AHEAD 12 /* pairs: at W3's sizes 6 gave 1.1% less time, 12 1.3%, 2 nothing */

/* Pair rows [task * chunk, ...) of the call's keys and values into k2 and v2 (BF16). */
static void kv_task(void *ctx, int task, int tid)
{
    const attend_job *j = (const attend_job *)ctx;
    const int32_t *cu = j->cu;
    const int H = j->H, hd = j->hd, hd2 = (hd + 1) / 2;
    const int64_t p0 = (int64_t)task * j->chunk;
    const int64_t p1 = p0 + j->chunk < j->total ? p0 + j->chunk : j->total;
    const unsigned long flush = bf16_flush_on();
    float *kr = j->kr + (size_t)tid * KV_THREAD_WORDS(H, hd); /* RoPE: the keys, rotated */
    int r = 0;
    int64_t first = 0; /* pair rows before row r */
    for (int64_t p = p0; p < p1; p++) {
        while (p >= first + row_pairs(cu, r))
            first += row_pairs(cu, r++);
        const int t0 = cu[r] + 2 * (int)(p - first), t1 = t0 + 1 < cu[r + 1] ? t0 + 1 : -1;
        uint32_t *k0 = j->k2 + (size_t)(t0 - cu[0]) * H * hd2;
        const float *x0 = j->qkv + (ptrdiff_t)t0 * j->ld, *x1 = x0 + j->ld;
        const float *kx0 = x0 + (size_t)H * hd, *kx1 = t1 < 0 ? NULL : x1 + (size_t)H * hd;
        /* Ask for the keys and values KV_AHEAD pairs on: in a long call qkv is far larger than
         * the caches, and each token's keys and values lie 3 H hd floats apart, past its
         * queries, which the hardware prefetchers follow only late. */
        for (int t = t0 + 2 * KV_AHEAD; t < t0 + 2 * KV_AHEAD + 2 && t < cu[j->R]; t++)
            for (int f = 0; f < 2 * H * hd; f += 16)
                __builtin_prefetch(j->qkv + (ptrdiff_t)t * j->ld + (size_t)H * hd + f, 0, 2);
        if (j->rcos) {
            for (int u = 0; u < (t1 < 0 ? 1 : 2); u++) {
                const int t = t0 + u, half = hd / 2;
                const ptrdiff_t at = (ptrdiff_t)(j->pos ? j->pos[t] : t - cu[r]) * half;
                for (int h = 0; h < H; h++)
                    j->rope((u ? kx1 : kx0) + (size_t)h * hd, kr + ((size_t)u * H + h) * hd,
                              hd, j->rcos + at, j->rsin + at);
            }
            kx0 = kr, kx1 = t1 < 0 ? NULL : kr + (size_t)H * hd;
        }
        j->bf16->kv_pair(kx0, kx1, x0 + (size_t)2 * H * hd,
                         t1 < 0 ? NULL : x1 + (size_t)2 * H * hd, H, hd, k0,
                         k0 + (size_t)H * hd2, j->v2 + (size_t)p * H * hd);
    }
    bf16_flush_restore(flush);
}

#ifdef KIME_ATTN_AMX
/* vp's first np rows of hd words (np <= 16, hd a multiple of 16) as the column [0, np) of hd
 * lines of vt, n2 words apart: vt[d * n2 + y] = vp[y * hd + d], 16 x 16 words at a time (a
 * word at a time at that stride, this step took 3.5% of a 182-token AMX attention call in
 * perf; now 2.3%). */
__attribute__((target("avx512f"))) static void vt_put(const uint32_t *vp, int np, int hd,
                                                      uint32_t *vt, int n2)
{
    for (int d0 = 0; d0 < hd; d0 += 16) {
        __m512i rows[16];
        for (int i = 0; i < 16; i++)
            rows[i] = i < np ? _mm512_loadu_si512(vp + (size_t)i * hd + d0)
                             : _mm512_setzero_si512();
        put16_strided(rows, np, 16, vt + (size_t)d0 * n2, (size_t)n2);
    }
}

/* One row's keys and values of one head into k2 (as kv_task) and the head's lines of vt (first:
 * the pair rows before row r), 16 pairs' values at a time. */
static void kv_head_amx(const attend_job *j, int r, int h, int64_t first, int tid)
{
    const int32_t *cu = j->cu;
    const int H = j->H, hd = j->hd, hd2 = hd / 2, n2 = row_pairs(cu, r);
    float *kr = j->kr + (size_t)tid * KV_THREAD_WORDS(H, hd); /* RoPE: the keys, rotated */
    uint32_t *vs = (uint32_t *)kr + 2 * hd;                  /* 16 pairs' values, [16][hd] */
    uint32_t *vt = j->v2 + ((size_t)first * H + (size_t)h * n2) * hd;
    for (int y = 0; y < n2; y++) {
        uint32_t *vp = vs + (size_t)(y % 16) * hd; /* this pair's values */
        const int t0 = cu[r] + 2 * y, t1 = t0 + 1 < cu[r + 1] ? t0 + 1 : -1;
        /* this head's keys and values KV_AHEAD pairs on: a token's are 3 H hd floats past the
         * last one's, a stride no hardware prefetcher follows */
        for (int t = t0 + 2 * KV_AHEAD; t < t0 + 2 * KV_AHEAD + 2 && t < cu[r + 1]; t++)
            for (int f = 0; f < hd; f += 16) {
                const float *x = j->qkv + (ptrdiff_t)t * j->ld + (size_t)(H + h) * hd + f;
                __builtin_prefetch(x, 0, 3);
                __builtin_prefetch(x + (size_t)H * hd, 0, 3);
            }
        const float *x0 = j->qkv + (ptrdiff_t)t0 * j->ld, *x1 = x0 + j->ld;
        const float *kx0 = x0 + (size_t)(H + h) * hd;
        const float *kx1 = t1 < 0 ? NULL : x1 + (size_t)(H + h) * hd;
        if (j->rcos) {
            for (int u = 0; u < (t1 < 0 ? 1 : 2); u++) {
                const ptrdiff_t at = (ptrdiff_t)(j->pos ? j->pos[t0 + u] : 2 * y + u) * hd2;
                j->rope(u ? kx1 : kx0, kr + (size_t)u * hd, hd, j->rcos + at, j->rsin + at);
            }
            kx0 = kr, kx1 = t1 < 0 ? NULL : kr + hd;
        }
        uint32_t *k0 = j->k2 + (size_t)(t0 - cu[0]) * H * hd2 + (size_t)h * hd2;
        j->bf16->kv_pair(kx0, kx1, x0 + (size_t)(2 * H + h) * hd,
                         t1 < 0 ? NULL : x1 + (size_t)(2 * H + h) * hd, 1, hd, k0,
                         k0 + (size_t)H * hd2, vp);
        if (y % 16 == 15 || y == n2 - 1)
            vt_put(vs, y % 16 + 1, hd, vt + (y - y % 16), n2);
    }
}

/* The AMX path's kv_task: items [task * chunk, ...) of (row, head), each a row's keys and values
 * of one head (kv_head_amx). An item writes whole lines of vt, so no two threads share a cache
 * line of it (kv_task's pair rows would: each line takes a word of every pair). */
static void kv_task_amx(void *ctx, int task, int tid)
{
    const attend_job *j = (const attend_job *)ctx;
    const int64_t it0 = (int64_t)task * j->chunk;
    const int64_t it1 = it0 + j->chunk < j->total ? it0 + j->chunk : j->total;
    const unsigned long flush = bf16_flush_on();
    int r = (int)(it0 / j->H);
    int64_t first = 0; /* pair rows before row r */
    for (int i = 0; i < r; i++)
        first += row_pairs(j->cu, i);
    for (int64_t it = it0; it < it1; it++) {
        for (; r < it / j->H; r++)
            first += row_pairs(j->cu, r);
        kv_head_amx(j, r, (int)(it % j->H), first, tid);
    }
    bf16_flush_restore(flush);
}
#endif

/* Items [task * chunk, ...) of the batch (row, then head, then block of QB queries). */
static void attend_task(void *ctx, int task, int tid)
{
    const attend_job *j = (const attend_job *)ctx;
    const int32_t *qcu = j->qcu, *cu = j->cu;
    const int H = j->H, hd = j->hd;
    const ptrdiff_t ld = j->ld, ldq = j->ldq;
    float *scr = j->base + (size_t)tid * thread_floats(hd);
    const int64_t it0 = (int64_t)task * j->chunk;
    const int64_t it1 = it0 + j->chunk < j->total ? it0 + j->chunk : j->total;
    const unsigned long flush = j->bf16 ? bf16_flush_on() : 0;
#ifdef KIME_ATTN_AMX
    if (j->amx)
        kime_amx_enter();
#endif
    int r = 0;
    int64_t first = 0, pairs = 0; /* items and v2's pair rows before row r */
    for (int64_t it = it0; it < it1; it++) {
        while (it >= first + row_items(qcu, r, H)) {
            pairs += row_pairs(cu, r);
            first += row_items(qcu, r++, H);
        }
        const int nq = qcu[r + 1] - qcu[r], blocks = (nq + QB - 1) / QB;
        const int h = (int)((it - first) / blocks), i0 = (int)((it - first) % blocks) * QB;
        const ptrdiff_t at = (ptrdiff_t)qcu[r] + i0;
        const uint32_t *k2 = j->k2 ? j->k2 + (size_t)(cu[r] - cu[0]) * H * ((hd + 1) / 2) : NULL;
        const uint32_t *v2 = j->v2 ? j->v2 + (size_t)pairs * H * hd : NULL;
        /* The next items are most often this head's next blocks: ask for the queries of the
         * one after next (rows ldq apart, which no hardware prefetcher follows) while this one
         * runs, and on a task's first item for the next one's too. The next one alone came
         * too late in long rows. */
        for (int i = i0 + (it == it0 ? 1 : 2) * QB; i < i0 + 3 * QB && i < nq; i++)
            for (int d = 0; d < hd; d += 16)
                __builtin_prefetch(j->q + (at + i - i0) * ldq + (ptrdiff_t)h * hd + d, 0, 2);
        if (j->pos)
            attend_block_masked(j, j->q + at * ldq + (ptrdiff_t)h * hd, ldq,
                                nq - i0 < QB ? nq - i0 : QB, j->qkv + (ptrdiff_t)cu[r] * ld, k2,
                                v2, cu[r + 1] - cu[r], h, i0, j->half_window, j->pos + cu[r],
                                j->opt + cu[r], j->out + at * j->ldo + (ptrdiff_t)h * hd, scr);
        else
            attend_block(j, j->q + at * ldq + (ptrdiff_t)h * hd, ldq, nq - i0 < QB ? nq - i0 : QB,
                         j->qkv + (ptrdiff_t)cu[r] * ld, k2, v2, cu[r + 1] - cu[r], h, i0,
                         j->half_window, j->out + at * j->ldo + (ptrdiff_t)h * hd, scr);
    }
#ifdef KIME_ATTN_AMX
    if (j->amx)
        kime_amx_leave();
#endif
    if (j->bf16)
        bf16_flush_restore(flush);
}

/* Row r's queries are q's rows qcu[r]..qcu[r+1] (ldq apart), its keys and values qkv's rows
 * cu[r]..cu[r+1]. With q == qkv and qcu == cu a query's position is its index in the row, which
 * the window reads, or pos[t] when pos and opt (per token of qkv) are given; otherwise
 * half_window must be < 0 and pos, opt NULL. */
static void attend_rows(int precision, const float *q, ptrdiff_t ldq, const int32_t *qcu,
                        const float *qkv, const int32_t *cu, int R, int H, int hd,
                        int half_window, const int32_t *pos, const int32_t *opt,
                        const float *rcos, const float *rsin, float *out, int ldo,
                        float *scratch, int nthreads)
{
    attend_job j = {tile_c, softmax_c, 0, NULL, 0, q, qkv, ldq, (ptrdiff_t)3 * H * hd, qcu, cu, pos,
                    opt, R, H, hd, half_window, ldo, 1, 0, out,
                    (float *)(((uintptr_t)scratch + 63) & ~(uintptr_t)63), NULL, NULL, NULL, NULL,
                    NULL, NULL};
    const int isa = kime_isa_detect();
#ifdef KIME_X86
    if (isa == KIME_ISA_AVX512)
        j.tile = tile_512, j.softmax = softmax_512;
    else if (isa == KIME_ISA_AVX2)
        j.tile = tile_256, j.softmax = softmax_256;
    j.vec = isa >= KIME_ISA_AVX2;
#elif defined(KIME_NEON)
    if (isa >= KIME_ISA_NEON)
        j.tile = tile_neon, j.softmax = softmax_neon;
#endif
    int64_t items = 0;
    for (int r = 0; r < R; r++)
        items += row_items(qcu, r, H);
    if (items == 0)
        return;
    /* BF16 products: the keys and values are rounded into pairs first, a step of their own,
     * once per call. */
    if (precision == KIME_ATTN_BF16) {
        const int tokens = cu[R] - cu[0];
        const char *name;
        j.bf16 = bf16_ops_for(isa, &name);
        j.amx = amx_for(isa, hd);
        j.k2 = (uint32_t *)(((uintptr_t)(j.base + (size_t)(nthreads < 1 ? 1 : nthreads) *
                                                      thread_floats(hd)) + 63) & ~(uintptr_t)63);
        j.v2 = (uint32_t *)(((uintptr_t)(j.k2 + bf16_keys_words(tokens + KB, H, hd)) + 63) &
                            ~(uintptr_t)63);
        j.kr = (float *)(((uintptr_t)(j.v2 + bf16_values_words(tokens, H, hd)) + 63) &
                         ~(uintptr_t)63);
        j.rcos = rcos, j.rsin = rsin, j.rope = rope_head;
#ifdef KIME_X86
        if (isa == KIME_ISA_AVX512)
            j.rope = rope_head_512;
        else if (isa == KIME_ISA_AVX2)
            j.rope = rope_head_256;
#endif
        for (int r = 0; r < R; r++)
            j.total += row_pairs(cu, r);
#ifdef KIME_ATTN_AMX
        if (j.amx) { /* about 8 tasks per thread, as the items below */
            j.total = (int64_t)R * H;
            j.chunk = (int)((j.total + 8 * nthreads - 1) / (8 * nthreads));
            if (j.chunk < 1)
                j.chunk = 1;
            kime_parallel(nthreads, (int)((j.total + j.chunk - 1) / j.chunk), kv_task_amx, &j);
        } else
#endif
        {
            j.chunk = kime_chunk((int)j.total, nthreads, 4, 4);
            kime_parallel(nthreads, (int)((j.total + j.chunk - 1) / j.chunk), kv_task, &j);
        }
    }
    j.total = items;
    /* About 8 tasks per thread, so the threads that have their cores take a late one's share. */
    j.chunk = (int)((j.total + 8 * nthreads - 1) / (8 * nthreads));
    if (j.chunk < 1)
        j.chunk = 1;
    kime_parallel(nthreads, (int)((j.total + j.chunk - 1) / j.chunk), attend_task, &j);
}

void kime_attention(int precision, const float *qkv, const int32_t *cu, int R, int H, int hd,
                    int half_window, const int32_t *pos, const int32_t *opt, float *out, int ldo,
                    float *scratch, int nthreads)
{
    if (!pos || !opt) /* both or neither */
        pos = opt = NULL;
    attend_rows(precision, qkv, (ptrdiff_t)3 * H * hd, cu, qkv, cu, R, H, hd, half_window, pos,
                opt, NULL, NULL, out, ldo, scratch, nthreads);
}

void kime_attention_some(int precision, const float *q, int ldq, const int32_t *qcu,
                         const float *qkv, const int32_t *cu, int R, int H, int hd, float *out,
                         int ldo, float *scratch, int nthreads)
{
    attend_rows(precision, q, ldq, qcu, qkv, cu, R, H, hd, -1, NULL, NULL, NULL, NULL, out, ldo,
                scratch, nthreads);
}

/* Rotate-half RoPE of one token's q and k heads by the table rows c, s, in place (rope_pair's
 * bits). It is memory-bound and elementwise: GCC vectorises the loop (SSE on x86-64, NEON's
 * fmul/fsub/fadd on aarch64), so it needs no intrinsics. */
static inline void rope_token(float *x, int H, int hd, const float *c,
                              const float *s)
{
    const int half = hd / 2;
    for (int u = 0; u < 2 * H; u++, x += hd) /* q heads, then k heads */
        for (int i = 0; i < half; i++)
            rope_pair(x[i], x[i + half], c[i], s[i], x + i, x + i + half);
}

typedef struct {
    float *qkv;
    const int32_t *cu, *pos;
    const float *cos_table, *sin_table;
    int R, H, hd, chunk;
} rope_job;

static void rope_task(void *ctx, int task, int tid)
{
    const rope_job *j = (const rope_job *)ctx;
    const ptrdiff_t ld = (ptrdiff_t)3 * j->H * j->hd;
    const int half = j->hd / 2, t0 = j->cu[0] + task * j->chunk;
    const int t1 = t0 + j->chunk < j->cu[j->R] ? t0 + j->chunk : j->cu[j->R];
    (void)tid;
    for (int t = t0, r = 0; t < t1; t++) {
        /* a token's position is its own id, else its place in its row */
        int p;
        if (j->pos) {
            p = j->pos[t];
        } else {
            r = row_of(j->cu, t, r);
            p = t - j->cu[r];
        }
        rope_token(j->qkv + (ptrdiff_t)t * ld, j->H, j->hd, j->cos_table + (ptrdiff_t)p * half,
                   j->sin_table + (ptrdiff_t)p * half);
    }
}

void kime_rope(float *qkv, int T, const int32_t *cu, int R, int H, int hd,
               const float *cos_table, const float *sin_table, const int32_t *pos,
               int nthreads)
{
    (void)T; /* the rows cover tokens cu[0]..cu[R] */
    const int n = cu[R] - cu[0];
    if (n <= 0)
        return;
    rope_job j = {qkv, cu, pos, cos_table, sin_table, R, H, hd, kime_chunk(n, nthreads, 4, 8)};
    kime_parallel(nthreads, (n + j.chunk - 1) / j.chunk, rope_task, &j);
}

void kime_attention_rope(int precision, float *qkv, const int32_t *cu, int R, int H, int hd,
                         int half_window, const int32_t *pos, const int32_t *opt,
                         const float *cos_table, const float *sin_table, float *out, int ldo,
                         float *scratch, int nthreads)
{
    if (!pos || !opt)
        pos = opt = NULL;
    if (precision != KIME_ATTN_BF16) { /* the FP32 tiles read the keys where they lie */
        kime_rope(qkv, cu[R] - cu[0], cu, R, H, hd, cos_table, sin_table, pos, nthreads);
        kime_attention(precision, qkv, cu, R, H, hd, half_window, pos, opt, out, ldo, scratch,
                       nthreads);
        return;
    }
    attend_rows(precision, qkv, (ptrdiff_t)3 * H * hd, cu, qkv, cu, R, H, hd, half_window, pos,
                opt, cos_table, sin_table, out, ldo, scratch, nthreads);
}
