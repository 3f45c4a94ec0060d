/* The GEMM epilogue's NEON tile store for aarch64: epilogue512.h's store512, lane for lane, for
 * tiles of FP32 sums `nr` columns wide (a multiple of 8). The BF16 GEMM (bgemm.c) stores its
 * tiles with it; an FP32 NEON GEMM that stores through it too gives both precisions the same
 * bias, residual, GELU (vgelu_arm64.h, vgelu.h's bits) and GEGLU arithmetic, as on x86:
 *   x = acc + bias;  ACCUM: C + x;  GELU: gelu(x);  RELU: max(0, x), NaN kept;
 *   GEGLU: gelu(a + bias_a) * (g + bias_g), the tile's lanes [0, nr/2) the a sums, [nr/2, nr)
 *   the matching gate sums.
 * Include under __aarch64__ after epilogue512.h (for the epilogue struct). */
#ifndef KIME_EPILOGUE_ARM64_H
#define KIME_EPILOGUE_ARM64_H

#include <arm_neon.h>
#include <string.h>

#include "vgelu_arm64.h"

/* The first n (1..4) floats at p, zeros after: the x86 stores' masked loads. */
static inline float32x4_t epi_load_part(const float *p, int n)
{
    if (n >= 4)
        return vld1q_f32(p);
    float t[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    memcpy(t, p, (size_t)n * sizeof(float));
    return vld1q_f32(t);
}

static inline void epi_store_part(float *p, float32x4_t v, int n)
{
    if (n >= 4) {
        vst1q_f32(p, v);
        return;
    }
    float t[4];
    vst1q_f32(t, v);
    memcpy(p, t, (size_t)n * sizeof(float));
}

/* Rows [0, m) of the tile acc ([m][nr] FP32), nv output columns from n0 (nv <= nr, or
 * <= nr / 2 for GEGLU). */
static void store_arm64(const float *acc, int nr, int m, int n0, int nv, const epilogue *e,
                        float *C)
{
    const float32x4_t zero = vdupq_n_f32(0.0f);
    if (e->epi == KIME_EPI_GEGLU) {
        const int half = nr / 2;
        for (int v = 0; 4 * v < nv; v++) {
            const int left = nv - 4 * v, j0 = n0 + 4 * v;
            const float32x4_t ba = e->bias ? epi_load_part(e->bias + j0, left) : zero;
            const float32x4_t bg = e->gbias ? epi_load_part(e->gbias + j0, left) : zero;
            const float *t = acc + 4 * v;
            float *c = C + j0;
            for (int i = 0; i < m; i++, t += nr, c += e->ldc) {
                const float32x4_t x = vaddq_f32(vld1q_f32(t), ba);
                const float32x4_t g = vaddq_f32(vld1q_f32(t + half), bg);
                epi_store_part(c, vmulq_f32(gelu4(x), g), left);
            }
        }
        return;
    }
    for (int v = 0; 4 * v < nv; v++) {
        const int left = nv - 4 * v, j0 = n0 + 4 * v;
        const float32x4_t bias = e->bias ? epi_load_part(e->bias + j0, left) : zero;
        const float *t = acc + 4 * v;
        float *c = C + j0;
        for (int i = 0; i < m; i++, t += nr, c += e->ldc) {
            float32x4_t x = vaddq_f32(vld1q_f32(t), bias);
            switch (e->epi) {
            case KIME_EPI_ACCUM: x = vaddq_f32(epi_load_part(c, left), x); break;
            case KIME_EPI_GELU: x = gelu4(x); break;
            case KIME_EPI_RELU: x = vmaxq_f32(zero, x); break;
            }
            epi_store_part(c, x, left);
        }
    }
}

#endif
