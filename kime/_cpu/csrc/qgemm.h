/* kime INT8 GEMM: C_f32[M, N] = dequant(A_q[M, K] W_q[N, K]^T) + epilogue (qgemm.c).
 *
 * Weights: per-output-channel symmetric INT8, quantized and packed once at load. Activations:
 * per-row symmetric INT8, quantized inside the kernel's A packing. INT32 accumulation, exact; the
 * dequantization (acc * scale_a[m] * scale_w[n]) and the epilogue (kernels.h's kime_epilogue)
 * are fused into the store. Both quantizations are the same function of a row x of length K:
 *   amax = max_k |x_k|;  inv = amax > 0 ? 127.0f / amax : 0;  q_k = clamp(rint(x_k * inv), +-127)
 *   scale = amax / 127.0f                               (every operation in float32)
 * so `A @ W^T ~= (q_a @ q_w^T) * scale_a[m] * scale_w[n]`. The INT32 sums are exact and the same
 * on every impl, so results are identical at any thread count and batch composition.
 * Limits: K <= 133143 (so that |sum| <= K * 127^2 fits int32); inputs must be finite (a NaN or
 * infinity in a row makes that row's quantization, and so its outputs, meaningless).
 */
#ifndef KIME_QGEMM_H
#define KIME_QGEMM_H

#include <stddef.h>
#include <stdint.h>

#include "kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The kernel sets ("impls"). The two AVX-VNNI ones are one 256-bit algorithm built twice: the
 * VEX vpdpbusd that AVX-VNNI CPUs run, and the EVEX encoding of the same instruction (AVX512-VL
 * + VNNI) so that CPUs without AVX-VNNI can test it; their packed buffers are the same. */
enum kime_qgemm_kind {
    KIME_QGEMM_PORTABLE = 0,
    KIME_QGEMM_AVX2 = 1,         /* vpmaddubsw + vpmaddwd, signed                              */
    KIME_QGEMM_VNNI512 = 2,      /* AVX512-VNNI zmm                                            */
    KIME_QGEMM_AVXVNNI = 3,      /* AVX-VNNI ymm (Alder Lake and later without AVX-512)        */
    KIME_QGEMM_AVXVNNI_EVEX = 4, /* the same kernel in EVEX: only when KIME_QGEMM asks for it  */
    KIME_QGEMM_NEON = 5,         /* aarch64: smull/smlal + sadalp, every aarch64 CPU           */
    KIME_QGEMM_SDOT = 6,         /* aarch64 FEAT_DotProd: sdot, 12 x 8 tiles                    */
    KIME_QGEMM_SMMLA = 7,        /* aarch64 FEAT_I8MM: smmla 2 x 8 x 2 blocks, 12 x 8 tiles     */
    KIME_QGEMM_AMX = 8           /* AMX-INT8 tdpbusd, 32 x 32 tiles (Sapphire Rapids and later) */
};

/* The impl `isa` runs: the best of amx (isa AVX512, the CPU's own level, with AMX-INT8 that the
 * OS lets this process use), vnni512 (isa AVX512 with AVX512-VNNI), avxvnni (isa AVX2 or above
 * with AVX-VNNI), avx2 (isa AVX2 or above) and portable. The KIME_QGEMM environment variable
 * ("amx", "vnni512", "avxvnni", "avx2", "portable"; read on every call, as KIME_ISA) caps it so
 * tests can force each impl; "avxvnni" on a CPU without AVX-VNNI but with AVX512-VL + VNNI runs the
 * EVEX twin. On aarch64 the impls are smmla (isa I8MM or above), sdot (isa DOTPROD or above),
 * neon (isa NEON or above) and portable, and KIME_QGEMM caps them by the names "smmla", "sdot",
 * "neon", "portable". A packed buffer is valid only for the impl it was packed for, so set it
 * before packing and leave it. */
int kime_qgemm_impl(int isa);
/* An `isa` argument of KIME_QGEMM_PINNED | impl runs that impl whatever KIME_QGEMM says at the
 * time: a loaded model pins its impl once (kime_qgemm_pin), so its packed weights and scratch
 * always meet the kernels they were made for. */
#define KIME_QGEMM_PINNED 0x100
int kime_qgemm_pin(int isa);
/* "portable", "avx2", "vnni512", "avxvnni", "avxvnni-evex", "neon", "sdot", "smmla", "amx";
 * "unknown" for anything else. */
const char *kime_qgemm_impl_name(int impl);

/* Bytes the packed form of an [N, K] weight needs for `isa` (int8 panels, scales, column sums). */
size_t kime_qgemm_packed_bytes(int isa, int N, int K, int geglu);
/* Quantize and pack W [N, K] (row-major, a torch Linear weight); geglu pairs rows [a; g] as the
 * FP32 GEMM does. `packed` should be 64-byte aligned (any alignment is correct). */
void kime_qgemm_pack(int isa, const float *W, int N, int K, int geglu, void *packed);
/* Scratch bytes for kime_qgemm / kime_qgemm_int32 with this K and thread count. */
size_t kime_qgemm_scratch_bytes(int isa, int K, int nthreads);
/* C = epilogue(dequant(q_a q_w^T) + bias) as kime_gemm (kernels.h): same arguments, A strided. */
void kime_qgemm(int isa, const float *A, int lda, int M, int K, int N, const void *packed,
                const float *bias, int epilogue, float *C, int ldc, void *scratch, int nthreads);
/* Test hook: the raw INT32 sums C[m, n] = sum_k q_a[m, k] q_w[n, k] (after the +128
 * compensation of the unsigned path), for the weight of N rows packed with `geglu`; columns in
 * W's row order (for geglu: the a half then the g half). */
void kime_qgemm_int32(int isa, const float *A, int lda, int M, int K, int N, const void *packed,
                      int geglu, int32_t *C, int ldc, void *scratch, int nthreads);

#if defined(__aarch64__)
/* aarch64 tiles: KIME_QARM_NR columns for every set; the neon set's rows. */
#define KIME_QARM_NR 8
#define KIME_QNEON_MR 4 /* 16 accumulators (6 rows spill under GCC 12) */

/* The neon set's micro-kernel (qgemm_neon.c): acc[KIME_QNEON_MR][KIME_QARM_NR] of one tile. */
void kime_qkernel_neon(int m, int K4, const uint8_t *a8, const int8_t *b, int32_t *acc);
#endif

#ifdef __cplusplus
}
#endif
#endif
