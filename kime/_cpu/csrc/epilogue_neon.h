/* The GEMM epilogue's NEON tile store (aarch64), for any kernel that leaves a tile of FP32 sums
 * in memory: the FP32 GEMM (gemm.c) and, where they want it, the INT8 and BF16 ones. It runs
 * the AVX2/AVX-512 stores' arithmetic (bias added, +0 when there is none; residual added; the
 * exact-erf GELU of vgelu.h; ReLU as x < 0 ? 0 : x, which keeps NaN and -0 as they do), so an
 * aarch64 epilogue gives the x86 bits for the same sums.
 *
 * NEON has no masked loads: a partial vector (an N tail) goes through a 4-float buffer. */
#ifndef KIME_EPILOGUE_NEON_H
#define KIME_EPILOGUE_NEON_H

#if defined(__aarch64__)
#include <arm_neon.h>
#include <string.h>

#include "epilogue512.h" /* the epilogue struct */
#include "vgelu.h"

/* Lanes [0, n) of p (n >= 4: a whole vector), the others 0. */
static inline float32x4_t kime_neon_load(const float *p, int n)
{
    if (n >= 4)
        return vld1q_f32(p);
    float t[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    memcpy(t, p, (size_t)n * sizeof(float));
    return vld1q_f32(t);
}

static inline void kime_neon_store(float *p, float32x4_t v, int n)
{
    if (n >= 4) {
        vst1q_f32(p, v);
        return;
    }
    float t[4];
    vst1q_f32(t, v);
    memcpy(p, t, (size_t)n * sizeof(float));
}

static inline float32x4_t kime_neon_bias(const float *b, int n)
{
    return b ? kime_neon_load(b, n) : vdupq_n_f32(0.0f);
}

/* Apply the epilogue to rows [0, m) of `acc` (row i at acc + i * ld, FP32) and store `nv` output
 * columns from column n0 into C's rows (stride e->ldc). A GEGLU tile holds output j's "a" sum in
 * lane j and its gate sum in lane j + half. Reads acc in whole vectors: ld and half are
 * multiples of 4 and the tile holds them. */
static void kime_store_neon(const float *acc, int ld, int half, int m, int n0, int nv,
                            const epilogue *e, float *C)
{
    for (int j = 0; j < nv; j += 4) {
        const int n = nv - j;
        const float32x4_t bias = kime_neon_bias(e->bias ? e->bias + n0 + j : NULL, n);
        float *c = C + n0 + j;
        if (e->epi == KIME_EPI_GEGLU) {
            const float32x4_t bg = kime_neon_bias(e->gbias ? e->gbias + n0 + j : NULL, n);
            for (int i = 0; i < m; i++, c += e->ldc) {
                float32x4_t x = vaddq_f32(vld1q_f32(acc + (size_t)i * ld + j), bias);
                float32x4_t g = vaddq_f32(vld1q_f32(acc + (size_t)i * ld + half + j), bg);
                kime_neon_store(c, vmulq_f32(gelu4(x), g), n);
            }
            continue;
        }
        for (int i = 0; i < m; i++, c += e->ldc) {
            float32x4_t x = vaddq_f32(vld1q_f32(acc + (size_t)i * ld + j), bias);
            switch (e->epi) {
            case KIME_EPI_ACCUM: x = vaddq_f32(kime_neon_load(c, n), x); break;
            case KIME_EPI_GELU: x = gelu4(x); break;
            case KIME_EPI_RELU: /* x < 0 ? 0 : x, as the x86 max(0, x) and the portable store */
                x = vbslq_f32(vcltzq_f32(x), vdupq_n_f32(0.0f), x);
                break;
            }
            kime_neon_store(c, x, n);
        }
    }
}
#endif /* __aarch64__ */

#endif
