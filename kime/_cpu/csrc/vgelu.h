/* The exact-erf GELU, vectorised, shared by the FP32 and INT8 GEMM epilogues (one copy, so the
 * two precisions' GELU is the same function). On x86 include after <immintrin.h> and the
 * T512/T256 target macros; on aarch64 it brings <arm_neon.h> itself. Everything is static
 * inline, compiled into each file that uses it. The three vector widths (erf16, erf8, erf4) run
 * the same IEEE operations on the same values in the same order, so they give the same bits. */
#ifndef KIME_VGELU_H
#define KIME_VGELU_H

#define S16(v) _mm512_set1_ps(v)
#define S8(v) _mm256_set1_ps(v)
#define VGELU_SQRT1_2 0.70710678118654752440f

/* ---- vector erf ---------------------------------------------------------------------------
 * max error 1.1 ulp over all floats (checked exhaustively against double erf). |x| < 1:
 * x + x P(x^2). 1 <= |x| < 4: 1 - exp(-r(|x|)) with r a polynomial fit of -log(erfc), and
 * 1 - 2^n (1 + s) computed as (1 - 2^n) - 2^n s to save a rounding. |x| >= 4 rounds to 1.
 * Coefficients: Lawson minimax fits, highest degree first. */
static const float ERF_P[7] = {7.854098658e-05f, -8.010261226e-04f, 5.188334733e-03f,
                               -2.685381472e-02f, 1.128358543e-01f, -3.761262596e-01f,
                               1.283791661e-01f};
static const float ERF_R[8] = {2.169771687e-05f, -4.414739087e-04f, 4.205291159e-03f,
                               -2.521035820e-02f, 1.084221303e-01f, 6.332163811e-01f,
                               1.129580379e+00f, -1.884714293e-04f};
static const float EXPM1_Q[5] = {1.381412381e-03f, 8.368900977e-03f, 4.166840762e-02f,
                                 1.666651964e-01f, 4.999999404e-01f}; /* expm1 f = f + f^2 Q(f) */
#define LN2_HI 0.693359375f
#define LN2_LO (-2.12194440e-4f)
#define LOG2E 1.44269504089f

#if defined(__x86_64__) || defined(__i386__)
T512 static inline __m512 erf16(__m512 x)
{
    __m512 a = _mm512_min_ps(_mm512_abs_ps(x), S16(4.0f)), z = _mm512_mul_ps(a, a);
    __m512 p = S16(ERF_P[0]), r = S16(ERF_R[0]), q = S16(EXPM1_Q[0]);
    for (int i = 1; i < 7; i++)
        p = _mm512_fmadd_ps(p, z, S16(ERF_P[i]));
    for (int i = 1; i < 8; i++)
        r = _mm512_fmadd_ps(r, a, S16(ERF_R[i]));
    __m512 small = _mm512_fmadd_ps(a, p, a);
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(r, S16(-LOG2E)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 f = _mm512_fnmadd_ps(n, S16(LN2_LO), _mm512_fnmsub_ps(n, S16(LN2_HI), r));
    for (int i = 1; i < 5; i++)
        q = _mm512_fmadd_ps(q, f, S16(EXPM1_Q[i]));
    __m512 s = _mm512_fmadd_ps(_mm512_mul_ps(f, f), q, f), p2 = _mm512_scalef_ps(S16(1.0f), n);
    __m512 big = _mm512_fnmadd_ps(s, p2, _mm512_sub_ps(S16(1.0f), p2));
    __m512 y = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(a, S16(1.0f), _CMP_LT_OQ), big, small);
    return _mm512_castsi512_ps(_mm512_ternarylogic_epi32( /* copysign(y, x) */
        _mm512_castps_si512(y), _mm512_castps_si512(x), _mm512_set1_epi32(0x7fffffff), 0xe4));
}

T512 static inline __m512 gelu16(__m512 x)
{
    return _mm512_mul_ps(_mm512_mul_ps(x, S16(0.5f)),
                         _mm512_add_ps(S16(1.0f), erf16(_mm512_mul_ps(x, S16(VGELU_SQRT1_2)))));
}

T256 static inline __m256 erf8(__m256 x)
{
    __m256 sign = _mm256_and_ps(x, S8(-0.0f));
    __m256 a = _mm256_min_ps(_mm256_andnot_ps(S8(-0.0f), x), S8(4.0f)), z = _mm256_mul_ps(a, a);
    __m256 p = S8(ERF_P[0]), r = S8(ERF_R[0]), q = S8(EXPM1_Q[0]);
    for (int i = 1; i < 7; i++)
        p = _mm256_fmadd_ps(p, z, S8(ERF_P[i]));
    for (int i = 1; i < 8; i++)
        r = _mm256_fmadd_ps(r, a, S8(ERF_R[i]));
    __m256 small = _mm256_fmadd_ps(a, p, a);
    __m256 n = _mm256_round_ps(_mm256_mul_ps(r, S8(-LOG2E)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 f = _mm256_fnmadd_ps(n, S8(LN2_LO), _mm256_fnmsub_ps(n, S8(LN2_HI), r));
    for (int i = 1; i < 5; i++)
        q = _mm256_fmadd_ps(q, f, S8(EXPM1_Q[i]));
    __m256 s = _mm256_fmadd_ps(_mm256_mul_ps(f, f), q, f);
    __m256 p2 = _mm256_castsi256_ps( /* 2^n, n in [-26, -1] */
        _mm256_add_epi32(_mm256_castps_si256(S8(1.0f)),
                         _mm256_slli_epi32(_mm256_cvtps_epi32(n), 23)));
    __m256 big = _mm256_fnmadd_ps(s, p2, _mm256_sub_ps(S8(1.0f), p2));
    __m256 y = _mm256_blendv_ps(big, small, _mm256_cmp_ps(a, S8(1.0f), _CMP_LT_OQ));
    return _mm256_or_ps(y, sign);
}

T256 static inline __m256 gelu8(__m256 x)
{
    return _mm256_mul_ps(_mm256_mul_ps(x, S8(0.5f)),
                         _mm256_add_ps(S8(1.0f), erf8(_mm256_mul_ps(x, S8(VGELU_SQRT1_2)))));
}
#endif /* x86 */

#if defined(__aarch64__)
#include <arm_neon.h>
#define S4(v) vdupq_n_f32(v)

/* erf8 in NEON, step for step: fnmsub(n, c, r) = -(n c) - r is -fma(n, c, r) (round to nearest
 * is symmetric), fnmadd(n, c, t) = t - n c is vfms, and vrndn rounds to nearest even as
 * _MM_FROUND_TO_NEAREST_INT. */
static inline float32x4_t erf4(float32x4_t x)
{
    const uint32x4_t sign = vandq_u32(vreinterpretq_u32_f32(x), vdupq_n_u32(0x80000000u));
    float32x4_t a = vminq_f32(vabsq_f32(x), S4(4.0f)), z = vmulq_f32(a, a);
    float32x4_t p = S4(ERF_P[0]), r = S4(ERF_R[0]), q = S4(EXPM1_Q[0]);
    for (int i = 1; i < 7; i++)
        p = vfmaq_f32(S4(ERF_P[i]), p, z);
    for (int i = 1; i < 8; i++)
        r = vfmaq_f32(S4(ERF_R[i]), r, a);
    float32x4_t small = vfmaq_f32(a, a, p);
    float32x4_t n = vrndnq_f32(vmulq_f32(r, S4(-LOG2E)));
    float32x4_t f = vfmsq_f32(vnegq_f32(vfmaq_f32(r, n, S4(LN2_HI))), n, S4(LN2_LO));
    for (int i = 1; i < 5; i++)
        q = vfmaq_f32(S4(EXPM1_Q[i]), q, f);
    float32x4_t s = vfmaq_f32(f, vmulq_f32(f, f), q);
    float32x4_t p2 = vreinterpretq_f32_s32( /* 2^n, n in [-26, -1] */
        vaddq_s32(vreinterpretq_s32_f32(S4(1.0f)), vshlq_n_s32(vcvtnq_s32_f32(n), 23)));
    float32x4_t big = vfmsq_f32(vsubq_f32(S4(1.0f), p2), s, p2);
    float32x4_t y = vbslq_f32(vcltq_f32(a, S4(1.0f)), small, big);
    return vreinterpretq_f32_u32(vorrq_u32(vreinterpretq_u32_f32(y), sign));
}

static inline float32x4_t gelu4(float32x4_t x)
{
    return vmulq_f32(vmulq_f32(x, S4(0.5f)),
                     vaddq_f32(S4(1.0f), erf4(vmulq_f32(x, S4(VGELU_SQRT1_2)))));
}
#endif /* aarch64 */

#endif
