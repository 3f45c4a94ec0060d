/* The GEMM epilogue (kernels.h's kime_epilogue) and its AVX-512 tile store, shared by the FP32
 * GEMM (gemm.c) and the BF16 GEMM (bgemm.c): both accumulate a tile of FP32 sums, so one store
 * gives the two precisions the same bias, residual, GELU and GEGLU arithmetic.
 *
 * The struct is plain C. The store is compiled where the includer has already included
 * <immintrin.h>, defined the T512 target macro and included vgelu.h (an x86 build). */
#ifndef KIME_EPILOGUE512_H
#define KIME_EPILOGUE512_H

#include "kernels.h"

typedef struct {
    const float *bias, *gbias; /* gbias: the GEGLU gate half's bias (bias + N/2) */
    float *C;
    int ldc, epi;
} epilogue;

#if defined(T512) && defined(KIME_VGELU_H)
#define STORE512_NR 32 /* columns of an AVX-512 tile: the row stride of its spilled sums */

/* Apply the epilogue to rows [0, m) of the tile `acc` ([m][STORE512_NR] FP32, 64-B aligned) and
 * store `nv` output columns from column n0. A GEGLU tile holds 16 "a" sums in lanes 0-15 and the
 * matching gate sums in lanes 16-31. */
T512 static void store512(const float *acc, int m, int n0, int nv, const epilogue *e, float *C)
{
    if (e->epi == KIME_EPI_GEGLU) {
        __mmask16 k = nv >= 16 ? 0xffff : (__mmask16)((1u << nv) - 1);
        __m512 ba = e->bias ? _mm512_maskz_loadu_ps(k, e->bias + n0) : _mm512_setzero_ps();
        __m512 bg = e->gbias ? _mm512_maskz_loadu_ps(k, e->gbias + n0) : _mm512_setzero_ps();
        for (int i = 0; i < m; i++, acc += STORE512_NR, C += e->ldc) {
            __m512 x = _mm512_add_ps(_mm512_load_ps(acc), ba);
            __m512 g = _mm512_add_ps(_mm512_load_ps(acc + 16), bg);
            _mm512_mask_storeu_ps(C + n0, k, _mm512_mul_ps(gelu16(x), g));
        }
        return;
    }
    for (int v = 0; v < STORE512_NR / 16 && 16 * v < nv; v++) {
        int left = nv - 16 * v, j0 = n0 + 16 * v;
        __mmask16 k = left >= 16 ? 0xffff : (__mmask16)((1u << left) - 1);
        __m512 bias = e->bias ? _mm512_maskz_loadu_ps(k, e->bias + j0) : _mm512_setzero_ps();
        float *c = C + j0;
        for (int i = 0; i < m; i++, c += e->ldc) {
            __m512 x = _mm512_add_ps(_mm512_load_ps(acc + i * STORE512_NR + 16 * v), bias);
            switch (e->epi) {
            case KIME_EPI_ACCUM: x = _mm512_add_ps(_mm512_maskz_loadu_ps(k, c), x); break;
            case KIME_EPI_GELU: x = gelu16(x); break;
            case KIME_EPI_RELU: x = _mm512_max_ps(_mm512_setzero_ps(), x); break; /* NaN stays */
            }
            _mm512_mask_storeu_ps(c, k, x);
        }
    }
}
#endif

#endif
