/* kime INT8 GEMM: C_f32[M, N] = dequant(A_q[M, K] W_q[N, K]^T) + epilogue (qgemm.c).
 *
 * Weights: per-output-channel symmetric INT8, quantized and packed once at load. Activations:
 * per-row symmetric INT8, quantized inside the kernel's A packing. INT32 accumulation, exact; the
 * dequantization (acc * scale_a[m] * scale_w[n]) and the epilogue (kernels.h's kime_epilogue)
 * are fused into the store. Both quantizations are the same function of a row x of length K:
 *   amax = max_k |x_k|;  inv = amax > 0 ? 127.0f / amax : 0;  q_k = clamp(rint(x_k * inv), +-127)
 *   scale = amax / 127.0f                               (every operation in float32)
 * so `A @ W^T ~= (q_a @ q_w^T) * scale_a[m] * scale_w[n]`. The INT32 sums are exact and the same
 * on every ISA, so results are identical at any thread count and batch composition.
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

/* The kernel set `isa` runs: KIME_ISA_AVX512 needs AVX512-VNNI as well and otherwise runs the
 * AVX2 kernels; a packed buffer is valid only for the kernel set it was packed for. */
int kime_qgemm_impl(int isa);

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

#ifdef __cplusplus
}
#endif
#endif
