/* The aarch64 INT8 kernel sets of qgemm.c, included there under __aarch64__ only.
 *
 * All three are signed (s8 x s8, no +128 offset, so no column-sum compensation) and share one
 * NEON quantization and one NEON store, so their outputs are the same bits, and the same bits as
 * x86's SIMD impls: the quantization is NumPy's (float32 multiply, nearest-even conversion,
 * clamp), the dequantization is ((float)acc * scale_a) * scale_w + bias in three roundings, the
 * GELU is vgelu.h's gelu4 and ReLU is x < 0 ? 0 : x (NaN and -0 kept, as max_ps(0, x)). Tiles are 8 columns wide, so a GEGLU panel holds
 * 4 outputs: lanes 0-3 their "a" rows, lanes 4-7 the gate rows.
 *
 *  - neon (every aarch64 CPU): 4 x 8 tiles. smull/smlal multiply 8 s8 pairs into s16 (two k
 *    groups summed: 2 * 127 * 127 = 32258 fits), sadalp adds pairs into s32. Exact because
 *    quantized values are within +-127 (never -128) and padding is zero.
 *  - sdot (FEAT_DotProd, Neoverse N1/Graviton 2 on): 12 x 8 tiles, 24 accumulators, each
 *    vdotq_laneq_s32 adding 4 k of 4 columns for one row; qgemm.c's 4-k group layout as is.
 *  - smmla (FEAT_I8MM, Neoverse V1/N2/Graviton 3 on): 10 x 8 tiles as 5 x 4 blocks of 2 x 2;
 *    vmmlaq_s32 adds 8 k of a 2-row by 2-column block. Its own layout (qgemm.c's QL_MMLA):
 *    K padded to a multiple of 8; per 8-k group, B holds column pairs as 16 bytes (column 2c's
 *    8 k, then column 2c + 1's) and A holds row pairs the same way. The kernel transposes the
 *    2 x 2 blocks back into rows when it spills, so the store reads the tile as sdot's.
 * sdot and smmla are compiled with per-function targets (+dotprod, +i8mm): one binary for every
 * aarch64 CPU, and qgemm.c picks at run time from the ISA level and isa.c's HWCAP bits.
 */
#ifndef KIME_QGEMM_ARM64_H
#define KIME_QGEMM_ARM64_H

#include <arm_neon.h>

#include "epilogue_neon.h" /* kime_neon_load/store; vgelu.h's gelu4 (the x86 lanes' bits) */

#define TQDOT __attribute__((target("arch=armv8.2-a+dotprod")))
#define TQMM __attribute__((target("arch=armv8.2-a+i8mm")))

#define ANR KIME_QARM_NR /* columns of every aarch64 tile (qgemm.h) */
#define NMR KIME_QNEON_MR /* rows of the neon tile (qgemm.h) */
#define DMR 12  /* rows of the sdot tile */
#define MMR 10  /* rows of the smmla tile: 20 accumulators, 4 B and 5 A vectors fit 32 registers */

/* ---- quantization (every aarch64 impl) -------------------------------------------------- */

/* quant_portable's function in NEON; zero-pads q to a multiple of 8 (the smmla groups). */
static float quant_neon(const float *x, int K, int8_t *q)
{
    float32x4_t vmax = vdupq_n_f32(0.0f);
    int k = 0;
    for (; k + 4 <= K; k += 4)
        vmax = vmaxq_f32(vmax, vabsq_f32(vld1q_f32(x + k)));
    float amax = vmaxvq_f32(vmax);
    for (; k < K; k++) {
        const float a = fabsf(x[k]);
        amax = a > amax ? a : amax;
    }
    const float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
    const float32x4_t vinv = vdupq_n_f32(inv);
    const int32x4_t lo = vdupq_n_s32(-127), hi = vdupq_n_s32(127);
#define QN_ROUND(o) \
    vminq_s32(vmaxq_s32(vcvtnq_s32_f32(vmulq_f32(vld1q_f32(x + k + (o)), vinv)), lo), hi)
    for (k = 0; k + 16 <= K; k += 16) {
        const int16x8_t h0 = vcombine_s16(vmovn_s32(QN_ROUND(0)), vmovn_s32(QN_ROUND(4)));
        const int16x8_t h1 = vcombine_s16(vmovn_s32(QN_ROUND(8)), vmovn_s32(QN_ROUND(12)));
        vst1q_s8(q + k, vcombine_s8(vmovn_s16(h0), vmovn_s16(h1)));
    }
    for (; k + 4 <= K; k += 4) {
        const int32x4_t v = QN_ROUND(0);
        q[k + 0] = (int8_t)vgetq_lane_s32(v, 0);
        q[k + 1] = (int8_t)vgetq_lane_s32(v, 1);
        q[k + 2] = (int8_t)vgetq_lane_s32(v, 2);
        q[k + 3] = (int8_t)vgetq_lane_s32(v, 3);
    }
#undef QN_ROUND
    for (; k < K; k++) { /* the lanes' rounding: fcvtns, nearest even */
        const int r = (int)vcvtns_s32_f32(x[k] * inv);
        q[k] = (int8_t)(r > 127 ? 127 : r < -127 ? -127 : r);
    }
    for (k = K; k < (K + 7) / 8 * 8; k++)
        q[k] = 0;
    return amax / 127.0f;
}

/* ---- neon: 4 x 8, smull/smlal + sadalp: qgemm_neon.c, a file of its own (its build flags) ---- */

#define qkernel_neon kime_qkernel_neon

/* ---- sdot: 12 x 8 ------------------------------------------------------------------------- */

/* rows 4r .. 4r + 3 of the tile from A vector `av`, when the tile has that many row quads */
#define SD_QUAD(r, av)                                                                         \
    if (quads > (r)) {                                                                         \
        c0[4 * (r) + 0] = vdotq_laneq_s32(c0[4 * (r) + 0], b0, av, 0);                         \
        c1[4 * (r) + 0] = vdotq_laneq_s32(c1[4 * (r) + 0], b1, av, 0);                         \
        c0[4 * (r) + 1] = vdotq_laneq_s32(c0[4 * (r) + 1], b0, av, 1);                         \
        c1[4 * (r) + 1] = vdotq_laneq_s32(c1[4 * (r) + 1], b1, av, 1);                         \
        c0[4 * (r) + 2] = vdotq_laneq_s32(c0[4 * (r) + 2], b0, av, 2);                         \
        c1[4 * (r) + 2] = vdotq_laneq_s32(c1[4 * (r) + 2], b1, av, 2);                         \
        c0[4 * (r) + 3] = vdotq_laneq_s32(c0[4 * (r) + 3], b0, av, 3);                         \
        c1[4 * (r) + 3] = vdotq_laneq_s32(c1[4 * (r) + 3], b1, av, 3);                         \
    }

TQDOT static inline __attribute__((always_inline)) void
qkernel_sdot_q(const int quads, int K4, const int8_t *a, const int8_t *b, int32_t *acc)
{
    int32x4_t c0[DMR], c1[DMR];
    for (int i = 0; i < 4 * quads; i++)
        c0[i] = c1[i] = vdupq_n_s32(0);
    for (int g = 0; g < K4; g++, a += DMR * 4, b += ANR * 4) {
        const int8x16_t b0 = vld1q_s8(b), b1 = vld1q_s8(b + 16);
        const int8x16_t a0 = vld1q_s8(a);
        SD_QUAD(0, a0)
        if (quads > 1) {
            const int8x16_t a1 = vld1q_s8(a + 16);
            SD_QUAD(1, a1)
        }
        if (quads > 2) {
            const int8x16_t a2 = vld1q_s8(a + 32);
            SD_QUAD(2, a2)
        }
    }
    for (int i = 0; i < 4 * quads; i++) {
        vst1q_s32(acc + i * ANR, c0[i]);
        vst1q_s32(acc + i * ANR + 4, c1[i]);
    }
}
#undef SD_QUAD

TQDOT static void qkernel_sdot(int m, int K4, const uint8_t *a, const int8_t *b, int32_t *acc)
{
    const int8_t *sa = (const int8_t *)a;
    switch ((m + 3) / 4) { /* one register allocation per quad count; rows past m are zero */
    case 1: qkernel_sdot_q(1, K4, sa, b, acc); break;
    case 2: qkernel_sdot_q(2, K4, sa, b, acc); break;
    default: qkernel_sdot_q(3, K4, sa, b, acc); break;
    }
}

/* ---- smmla: 10 x 8 as 5 x 4 blocks of 2 x 2 ------------------------------------------------
 * (12 rows would need 24 accumulators beside 4 B and 6 A vectors, and GCC, loading the A
 * vectors early, spills three accumulators per iteration) */

TQMM static inline __attribute__((always_inline)) void
qkernel_smmla_p(const int pairs, int K8, const int8_t *a, const int8_t *b, int32_t *acc)
{
    int32x4_t c[MMR / 2][ANR / 2];
    for (int r = 0; r < pairs; r++)
        for (int j = 0; j < ANR / 2; j++)
            c[r][j] = vdupq_n_s32(0);
    for (int g = 0; g < K8; g++, a += MMR * 8, b += ANR * 8) {
        const int8x16_t b0 = vld1q_s8(b), b1 = vld1q_s8(b + 16);
        const int8x16_t b2 = vld1q_s8(b + 32), b3 = vld1q_s8(b + 48);
        for (int r = 0; r < pairs; r++) {
            const int8x16_t ar = vld1q_s8(a + 16 * r);
            c[r][0] = vmmlaq_s32(c[r][0], ar, b0);
            c[r][1] = vmmlaq_s32(c[r][1], ar, b1);
            c[r][2] = vmmlaq_s32(c[r][2], ar, b2);
            c[r][3] = vmmlaq_s32(c[r][3], ar, b3);
        }
    }
    /* block (r, j) is [row 2r: col 2j, 2j+1 | row 2r+1: col 2j, 2j+1]; 64-bit transposes of two
     * neighbouring blocks give 4 columns of each row */
    for (int r = 0; r < pairs; r++)
        for (int j = 0; j < ANR / 2; j += 2) {
            const int64x2_t x = vreinterpretq_s64_s32(c[r][j]);
            const int64x2_t y = vreinterpretq_s64_s32(c[r][j + 1]);
            vst1q_s32(acc + (2 * r) * ANR + 2 * j, vreinterpretq_s32_s64(vtrn1q_s64(x, y)));
            vst1q_s32(acc + (2 * r + 1) * ANR + 2 * j, vreinterpretq_s32_s64(vtrn2q_s64(x, y)));
        }
}

/* K4 counts 4-k groups; the QL_MMLA layout pads it to even */
TQMM static void qkernel_smmla(int m, int K4, const uint8_t *a, const int8_t *b, int32_t *acc)
{
    const int8_t *sa = (const int8_t *)a;
    switch ((m + 1) / 2) { /* one register allocation per row pair count; a row past m is 0 */
    case 1: qkernel_smmla_p(1, K4 / 2, sa, b, acc); break;
    case 2: qkernel_smmla_p(2, K4 / 2, sa, b, acc); break;
    case 3: qkernel_smmla_p(3, K4 / 2, sa, b, acc); break;
    case 4: qkernel_smmla_p(4, K4 / 2, sa, b, acc); break;
    default: qkernel_smmla_p(5, K4 / 2, sa, b, acc); break;
    }
}

/* ---- the store (every aarch64 impl) -------------------------------------------------------- */

/* ((float)acc * sa) * sw + bias, three roundings (no fused multiply-add), as deq8 */
static inline float32x4_t qdeq4(const int32_t *acc, float32x4_t sa, float32x4_t sw,
                                float32x4_t bias)
{
    return vaddq_f32(vmulq_f32(vmulq_f32(vcvtq_f32_s32(vld1q_s32(acc)), sa), sw), bias);
}

static void qstore_neon(const int32_t *acc, int m, int n0, int nv, const qepi *e,
                        const float *sa, const float *sw, const int32_t *comp, float *C)
{
    (void)comp;            /* signed sums: no compensation */
    (void)kime_store_neon; /* epilogue_neon.h's FP32 tile store: only its loads serve here */
    const float32x4_t zero = vdupq_n_f32(0.0f);
    if (e->epi == KIME_EPI_GEGLU) {
        const float32x4_t ba = e->bias ? kime_neon_load(e->bias + n0, nv) : zero;
        const float32x4_t bg = e->gbias ? kime_neon_load(e->gbias + n0, nv) : zero;
        const float32x4_t swa = vld1q_f32(sw), swg = vld1q_f32(sw + 4);
        for (int i = 0; i < m; i++, acc += ANR, C += e->ldc) {
            const float32x4_t s = vdupq_n_f32(sa[i]);
            const float32x4_t x = qdeq4(acc, s, swa, ba), g = qdeq4(acc + 4, s, swg, bg);
            kime_neon_store(C + n0, vmulq_f32(gelu4(x), g), nv);
        }
        return;
    }
    for (int v = 0; v < ANR / 4 && 4 * v < nv; v++) {
        const int left = nv - 4 * v, j0 = n0 + 4 * v;
        const float32x4_t bias = e->bias ? kime_neon_load(e->bias + j0, left) : zero;
        const float32x4_t w = vld1q_f32(sw + 4 * v);
        float *c = C + j0;
        for (int i = 0; i < m; i++, c += e->ldc) {
            float32x4_t x = qdeq4(acc + i * ANR + 4 * v, vdupq_n_f32(sa[i]), w, bias);
            switch (e->epi) {
            case KIME_EPI_ACCUM: x = vaddq_f32(kime_neon_load(c, left), x); break;
            case KIME_EPI_GELU: x = gelu4(x); break;
            case KIME_EPI_RELU: x = vbslq_f32(vcltzq_f32(x), zero, x); break;
            }
            kime_neon_store(c, x, left);
        }
    }
}

#endif
