/* qgemm's plain-NEON INT8 micro-kernel (every aarch64 CPU; the sdot and smmla sets are in
 * qgemm_arm64.h): 4 x 8 tiles, smull/smlal into s16, then sadalp into s32. qgemm_arm64.h's
 * header comment says why that is exact.
 *
 * A file of its own for its build flags: setup.py's CSRC_FLAGS compiles it on aarch64 with
 * -fno-schedule-insns, because GCC 12's pre-allocation scheduler hoists all 16 products of a
 * k-step ahead of their adds and spills. The flag changes only the instruction order, never a
 * result (integer arithmetic), and compiled into qgemm.c it would lengthen the sdot and smmla
 * k-loops instead. Empty on other machines. */
#if defined(__aarch64__)
#include <arm_neon.h>
#include <stdint.h>

#include "qgemm.h"

/* acc pair (lo, hi) of 4 columns: 8 s16 products (2 columns x 4 k) folded pairwise into s32 */
#define NQ_ACC(cl, ch, a8, b16)                                                                \
    do {                                                                                       \
        cl = vpadalq_s16(cl, vmull_s8(vget_low_s8(a8), vget_low_s8(b16)));                     \
        ch = vpadalq_s16(ch, vmull_high_s8(a8, b16));                                          \
    } while (0)

void
kime_qkernel_neon(int m, int K4, const uint8_t *a8, const int8_t *b, int32_t *acc)
{
    (void)m; /* rows past m are zero in the packed A: the tile always runs whole */
    int32x4_t c[KIME_QNEON_MR][4];
    for (int i = 0; i < KIME_QNEON_MR; i++)
        for (int v = 0; v < 4; v++)
            c[i][v] = vdupq_n_s32(0);
    const int8_t *a = (const int8_t *)a8;
    int g = 0;
    /* two k groups at a time: smull then smlal into one s16 lane (at most 2 * 127^2) */
    for (; g + 2 <= K4; g += 2, a += 2 * KIME_QNEON_MR * 4, b += 2 * KIME_QARM_NR * 4) {
        const int8x16_t b0 = vld1q_s8(b), b1 = vld1q_s8(b + 16);
        const int8x16_t e0 = vld1q_s8(b + 32), e1 = vld1q_s8(b + 48);
        for (int i = 0; i < KIME_QNEON_MR; i++) {
            /* row i's 4 k of each group, repeated in every lane (ld1r); A is 4-byte aligned */
            const int8x16_t x = vreinterpretq_s8_s32(vld1q_dup_s32((const int32_t *)a + i));
            const int8x16_t y = vreinterpretq_s8_s32(vld1q_dup_s32((const int32_t *)a + KIME_QNEON_MR + i));
            c[i][0] = vpadalq_s16(c[i][0], vmlal_s8(vmull_s8(vget_low_s8(x), vget_low_s8(b0)),
                                                    vget_low_s8(y), vget_low_s8(e0)));
            c[i][1] = vpadalq_s16(c[i][1], vmlal_high_s8(vmull_high_s8(x, b0), y, e0));
            c[i][2] = vpadalq_s16(c[i][2], vmlal_s8(vmull_s8(vget_low_s8(x), vget_low_s8(b1)),
                                                    vget_low_s8(y), vget_low_s8(e1)));
            c[i][3] = vpadalq_s16(c[i][3], vmlal_high_s8(vmull_high_s8(x, b1), y, e1));
        }
    }
    for (; g < K4; g++, a += KIME_QNEON_MR * 4, b += KIME_QARM_NR * 4) {
        const int8x16_t b0 = vld1q_s8(b), b1 = vld1q_s8(b + 16);
        for (int i = 0; i < KIME_QNEON_MR; i++) {
            const int8x16_t x = vreinterpretq_s8_s32(vld1q_dup_s32((const int32_t *)a + i));
            NQ_ACC(c[i][0], c[i][1], x, b0);
            NQ_ACC(c[i][2], c[i][3], x, b1);
        }
    }
    /* lanes hold (column, half of its 4 k) pairs: add neighbours into columns 0-3 and 4-7 */
    for (int i = 0; i < KIME_QNEON_MR; i++) {
        vst1q_s32(acc + i * KIME_QARM_NR, vpaddq_s32(c[i][0], c[i][1]));
        vst1q_s32(acc + i * KIME_QARM_NR + 4, vpaddq_s32(c[i][2], c[i][3]));
    }
}
#undef NQ_ACC
#endif
