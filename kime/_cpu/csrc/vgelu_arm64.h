/* The exact-erf GELU in NEON (aarch64), for the GEMM epilogues: vgelu.h's algorithm, operation
 * for operation (the same coefficients, fused multiply-adds where it fuses, nearest-even
 * rounding of n, 2^n built in the exponent bits), so a lane gives the bits of vgelu.h's gelu8
 * and gelu16. Include under __aarch64__ after <arm_neon.h>; everything is static inline.
 * NEON is the aarch64 baseline, so no target attribute is needed. */
#ifndef KIME_VGELU_ARM64_H
#define KIME_VGELU_ARM64_H

#include <arm_neon.h>

#define N4(v) vdupq_n_f32(v)

static const float ERF4_P[7] = {7.854098658e-05f, -8.010261226e-04f, 5.188334733e-03f,
                                -2.685381472e-02f, 1.128358543e-01f, -3.761262596e-01f,
                                1.283791661e-01f};
static const float ERF4_R[8] = {2.169771687e-05f, -4.414739087e-04f, 4.205291159e-03f,
                                -2.521035820e-02f, 1.084221303e-01f, 6.332163811e-01f,
                                1.129580379e+00f, -1.884714293e-04f};
static const float EXPM1_4Q[5] = {1.381412381e-03f, 8.368900977e-03f, 4.166840762e-02f,
                                  1.666651964e-01f, 4.999999404e-01f};

/* vfmaq_f32(c, a, b) = c + a * b, one rounding, as _mm256_fmadd_ps(a, b, c). */
static inline float32x4_t erf4(float32x4_t x)
{
    const uint32x4_t sign = vandq_u32(vreinterpretq_u32_f32(x), vdupq_n_u32(0x80000000u));
    float32x4_t a = vminq_f32(vabsq_f32(x), N4(4.0f)), z = vmulq_f32(a, a);
    float32x4_t p = N4(ERF4_P[0]), r = N4(ERF4_R[0]), q = N4(EXPM1_4Q[0]);
    for (int i = 1; i < 7; i++)
        p = vfmaq_f32(N4(ERF4_P[i]), p, z);
    for (int i = 1; i < 8; i++)
        r = vfmaq_f32(N4(ERF4_R[i]), r, a);
    const float32x4_t small = vfmaq_f32(a, a, p);
    const float32x4_t n = vrndnq_f32(vmulq_f32(r, N4(-1.44269504089f)));
    /* fnmsub(n, hi, r) = -(n hi) - r, then fnmadd(n, lo, t) = t - n lo */
    const float32x4_t t = vnegq_f32(vfmaq_f32(r, n, N4(0.693359375f)));
    const float32x4_t f = vfmsq_f32(t, n, N4(-2.12194440e-4f));
    for (int i = 1; i < 5; i++)
        q = vfmaq_f32(N4(EXPM1_4Q[i]), q, f);
    const float32x4_t s = vfmaq_f32(f, vmulq_f32(f, f), q);
    const float32x4_t p2 = vreinterpretq_f32_s32( /* 2^n, n in [-26, -1] */
        vaddq_s32(vreinterpretq_s32_f32(N4(1.0f)), vshlq_n_s32(vcvtnq_s32_f32(n), 23)));
    const float32x4_t big = vfmsq_f32(vsubq_f32(N4(1.0f), p2), s, p2);
    const float32x4_t y = vbslq_f32(vcltq_f32(a, N4(1.0f)), small, big);
    return vreinterpretq_f32_u32(vorrq_u32(vreinterpretq_u32_f32(y), sign));
}

static inline float32x4_t gelu4(float32x4_t x)
{
    return vmulq_f32(vmulq_f32(x, N4(0.5f)),
                     vaddq_f32(N4(1.0f), erf4(vmulq_f32(x, N4(0.70710678118654752440f)))));
}

#undef N4
#endif
