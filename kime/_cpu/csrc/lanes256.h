/* AVX2 loads and stores of a vector's first n lanes, shared by the FP32 and INT8 GEMM epilogues
 * (gemm.c's store256, qgemm.c's qstore256). A whole vector (n >= 8) takes a plain load or store:
 * AMD's vmaskmovps store is microcoded, many times a plain store's cost, and the epilogues ran
 * one on every row of every tile. The lanes moved are the same either way, so the bits are.
 * Include after <immintrin.h>, in an x86 build. */
#ifndef KIME_LANES256_H
#define KIME_LANES256_H

#define KIME_T256_LANES __attribute__((target("avx2")))

/* The mask of lanes [0, n). */
KIME_T256_LANES static inline __m256i lanes8(int n)
{
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/* Lanes [0, n) of p (k = lanes8(n)), the others 0. */
KIME_T256_LANES static inline __m256 load8(const float *p, int n, __m256i k)
{
    return n >= 8 ? _mm256_loadu_ps(p) : _mm256_maskload_ps(p, k);
}

/* load8, or zeros where there is no p (a GEMM without bias). */
KIME_T256_LANES static inline __m256 maybe_load8(const float *p, int n, __m256i k)
{
    return p ? load8(p, n, k) : _mm256_setzero_ps();
}

/* Lanes [0, n) of x into p; p's other floats untouched. */
KIME_T256_LANES static inline void store8(float *p, int n, __m256i k, __m256 x)
{
    if (n >= 8)
        _mm256_storeu_ps(p, x);
    else
        _mm256_maskstore_ps(p, k, x);
}

#endif
