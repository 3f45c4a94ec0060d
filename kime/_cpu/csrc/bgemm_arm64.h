/* The aarch64 BF16 kernel of bgemm.c (FEAT_BF16: bfmmla), included there under __aarch64__.
 *
 * Layout. bfmmla multiplies a 2 x 4 block of A by a 4 x 2 block of W^T into 2 x 2 FP32 sums, so
 * k comes in groups of 4 (K padded with zeros to a multiple of 4): per group, a W panel of
 * BNR = 8 columns holds its column pairs as 16 bytes each (column 2c's 4 bf16, then column
 * 2c + 1's), and an A sliver of BMR = 10 rows holds its row pairs the same way. In 32-bit words
 * that is 2 words per row (or column) per group, so bgemm.c's word counts (kw_of) and its driver
 * serve both architectures. A GEGLU panel holds 4 outputs: lanes 0-3 the "a" rows, 4-7 the gates.
 *
 * Kernel. 10 x 8 tiles as 5 x 4 blocks: 20 accumulators, 5 A and 4 B vectors per group, 20
 * bfmmla (12 rows, 24 accumulators, make GCC spill three of them per iteration). The blocks
 * are transposed back into rows when spilled, and epilogue_neon.h's store, the FP32 GEMM's,
 * applies the epilogue.
 *
 * Rounding. Both operands are rounded to bfloat16 exactly as on x86 (nearest even, NaN quiet,
 * float32 denormals to signed zero; the A side in NEON integer arithmetic, the same function).
 * The sums differ from x86's vdpbf16ps in their last bits: bfmmla adds each pair of products,
 * then that to the accumulator, rounding to odd (Arm's BFloat16 behaviours, FPCR ignored), where
 * x86 adds each product to the accumulator rounding to nearest. Both stay within FP32's sum
 * error, and both are fixed functions of the operands: one accumulator per element over all of
 * K in increasing k, so the bits do not depend on the tile, the batch or the thread count.
 */
#ifndef KIME_BGEMM_ARM64_H
#define KIME_BGEMM_ARM64_H

#include <arm_neon.h>

#include "epilogue_neon.h"

#define TB_ARM __attribute__((target("arch=armv8.2-a+bf16")))

_Static_assert(BMR == 10 && BNR == 8, "bgemm.c's tile is this kernel's");

/* Round rows [0, m) of A into a tile sliver (kw / 2 groups of 5 row pairs x 16 bytes); rows past
 * m and k past K are zero. `row` holds one row's bf16 (kw words). */
static void pack_a(const float *A, int lda, int m, int K, uint32_t *row32, uint32_t *dst32)
{
    const size_t groups = kw_of(K) / 2;
    uint16_t *row = (uint16_t *)row32, *dst = (uint16_t *)dst32;
    for (int i = 0; i < BMR; i++) {
        uint16_t *out = dst + (size_t)(i / 2) * 8 + (size_t)(i % 2) * 4;
        if (i >= m) {
            for (size_t g = 0; g < groups; g++)
                memset(out + g * BMR * 4, 0, 8);
            continue;
        }
        const float *x = A + (size_t)i * lda;
        int k = 0;
        for (; k + 4 <= K; k += 4)
            vst1_u16(row + k, round_bf16x4(vld1q_f32(x + k)));
        for (; k < (int)groups * 4; k++)
            row[k] = k < K ? round_bf16(x[k]) : 0;
        for (size_t g = 0; g < groups; g++)
            memcpy(out + g * BMR * 4, row + 4 * g, 8);
    }
}

TB_ARM static inline __attribute__((always_inline)) void
kernel_p(const int pairs, int groups, const uint16_t *a, const uint16_t *b, float *acc)
{
    float32x4_t c[BMR / 2][BNR / 2];
    for (int r = 0; r < pairs; r++)
        for (int j = 0; j < BNR / 2; j++)
            c[r][j] = vdupq_n_f32(0.0f);
    for (int g = 0; g < groups; g++, a += BMR * 4, b += BNR * 4) {
        const bfloat16x8_t b0 = vreinterpretq_bf16_u16(vld1q_u16(b));
        const bfloat16x8_t b1 = vreinterpretq_bf16_u16(vld1q_u16(b + 8));
        const bfloat16x8_t b2 = vreinterpretq_bf16_u16(vld1q_u16(b + 16));
        const bfloat16x8_t b3 = vreinterpretq_bf16_u16(vld1q_u16(b + 24));
        for (int r = 0; r < pairs; r++) {
            const bfloat16x8_t ar = vreinterpretq_bf16_u16(vld1q_u16(a + 8 * r));
            c[r][0] = vbfmmlaq_f32(c[r][0], ar, b0);
            c[r][1] = vbfmmlaq_f32(c[r][1], ar, b1);
            c[r][2] = vbfmmlaq_f32(c[r][2], ar, b2);
            c[r][3] = vbfmmlaq_f32(c[r][3], ar, b3);
        }
    }
    /* block (r, j) is [row 2r: cols 2j, 2j+1 | row 2r+1: cols 2j, 2j+1] */
    for (int r = 0; r < pairs; r++)
        for (int j = 0; j < BNR / 2; j += 2) {
            const float64x2_t x = vreinterpretq_f64_f32(c[r][j]);
            const float64x2_t y = vreinterpretq_f64_f32(c[r][j + 1]);
            vst1q_f32(acc + (2 * r) * BNR + 2 * j, vreinterpretq_f32_f64(vtrn1q_f64(x, y)));
            vst1q_f32(acc + (2 * r + 1) * BNR + 2 * j, vreinterpretq_f32_f64(vtrn2q_f64(x, y)));
        }
}

/* kw: 32-bit words per row, 2 per group of 4 k */
TB_ARM static void kernel(int m, int kw, const uint32_t *a, const uint32_t *b, float *acc)
{
    const uint16_t *a16 = (const uint16_t *)a, *b16 = (const uint16_t *)b;
    switch ((m + 1) / 2) { /* one register allocation per row pair count; a row past m is 0 */
    case 1: kernel_p(1, kw / 2, a16, b16, acc); break;
    case 2: kernel_p(2, kw / 2, a16, b16, acc); break;
    case 3: kernel_p(3, kw / 2, a16, b16, acc); break;
    case 4: kernel_p(4, kw / 2, a16, b16, acc); break;
    default: kernel_p(5, kw / 2, a16, b16, acc); break;
    }
}

static void store_tile(const float *acc, int m, int n0, int nv, const epilogue *e, float *C)
{
    kime_store_neon(acc, BNR, BNR / 2, m, n0, nv, e, C);
}

#endif
