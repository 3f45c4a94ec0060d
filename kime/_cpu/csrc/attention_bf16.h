/* Attention's BF16 products (kernels.h's KIME_ATTN_BF16), included by attention.c after its
 * QB and KB: the rounding of the operands into bfloat16 pairs, and the tiles that sum their
 * products into FP32. attention.c's driver, softmax (FP32) and output are shared with the FP32
 * path.
 *
 * What is rounded: the scaled queries (attention.c's QT, hd^-0.5 * log2(e) applied in FP32), the
 * keys, the probabilities the FP32 softmax gives and the values, each to bfloat16 (bf16.h's
 * rounding). Each output element takes their products in a fixed order into one FP32
 * accumulator; the running rescale (alpha) and the final 1 / l stay FP32 as in the FP32 path.
 *
 * One arithmetic on every CPU: x86's vdpbf16ps. Per 32-bit lane it adds the high halves'
 * product to the accumulator, rounds, then adds the low halves' and rounds (nearest even), with
 * denormal inputs read as zero and denormal results flushed. Two bfloat16's product is exact in
 * FP32, so two FMAs, high pair first, under flush-to-zero and denormals-are-zero give the same
 * bits (checked on Zen 5 against vdpbf16ps over 3.2 million random lanes, denormals included).
 * So the x86 kernels without AVX512_BF16 (AVX2 FMAs) and aarch64's (NEON FMAs) emulate it
 * exactly, and the INT8 model, which runs this attention at every level, keeps one set of bits
 * on every SIMD level and both architectures. The whole BF16 call runs with the flush modes on
 * (MXCSR's FTZ and DAZ; FPCR's FZ), the softmax included, on every path alike. The portable C
 * tile rounds each product and sum apart (as the FP32 portable path does): exact but for a
 * product below FP32's normal range, where only the fused instructions keep the bits; it gives
 * its own bits, the same on every CPU.
 *
 * Layout. A 32-bit word holds a pair along a sum: its low half the even element, its high half
 * the odd one (an odd count's last pair has a zero high half).
 *   k2 [t][H][hd2]  every key, once per call: head h's dims in pairs (hd2 = ceil(hd / 2));
 *   v2 [y][H][hd]   every value, once per call: a row of n tokens has ceil(n / 2) pair rows,
 *                   its tokens 2j and 2j + 1 in its pair row j, after the rows before it;
 *   q2 [hd2][QB]    per item, the queries' dims in pairs, query i in lane i;
 *   p2 [kn2][QB]    per key block, the probabilities' keys in pairs, query i in lane i.
 * Scores are S[r][i] = sum_x k2[r][x] . q2[x][i] and the output OT[d][i] = alpha[i] OT[d][i] +
 * sum_y v2[y][d] . p2[y][i]: attention.c's rank-1 tiles, a pair per step, a key block starting
 * at an even token of its row.
 */
#ifndef KIME_ATTENTION_BF16_H
#define KIME_ATTENTION_BF16_H

#include <stdint.h>

#include "bf16.h"

/* The avx512bf16 target and its intrinsics arrived in GCC 10 and clang 9 (as bgemm.c's). */
#if defined(KIME_X86) && defined(__GNUC__) && \
    (defined(__clang__) ? __clang_major__ >= 9 : __GNUC__ >= 10)
#define KIME_ATTN_DPBF16 1
#endif

_Static_assert(KB % 2 == 0, "a key block starts at an even token of its row");

/* Words a tile call may unpack its operands into (ptile_256): both halves of every pair of a
 * (at most KB rows of hd2 pairs, or hd rows of KB / 2) and of b (at most hd2 or KB / 2 pair
 * rows of QB lanes). */
static inline size_t bf16_work_words(int hd)
{
    const size_t hd2 = (size_t)(hd + 1) / 2, x = hd2 > KB / 2 ? hd2 : KB / 2;
    const size_t a = (size_t)KB * hd2 > (size_t)hd * (KB / 2) ? (size_t)KB * hd2
                                                               : (size_t)hd * (KB / 2);
    return 2 * (a + x * QB);
}

/* 32-bit words of an item's BF16 scratch beside the FP32 path's: q2 and p2, the AMX path's
 * (below) low halves of both and padded copy of a partial block's values ([hd][16]), and the
 * tile's work words. */
static inline size_t bf16_item_words(int hd)
{
    return 2 * ((size_t)(hd + 1) / 2 * QB + (size_t)KB / 2 * QB) + (size_t)hd * 16 +
           bf16_work_words(hd);
}

/* Words of k2 and of v2 for `tokens` keys of H heads (rows of n tokens take ceil(n / 2) pair
 * rows, at most `tokens` in all). */
static inline size_t bf16_keys_words(int tokens, int H, int hd)
{
    return (size_t)tokens * H * ((hd + 1) / 2);
}
static inline size_t bf16_values_words(int tokens, int H, int hd)
{
    return (size_t)tokens * H * hd;
}

/* The flush modes around a BF16 call (see the top): on, returning what to restore. */
static inline unsigned long bf16_flush_on(void)
{
#if defined(KIME_X86)
    const unsigned csr = _mm_getcsr();
    _mm_setcsr(csr | 0x8040u); /* FTZ | DAZ */
    return csr;
#elif defined(KIME_NEON)
    unsigned long fpcr;
    __asm__ __volatile__("mrs %0, fpcr" : "=r"(fpcr));
    __asm__ __volatile__("msr fpcr, %0" : : "r"(fpcr | (1ul << 24))); /* FZ */
    return fpcr;
#else
    return 0;
#endif
}

static inline void bf16_flush_restore(unsigned long saved)
{
#if defined(KIME_X86)
    _mm_setcsr((unsigned)saved);
#elif defined(KIME_NEON)
    __asm__ __volatile__("msr fpcr, %0" : : "r"(saved));
#else
    (void)saved;
#endif
}

/* ---- portable C -------------------------------------------------------------------------- */

static inline uint32_t pair_c(float lo, float hi)
{
    return (uint32_t)round_bf16(lo) | (uint32_t)round_bf16(hi) << 16;
}

static inline float bf16_lo(uint32_t w)
{
    const uint32_t u = w << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static inline float bf16_hi(uint32_t w)
{
    const uint32_t u = w & 0xffff0000u;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* rows [0, n) of x ([n][QB] floats) as ceil(n / 2) rows of pairs [n2][QB] */
static void lanes_bf16_c(const float *x, int n, uint32_t *out)
{
    for (int y = 0; y < (n + 1) / 2; y++)
        for (int i = 0; i < QB; i++)
            out[y * QB + i] = pair_c(x[2 * y * QB + i], 2 * y + 1 < n ? x[(2 * y + 1) * QB + i] : 0);
}

/* One row's tokens 0 and 1 (token 1 NULL past the row's end): their keys (kx0, kx1: H heads of
 * hd floats) into k0 and k1 ([H][hd2] words each) and their values (vx0, vx1, the same layout)
 * into the pair row vp ([H][hd] words). */
static void kv_pair_bf16_c(const float *kx0, const float *kx1, const float *vx0,
                           const float *vx1, int H, int hd, uint32_t *k0, uint32_t *k1,
                           uint32_t *vp)
{
    const int hd2 = (hd + 1) / 2;
    for (int h = 0; h < H; h++) {
        for (int t = 0; t < 2; t++) {
            const float *k = t ? kx1 : kx0;
            if (!k)
                continue;
            k += (size_t)h * hd;
            uint32_t *out = (t ? k1 : k0) + (size_t)h * hd2;
            for (int x = 0; x < hd2; x++)
                out[x] = pair_c(k[2 * x], 2 * x + 1 < hd ? k[2 * x + 1] : 0);
        }
        const float *v0 = vx0 + (size_t)h * hd;
        const float *v1 = vx1 ? vx1 + (size_t)h * hd : NULL;
        for (int d = 0; d < hd; d++)
            vp[(size_t)h * hd + d] = pair_c(v0[d], v1 ? v1[d] : 0);
    }
}

/* c[r] = (alpha ? c[r] * alpha : 0) + sum over x of a[r * ra + x * xa] . b[x], the high pair
 * first (see the top) */
static void ptile_c(const uint32_t *a, ptrdiff_t ra, ptrdiff_t xa, int R, const uint32_t *b,
                    int X, float *c, const float *alpha, uint32_t *work)
{
    (void)work;
    for (int r = 0; r < R; r++, c += QB) {
        float acc[QB];
        for (int i = 0; i < QB; i++)
            acc[i] = alpha ? c[i] * alpha[i] : 0.0f;
        for (int x = 0; x < X; x++) {
            const uint32_t w = a[r * ra + x * xa], *bx = b + x * QB;
            const float hi = bf16_hi(w), lo = bf16_lo(w);
            for (int i = 0; i < QB; i++) {
                acc[i] += hi * bf16_hi(bx[i]);
                acc[i] += lo * bf16_lo(bx[i]);
            }
        }
        memcpy(c, acc, sizeof acc);
    }
}

#ifdef KIME_X86
/* ---- x86 without AVX512_BF16: AVX2 FMAs ------------------------------------------------- */

/* 8 words bf16(lo[i]) | bf16(hi[i]) << 16 */
__attribute__((target("avx2"))) static inline __m256i pairs8_256(__m256 lo, __m256 hi)
{
    return _mm256_or_si256(round_bf16x8(lo), _mm256_slli_epi32(round_bf16x8(hi), 16));
}

__attribute__((target("avx2"))) static void lanes_bf16_256(const float *x, int n, uint32_t *out)
{
    for (int y = 0; y < (n + 1) / 2; y++)
        for (int v = 0; v < QB; v += 8) {
            const __m256 lo = _mm256_loadu_ps(x + (size_t)2 * y * QB + v);
            const __m256 hi = 2 * y + 1 < n ? _mm256_loadu_ps(x + (size_t)(2 * y + 1) * QB + v)
                                            : _mm256_setzero_ps();
            _mm256_storeu_si256((__m256i *)(out + (size_t)y * QB + v), pairs8_256(lo, hi));
        }
}

__attribute__((target("avx2"))) static void kv_pair_bf16_256(const float *kx0, const float *kx1,
                                                             const float *vx0, const float *vx1,
                                                             int H, int hd, uint32_t *k0,
                                                             uint32_t *k1, uint32_t *vp)
{
    const int hd2 = (hd + 1) / 2;
    /* 8 key words from 16 dims: the shuffles take even (odd) dims in the order 0 2 8 10 4 6 12
     * 14 (1 3 9 11 5 7 13 15), which this permute sorts */
    const __m256i order = _mm256_setr_epi32(0, 1, 4, 5, 2, 3, 6, 7);
    for (int h = 0; h < H; h++) {
        for (int t = 0; t < 2; t++) {
            const float *k = t ? kx1 : kx0;
            if (!k)
                continue;
            k += (size_t)h * hd;
            uint32_t *out = (t ? k1 : k0) + (size_t)h * hd2;
            int x = 0;
            for (; 2 * x + 16 <= hd; x += 8) {
                const __m256 a = _mm256_loadu_ps(k + 2 * x), b = _mm256_loadu_ps(k + 2 * x + 8);
                const __m256 lo = _mm256_permutevar8x32_ps(_mm256_shuffle_ps(a, b, 0x88), order);
                const __m256 hi = _mm256_permutevar8x32_ps(_mm256_shuffle_ps(a, b, 0xdd), order);
                _mm256_storeu_si256((__m256i *)(out + x), pairs8_256(lo, hi));
            }
            for (; x < hd2; x++)
                out[x] = pair_c(k[2 * x], 2 * x + 1 < hd ? k[2 * x + 1] : 0);
        }
        const float *v0 = vx0 + (size_t)h * hd;
        const float *v1 = vx1 ? vx1 + (size_t)h * hd : NULL;
        uint32_t *out = vp + (size_t)h * hd;
        int d = 0;
        for (; d + 8 <= hd; d += 8)
            _mm256_storeu_si256((__m256i *)(out + d),
                                pairs8_256(_mm256_loadu_ps(v0 + d),
                                           v1 ? _mm256_loadu_ps(v1 + d) : _mm256_setzero_ps()));
        for (; d < hd; d++)
            out[d] = pair_c(v0[d], v1 ? v1[d] : 0);
    }
}

/* The pairs' halves as FP32 (bf16.h's exact widening: the high half with the low bits
 * cleared, the low half shifted up), unpacked once per tile call into `work` rather than per
 * row and lane group in the FMA loop: there each pair cost an AND and a shift per row and per
 * 16 lanes beside its four FMAs, and Zen 3 ran these tiles at 0.8 of FP32's speed. */
__attribute__((target("avx2"))) static inline __m256 hi8(__m256i w)
{
    return _mm256_castsi256_ps(_mm256_and_si256(w, _mm256_set1_epi32((int)0xffff0000u)));
}
__attribute__((target("avx2"))) static inline __m256 lo8(__m256i w)
{
    return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
}

/* a's R x X pairs (word (r, x) at a[r * ra + x * xa]) into two planes of floats, hi then lo,
 * (r, x) at r * sr + x * sx, whichever of the rows or the pairs lies contiguous in a */
__attribute__((target("avx2"))) static void unpack_a_256(const uint32_t *a, ptrdiff_t ra,
                                                         ptrdiff_t xa, int R, int X, float *hi,
                                                         float *lo, ptrdiff_t *sr, ptrdiff_t *sx)
{
    const int rows = xa == 1; /* each row's pairs contiguous: planes by rows */
    const int outer = rows ? R : X, inner = rows ? X : R;
    const ptrdiff_t so = rows ? ra : xa, si = rows ? xa : ra;
    *sr = rows ? X : 1, *sx = rows ? 1 : R;
    for (int o = 0; o < outer; o++) {
        const uint32_t *w = a + o * so;
        float *h = hi + (size_t)o * inner, *l = lo + (size_t)o * inner;
        int i = 0;
        if (si == 1)
            for (; i + 8 <= inner; i += 8) {
                const __m256i v = _mm256_loadu_si256((const __m256i *)(w + i));
                _mm256_storeu_ps(h + i, hi8(v));
                _mm256_storeu_ps(l + i, lo8(v));
            }
        for (; i < inner; i++)
            h[i] = bf16_hi(w[i * si]), l[i] = bf16_lo(w[i * si]);
    }
}

/* 16 lanes, R <= 4 rows: per pair the high halves' product, then the low halves', as two FMAs
 * (vdpbf16ps's bits under the flush modes); b's pair row x is its hi lanes then its lo lanes */
__attribute__((target("avx2,fma"), always_inline)) static inline void
ptile_rows_256(const float *ah, const float *al, ptrdiff_t sr, ptrdiff_t sx, const int R,
               const float *b, int X, float *c, const float *alpha)
{
    __m256 acc[4][2];
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
        for (int v = 0; v < 2; v++)
            acc[r][v] = alpha ? _mm256_mul_ps(_mm256_loadu_ps(c + r * QB + 8 * v),
                                              _mm256_loadu_ps(alpha + 8 * v))
                              : _mm256_setzero_ps();
    for (int x = 0; x < X; x++, ah += sx, al += sx, b += 2 * QB) {
        const __m256 h0 = _mm256_loadu_ps(b), h1 = _mm256_loadu_ps(b + 8);
        const __m256 l0 = _mm256_loadu_ps(b + QB), l1 = _mm256_loadu_ps(b + QB + 8);
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) {
            const __m256 sh = _mm256_broadcast_ss(ah + r * sr);
            const __m256 sl = _mm256_broadcast_ss(al + r * sr);
            acc[r][0] = _mm256_fmadd_ps(sl, l0, _mm256_fmadd_ps(sh, h0, acc[r][0]));
            acc[r][1] = _mm256_fmadd_ps(sl, l1, _mm256_fmadd_ps(sh, h1, acc[r][1]));
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
        for (int v = 0; v < 2; v++)
            _mm256_storeu_ps(c + r * QB + 8 * v, acc[r][v]);
}

__attribute__((target("avx2,fma"))) static void ptile_256(const uint32_t *a, ptrdiff_t ra,
                                                         ptrdiff_t xa, int R, const uint32_t *b,
                                                         int X, float *c, const float *alpha,
                                                         uint32_t *work)
{
    float *bw = (float *)work; /* [X][2][QB] */
    float *ah = bw + (size_t)2 * X * QB, *al = ah + (size_t)R * X;
    for (int x = 0; x < X; x++)
        for (int v = 0; v < QB; v += 8) {
            const __m256i w = _mm256_loadu_si256((const __m256i *)(b + (size_t)x * QB + v));
            _mm256_storeu_ps(bw + (size_t)x * 2 * QB + v, hi8(w));
            _mm256_storeu_ps(bw + (size_t)x * 2 * QB + QB + v, lo8(w));
        }
    ptrdiff_t sr, sx;
    unpack_a_256(a, ra, xa, R, X, ah, al, &sr, &sx);
#define PROWS(n) ptile_rows_256(ah + r * sr, al + r * sr, sr, sx, n, bw + h, X, c + r * QB + h, alh)
    for (int h = 0; h < QB; h += 16) {
        const float *alh = alpha ? alpha + h : NULL;
        int r = 0;
        for (; r + 4 <= R; r += 4)
            PROWS(4);
        switch (R - r) { /* the last rows, in one pass */
        case 3: PROWS(3); break;
        case 2: PROWS(2); break;
        case 1: PROWS(1); break;
        }
    }
#undef PROWS
}
#endif /* KIME_X86 */

#ifdef KIME_ATTN_DPBF16
/* ---- x86 with AVX512_BF16: vdpbf16ps ---------------------------------------------------- */
#define TBF __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))

/* word i = bf16(lo[i]) | bf16(hi[i]) << 16 for 16 lanes */
TBF static inline __m512i pairs16(__m512 lo, __m512 hi)
{
    static const uint16_t zip[32] = {0, 16, 1, 17, 2,  18, 3,  19, 4,  20, 5,  21, 6,  22, 7,  23,
                                     8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
    return _mm512_permutexvar_epi16(_mm512_loadu_si512(zip),
                                    (__m512i)_mm512_cvtne2ps_pbh(hi, lo));
}

static inline __mmask16 first16(int n)
{
    return n >= 16 ? 0xffff : n <= 0 ? 0 : (__mmask16)((1u << n) - 1);
}

TBF static void lanes_bf16_512(const float *x, int n, uint32_t *out)
{
    for (int y = 0; y < (n + 1) / 2; y++)
        for (int v = 0; v < QB; v += 16) {
            const __m512 lo = _mm512_loadu_ps(x + (size_t)2 * y * QB + v);
            const __m512 hi = 2 * y + 1 < n ? _mm512_loadu_ps(x + (size_t)(2 * y + 1) * QB + v)
                                            : _mm512_setzero_ps();
            _mm512_storeu_si512(out + (size_t)y * QB + v, pairs16(lo, hi));
        }
}

TBF static void kv_pair_bf16_512(const float *kx0, const float *kx1, const float *vx0,
                                 const float *vx1, int H, int hd, uint32_t *k0, uint32_t *k1,
                                 uint32_t *vp)
{
    const int hd2 = (hd + 1) / 2;
    for (int h = 0; h < H; h++) {
        for (int t = 0; t < 2; t++) {
            const float *x = t ? kx1 : kx0;
            uint32_t *k = (t ? k1 : k0) + (size_t)h * hd2;
            if (!x)
                continue;
            x += (size_t)h * hd;
            for (int d = 0; d < hd; d += 32) {
                const __m512 a = _mm512_maskz_loadu_ps(first16(hd - d), x + d);
                const __m512 b = _mm512_maskz_loadu_ps(first16(hd - d - 16), x + d + 16);
                _mm512_mask_storeu_epi32(k + d / 2, first16(hd2 - d / 2),
                                         (__m512i)_mm512_cvtne2ps_pbh(b, a));
            }
        }
        const float *v0 = vx0 + (size_t)h * hd;
        const float *v1 = vx1 ? vx1 + (size_t)h * hd : NULL;
        for (int d = 0; d < hd; d += 16) {
            const __mmask16 m = first16(hd - d);
            const __m512 lo = _mm512_maskz_loadu_ps(m, v0 + d);
            const __m512 hi = v1 ? _mm512_maskz_loadu_ps(m, v1 + d) : _mm512_setzero_ps();
            _mm512_mask_storeu_epi32(vp + (size_t)h * hd + d, m, pairs16(lo, hi));
        }
    }
}

/* tile_rows_512 with a word pair per step. Rows of 12: 24 accumulators, 2 B vectors and a
 * broadcast (27 registers). */
#define DROWS 12
TBF __attribute__((always_inline)) static inline void
dtile_rows_512(const uint32_t *a, ptrdiff_t ra, ptrdiff_t xa, const int R, const uint32_t *b,
               int X, float *c, const float *alpha)
{
    __m512 acc[DROWS][2];
#pragma GCC unroll 12
    for (int r = 0; r < R; r++)
        for (int v = 0; v < 2; v++)
            acc[r][v] = alpha ? _mm512_mul_ps(_mm512_loadu_ps(c + r * QB + 16 * v),
                                              _mm512_loadu_ps(alpha + 16 * v))
                              : _mm512_setzero_ps();
    for (int x = 0; x < X; x++, a += xa, b += QB) {
        const __m512bh b0 = (__m512bh)_mm512_loadu_si512(b);
        const __m512bh b1 = (__m512bh)_mm512_loadu_si512(b + 16);
#pragma GCC unroll 12
        for (int r = 0; r < R; r++) {
            const __m512bh s = (__m512bh)_mm512_set1_epi32((int)a[r * ra]);
            acc[r][0] = _mm512_dpbf16_ps(acc[r][0], s, b0);
            acc[r][1] = _mm512_dpbf16_ps(acc[r][1], s, b1);
        }
    }
#pragma GCC unroll 12
    for (int r = 0; r < R; r++)
        for (int v = 0; v < 2; v++)
            _mm512_storeu_ps(c + r * QB + 16 * v, acc[r][v]);
}

/* Rows of DROWS, then the last R % DROWS rows in one pass. */
TBF static void dtile_512(const uint32_t *a, ptrdiff_t ra, ptrdiff_t xa, int R, const uint32_t *b,
                          int X, float *c, const float *alpha, uint32_t *work)
{
    (void)work;
    int r = 0;
    for (; r + DROWS <= R; r += DROWS)
        dtile_rows_512(a + r * ra, ra, xa, DROWS, b, X, c + r * QB, alpha);
    a += r * ra, c += r * QB;
    switch (R - r) {
#define REST(N) case N: dtile_rows_512(a, ra, xa, N, b, X, c, alpha); break;
        REST(1) REST(2) REST(3) REST(4) REST(5) REST(6) REST(7) REST(8) REST(9) REST(10) REST(11)
#undef REST
    }
}

#ifdef KIME_AMX /* amx.h: GCC 11 and clang 12 know the tile intrinsics */
/* ---- x86: AMX-BF16 tiles (tdpbf16ps) ----------------------------------------------------- */
/* Where BF16 products run on AMX tiles (bgemm.h's kime_bgemm_amx: AMX-BF16 this process may
 * use, at the CPU's own avx512 level, unless KIME_BGEMM=avx512bf16) and the head dim is a
 * multiple of 32, both products run as tdpbf16ps: 16 x 16 FP32 tiles of 16 pairs a step, at 16
 * times vdpbf16ps's multiply-adds a cycle. With that to spare, the queries and the probabilities
 * go in as two bfloat16 terms each, x = hi + lo (hi = bf16(x), lo = bf16(x - hi): 16 significant
 * bits), two tile products into one sum: only the keys and values are rounded to bfloat16, so
 * this path moves answers less than the one-term paths. AMX sums an element's pairs with its own
 * rounding (not vdpbf16ps's), so these are AMX's own bits; a row's still do not depend on the
 * thread count or the batch (one order per element).
 *
 * Layout. Scores read k2 and q2 as they are: A tiles of 16 keys x 16 pairs (k2's rows), B tiles
 * of 16 pairs x 16 queries (q2's rows). The weighted values need the values' pairs with the dim
 * as the row: vt, per row of the call, [H][hd][n2] (n2 = the row's pair rows; the same words as
 * v2's [n2][H][hd]), so an A tile is 16 dims x the block's 16 pairs; B is p2 (16 pairs x 16
 * queries), its rows past the block's pairs zeroed. A row's last, partial key block goes through
 * a zero-padded copy (the item's pad, [hd][16]), so no tile multiplies another row's values; the
 * key rows past a block's end that the score tiles read (the next row's, or k2's slack after the
 * call's last key) only fill rows of S no one reads. */
#define KIME_ATTN_AMX 1
#define TAMXA __attribute__((target("amx-tile,amx-bf16,avx512f,avx512bw,avx512vl,avx512bf16")))

/* x - bf16(x), exact in FP32 */
TBF static inline __m512 residual16(__m512 x)
{
    const __m512i hi = _mm512_cvtepu16_epi32((__m256i)_mm512_cvtneps_pbh(x));
    return _mm512_sub_ps(x, _mm512_castsi512_ps(_mm512_slli_epi32(hi, 16)));
}

/* lanes_bf16_512 of the residuals: the lo terms of rows [0, n) of x ([n][QB]) */
TBF static void lanes_lo_512(const float *x, int n, uint32_t *out)
{
    for (int y = 0; y < (n + 1) / 2; y++)
        for (int v = 0; v < QB; v += 16) {
            const __m512 lo = residual16(_mm512_loadu_ps(x + (size_t)2 * y * QB + v));
            const __m512 hi = 2 * y + 1 < n
                                  ? residual16(_mm512_loadu_ps(x + (size_t)(2 * y + 1) * QB + v))
                                  : _mm512_setzero_ps();
            _mm512_storeu_si512(out + (size_t)y * QB + v, pairs16(lo, hi));
        }
}

/* S[r][0:QB] for the kn <= KB keys of the block (k: the first key's pairs, rows ra words apart)
 * and the queries' two terms q2, ql ([hd2][QB] each), hd2 a multiple of 16. Tiles: 0-3 S's
 * quarters, 4-5 keys 0-15 and 16-31, 6-7 a term's queries 0-15 and 16-31. */
TAMXA static void scores_amx(const uint32_t *k, ptrdiff_t ra, int kn, const uint32_t *q2,
                             const uint32_t *ql, int hd2, float *s)
{
    const size_t ka = (size_t)ra * 4, qs = QB * 4;
    _tile_zero(0);
    _tile_zero(1);
    if (kn > 16) {
        _tile_zero(2);
        _tile_zero(3);
    }
    for (int x = 0; x < hd2; x += 16) {
        _tile_loadd(4, k + x, ka);
        if (kn > 16)
            _tile_loadd(5, k + 16 * ra + x, ka);
        for (int t = 0; t < 2; t++) { /* hi, then lo */
            const uint32_t *q = (t ? ql : q2) + (size_t)x * QB;
            _tile_loadd(6, q, qs);
            _tile_loadd(7, q + 16, qs);
            _tile_dpbf16ps(0, 4, 6);
            _tile_dpbf16ps(1, 4, 7);
            if (kn > 16) {
                _tile_dpbf16ps(2, 5, 6);
                _tile_dpbf16ps(3, 5, 7);
            }
        }
    }
    _tile_stored(0, s, qs);
    _tile_stored(1, s + 16, qs);
    if (kn > 16) {
        _tile_stored(2, s + 16 * QB, qs);
        _tile_stored(3, s + 16 * QB + 16, qs);
    }
}

/* OT = alpha OT + the block's weighted values, hd a multiple of 32: vt the block's first pair in
 * dim 0's line of the head, lines rd words apart; the probabilities' two terms p2, pl [16][QB],
 * their first kn2 rows set (the rest are zeroed here); pad: [hd][16] words of scratch. Tiles:
 * 0-3 two dims' blocks of OT by both query halves, 4-5 their values, 6-7 a term's query
 * halves. */
TAMXA static void values_amx(const uint32_t *vt, ptrdiff_t rd, int kn2, int hd, uint32_t *p2,
                             uint32_t *pl, uint32_t *pad, float *ot, const float *alpha)
{
    if (kn2 < 16) {
        memset(p2 + (size_t)kn2 * QB, 0, (size_t)(16 - kn2) * QB * sizeof *p2);
        memset(pl + (size_t)kn2 * QB, 0, (size_t)(16 - kn2) * QB * sizeof *pl);
        const __mmask16 m = (__mmask16)((1u << kn2) - 1);
        for (int d = 0; d < hd; d++)
            _mm512_storeu_si512(pad + (size_t)d * 16,
                                _mm512_maskz_loadu_epi32(m, vt + (size_t)d * rd));
        vt = pad, rd = 16;
    }
    const __m512 a0 = _mm512_loadu_ps(alpha), a1 = _mm512_loadu_ps(alpha + 16);
    for (int d = 0; d < hd; d++) {
        float *o = ot + (size_t)d * QB;
        _mm512_storeu_ps(o, _mm512_mul_ps(_mm512_loadu_ps(o), a0));
        _mm512_storeu_ps(o + 16, _mm512_mul_ps(_mm512_loadu_ps(o + 16), a1));
    }
    const size_t vs = (size_t)rd * 4, os = QB * 4;
    for (int d0 = 0; d0 < hd; d0 += 32) {
        float *o0 = ot + (size_t)d0 * QB, *o1 = o0 + 16 * QB;
        _tile_loadd(0, o0, os);
        _tile_loadd(1, o0 + 16, os);
        _tile_loadd(2, o1, os);
        _tile_loadd(3, o1 + 16, os);
        _tile_loadd(4, vt + (size_t)d0 * rd, vs);
        _tile_loadd(5, vt + (size_t)(d0 + 16) * rd, vs);
        for (int t = 0; t < 2; t++) { /* hi, then lo */
            const uint32_t *p = t ? pl : p2;
            _tile_loadd(6, p, os);
            _tile_loadd(7, p + 16, os);
            _tile_dpbf16ps(0, 4, 6);
            _tile_dpbf16ps(1, 4, 7);
            _tile_dpbf16ps(2, 5, 6);
            _tile_dpbf16ps(3, 5, 7);
        }
        _tile_stored(0, o0, os);
        _tile_stored(1, o0 + 16, os);
        _tile_stored(2, o1, os);
        _tile_stored(3, o1 + 16, os);
    }
}

#endif /* KIME_AMX */
#endif /* KIME_ATTN_DPBF16 */

#ifdef KIME_NEON
/* ---- aarch64: NEON FMAs ----------------------------------------------------------------- */

/* 4 words bf16(lo[i]) | bf16(hi[i]) << 16 */
static inline uint32x4_t pairs4_neon(float32x4_t lo, float32x4_t hi)
{
    return vorrq_u32(vmovl_u16(round_bf16x4(lo)), vshlq_n_u32(vmovl_u16(round_bf16x4(hi)), 16));
}

static void lanes_bf16_neon(const float *x, int n, uint32_t *out)
{
    const float32x4_t z = vdupq_n_f32(0.0f);
    for (int y = 0; y < (n + 1) / 2; y++) {
        const float *lo = x + (size_t)2 * y * QB, *hi = lo + QB;
        const int has = 2 * y + 1 < n;
        for (int v = 0; v < QB; v += 4)
            vst1q_u32(out + (size_t)y * QB + v,
                      pairs4_neon(vld1q_f32(lo + v), has ? vld1q_f32(hi + v) : z));
    }
}

static void kv_pair_bf16_neon(const float *kx0, const float *kx1, const float *vx0,
                              const float *vx1, int H, int hd, uint32_t *k0, uint32_t *k1,
                              uint32_t *vp)
{
    const int hd2 = (hd + 1) / 2;
    const float32x4_t z = vdupq_n_f32(0.0f);
    for (int h = 0; h < H; h++) {
        for (int t = 0; t < 2; t++) {
            const float *k = t ? kx1 : kx0;
            if (!k)
                continue;
            k += (size_t)h * hd;
            uint32_t *out = (t ? k1 : k0) + (size_t)h * hd2;
            int x = 0;
            for (; 2 * x + 8 <= hd; x += 4) {
                const float32x4x2_t d = vld2q_f32(k + 2 * x); /* even dims, odd dims */
                vst1q_u32(out + x, pairs4_neon(d.val[0], d.val[1]));
            }
            for (; x < hd2; x++)
                out[x] = pair_c(k[2 * x], 2 * x + 1 < hd ? k[2 * x + 1] : 0);
        }
        const float *v0 = vx0 + (size_t)h * hd;
        const float *v1 = vx1 ? vx1 + (size_t)h * hd : NULL;
        uint32_t *out = vp + (size_t)h * hd;
        int d = 0;
        for (; d + 4 <= hd; d += 4)
            vst1q_u32(out + d, pairs4_neon(vld1q_f32(v0 + d), v1 ? vld1q_f32(v1 + d) : z));
        for (; d < hd; d++)
            out[d] = pair_c(v0[d], v1 ? v1[d] : 0);
    }
}

/* ptile_rows_256 on NEON: 16 lanes, R <= 4 rows (16 accumulators, 8 B halves, 2 A halves) */
__attribute__((always_inline)) static inline void
ptile_rows_neon(const uint32_t *a, ptrdiff_t ra, ptrdiff_t xa, const int R, const uint32_t *b,
                int X, float *c, const float *alpha)
{
    const uint32x4_t high = vdupq_n_u32(0xffff0000u);
    float32x4_t acc[4][4];
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
        for (int v = 0; v < 4; v++)
            acc[r][v] = alpha ? vmulq_f32(vld1q_f32(c + r * QB + 4 * v), vld1q_f32(alpha + 4 * v))
                              : vdupq_n_f32(0.0f);
    for (int x = 0; x < X; x++, a += xa, b += QB) {
        float32x4_t bh[4], bl[4];
        for (int v = 0; v < 4; v++) {
            const uint32x4_t w = vld1q_u32(b + 4 * v);
            bh[v] = vreinterpretq_f32_u32(vandq_u32(w, high));
            bl[v] = vreinterpretq_f32_u32(vshlq_n_u32(w, 16));
        }
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) {
            const uint32x4_t s = vld1q_dup_u32(a + r * ra);
            const float32x4_t sh = vreinterpretq_f32_u32(vandq_u32(s, high));
            const float32x4_t sl = vreinterpretq_f32_u32(vshlq_n_u32(s, 16));
            for (int v = 0; v < 4; v++) /* vfmaq_f32(acc, x, y) = acc + x * y, fused */
                acc[r][v] = vfmaq_f32(vfmaq_f32(acc[r][v], sh, bh[v]), sl, bl[v]);
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
        for (int v = 0; v < 4; v++)
            vst1q_f32(c + r * QB + 4 * v, acc[r][v]);
}

static void ptile_neon(const uint32_t *a, ptrdiff_t ra, ptrdiff_t xa, int R, const uint32_t *b,
                       int X, float *c, const float *alpha, uint32_t *work)
{
    (void)work;
    for (int h = 0; h < QB; h += 16) {
        const float *al = alpha ? alpha + h : NULL;
        int r = 0;
        for (; r + 4 <= R; r += 4)
            ptile_rows_neon(a + r * ra, ra, xa, 4, b + h, X, c + r * QB + h, al);
        switch (R - r) { /* the last rows, in one pass */
        case 3: ptile_rows_neon(a + r * ra, ra, xa, 3, b + h, X, c + r * QB + h, al); break;
        case 2: ptile_rows_neon(a + r * ra, ra, xa, 2, b + h, X, c + r * QB + h, al); break;
        case 1: ptile_rows_neon(a + r * ra, ra, xa, 1, b + h, X, c + r * QB + h, al); break;
        }
    }
}
#endif /* KIME_NEON */

#endif
