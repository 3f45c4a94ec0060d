/* A tile of A rows into a kernel's K-major sliver with AVX-512 (gemm.c, bgemm.c, qgemm.c;
 * attention.c's AMX value lines use its strided transpose).
 *
 * Every x86 GEMM kernel here reads A as a sliver: for each 32-bit unit g along K (a float, a
 * bfloat16 pair, four int8), the tile's mr rows side by side, dst[g * mr + i]. Gathering that
 * a unit at a time is mr scalar stores per unit at a stride, a store-bound loop that took 4-6%
 * of a W1 call on Zen 5 (perf). Here a caller puts 16 units of each of up to 16 rows in
 * registers, one row per vector, and put16 transposes them and stores each unit's mr words at
 * once. The words are moved, never computed, so the sliver's bits are those of the scalar code.
 */
#ifndef KIME_SLIVER512_H
#define KIME_SLIVER512_H

#include <immintrin.h>
#include <stdint.h>

#define TS512 __attribute__((target("avx512f")))

/* r[i] holds units [g0, g0 + 16) of row i (i < 16; rows past the tile's hold its padding).
 * Stores dst[g * ld + i] = r[i][g] for g < ng and i < mr (mr <= 16): the 16 x 16 transpose,
 * each unit's mr words at once. */
TS512 static inline __attribute__((always_inline)) void put16_strided(const __m512i r[16], int mr,
                                                                     int ng, uint32_t *dst,
                                                                     size_t ld)
{
    __m512i t[16], u[16];
    for (int i = 0; i < 16; i += 2) { /* pairs of rows, per 128-bit lane */
        t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
    }
    for (int m = 0; m < 16; m += 4) { /* u[m + c]: unit 4L + c of rows m..m+3 in lane L */
        u[m] = _mm512_unpacklo_epi64(t[m], t[m + 2]);
        u[m + 1] = _mm512_unpackhi_epi64(t[m], t[m + 2]);
        u[m + 2] = _mm512_unpacklo_epi64(t[m + 1], t[m + 3]);
        u[m + 3] = _mm512_unpackhi_epi64(t[m + 1], t[m + 3]);
    }
    const __mmask16 rows = (__mmask16)((1u << mr) - 1);
    for (int c = 0; c < 4; c++) { /* the 4 x 4 transpose of 128-bit lanes */
        const __m512i v0 = _mm512_shuffle_i32x4(u[c], u[4 + c], 0x44);
        const __m512i v1 = _mm512_shuffle_i32x4(u[c], u[4 + c], 0xee);
        const __m512i v2 = _mm512_shuffle_i32x4(u[8 + c], u[12 + c], 0x44);
        const __m512i v3 = _mm512_shuffle_i32x4(u[8 + c], u[12 + c], 0xee);
        const __m512i out[4] = {_mm512_shuffle_i32x4(v0, v2, 0x88),
                                _mm512_shuffle_i32x4(v0, v2, 0xdd),
                                _mm512_shuffle_i32x4(v1, v3, 0x88),
                                _mm512_shuffle_i32x4(v1, v3, 0xdd)};
        for (int L = 0; L < 4; L++)
            if (4 * L + c < ng)
                _mm512_mask_storeu_epi32(dst + (size_t)(4 * L + c) * ld, rows, out[L]);
    }
}

/* put16_strided into a sliver: dst[g * mr + i] = r[i][g] */
TS512 static inline __attribute__((always_inline)) void sliver_put16(const __m512i r[16], int mr,
                                                                    int ng, uint32_t *dst)
{
    put16_strided(r, mr, ng, dst, (size_t)mr);
}

#endif
