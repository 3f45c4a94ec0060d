/* float32 -> bfloat16 bits, the one rounding of every BF16 kernel (bgemm.c, attention_bf16.h):
 * nearest even on the top 16 bits, a NaN quietened (its top bits kept), a float32 denormal to a
 * zero of its sign. That is what x86's AVX512_BF16 conversions (vcvtne2ps2bf16) do, so the
 * integer versions here give their bits on any CPU: in C, in AVX2 (8 lanes) and in NEON (4). */
#ifndef KIME_BF16_H
#define KIME_BF16_H

#include <stdint.h>
#include <string.h>

static inline uint16_t round_bf16(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)(u >> 16 | 0x0040u);
    if (!(u & 0x7f800000u))
        u &= 0x80000000u;
    u += 0x7fffu + (u >> 16 & 1u);
    return (uint16_t)(u >> 16);
}

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

/* round_bf16 of 8 lanes, each result in its lane's low 16 bits (the high 16 zero) */
__attribute__((target("avx2"))) static inline __m256i round_bf16x8(__m256 x)
{
    const __m256i u = _mm256_castps_si256(x);
    const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)),
                                           _mm256_set1_epi32(0x7f800000));
    const __m256i den = _mm256_cmpeq_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7f800000)),
                                           _mm256_setzero_si256());
    const __m256i v = _mm256_blendv_epi8(u, _mm256_and_si256(u, _mm256_set1_epi32((int)0x80000000u)),
                                         den);
    const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(v, 16), _mm256_set1_epi32(1));
    const __m256i r = _mm256_srli_epi32(
        _mm256_add_epi32(_mm256_add_epi32(v, _mm256_set1_epi32(0x7fff)), odd), 16);
    const __m256i q = _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x40));
    return _mm256_blendv_epi8(r, q, nan);
}
#endif

#if defined(__aarch64__)
#include <arm_neon.h>

/* round_bf16 on 4 lanes, in integer NEON (no BF16 instruction: it runs on any aarch64) */
static inline uint16x4_t round_bf16x4(float32x4_t x)
{
    const uint32x4_t u = vreinterpretq_u32_f32(x);
    const uint32x4_t nan = vcgtq_u32(vandq_u32(u, vdupq_n_u32(0x7fffffffu)),
                                     vdupq_n_u32(0x7f800000u));
    const uint32x4_t den = vceqq_u32(vandq_u32(u, vdupq_n_u32(0x7f800000u)), vdupq_n_u32(0));
    const uint32x4_t v = vbslq_u32(den, vandq_u32(u, vdupq_n_u32(0x80000000u)), u);
    const uint32x4_t odd = vandq_u32(vshrq_n_u32(v, 16), vdupq_n_u32(1));
    const uint32x4_t r = vshrq_n_u32(vaddq_u32(vaddq_u32(v, vdupq_n_u32(0x7fffu)), odd), 16);
    const uint32x4_t q = vorrq_u32(vshrq_n_u32(u, 16), vdupq_n_u32(0x0040u));
    return vmovn_u32(vbslq_u32(nan, q, r));
}
#endif

#endif
