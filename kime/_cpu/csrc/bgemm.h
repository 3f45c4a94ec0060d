/* kime BF16 GEMM: C_f32[M, N] = bf16(A)[M, K] bf16(W)[N, K]^T + epilogue (bgemm.c).
 *
 * Weights are rounded to bfloat16 and packed once at load, half the bytes of FP32 panels.
 * Activations stay FP32 in memory and are rounded to bfloat16 inside the kernel's A packing. Both
 * roundings are the same function of a float32 x: round to nearest even on the top 16 bits, a
 * NaN becomes a quiet NaN, and a float32 denormal becomes a zero of its sign (what the
 * AVX512_BF16 conversion instructions do). Products of two bfloat16 are exact in FP32; they are
 * summed into FP32 accumulators by vdpbf16ps, two k at a time in increasing k, and the FP32
 * epilogue (kernels.h's kime_epilogue, the same code as the FP32 GEMM's) is fused into the store.
 *
 * Determinism: every C element is one accumulator taking one instruction per pair of k over all
 * of K; work is split over rows or output panels, never over K. A row's bits do not depend on
 * M, on its tile, on the thread count or on the batch.
 *
 * x86 runs AVX-512 with AVX512_BF16 (Zen 4 and later, Cooper Lake, Sapphire Rapids and later),
 * or AMX-BF16's tdpbf16ps tiles where the CPU has them (Sapphire Rapids and later; bgemm.c's
 * use_amx, whose sums round in the tiles' own order: bits of their own), and aarch64 bfmmla
 * (FEAT_BF16: Neoverse V1/N2/V2, Graviton 3 and 4; bgemm_arm64.h, whose sums round to odd as
 * Arm's BFloat16 instructions do). Elsewhere
 * kime_bgemm_missing says what is missing and no kernel may be called. The packed layout is
 * the architecture's (x86: pairs of k in 32 columns, K padded to 32; aarch64: groups of 4 k in 8
 * columns).
 */
#ifndef KIME_BGEMM_H
#define KIME_BGEMM_H

#include <stddef.h>
#include <stdint.h>

#include "kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Why the BF16 GEMM cannot run at `isa` (kime_isa_detect's answer), or NULL when it can:
 *   "build"        kime was compiled by a compiler without AVX512_BF16 intrinsics;
 *   "avx512_bf16"  the CPU (or its OS's register state) lacks AVX-512 with AVX512_BF16;
 *   "isa"          the CPU has it, but `isa` is below AVX-512 (KIME_ISA caps it).
 * and on aarch64:
 *   "bf16"         the CPU lacks FEAT_BF16 (bfmmla);
 *   "isa"          the CPU has it, but `isa` is below KIME_ISA_BF16 (KIME_ISA caps it).
 * The CPU's answer is cached, as isa.c's. */
const char *kime_bgemm_missing(int isa);
/* The kernel set's name: "amx-bf16", "avx512bf16", or "bfmmla" on aarch64. */
const char *kime_bgemm_kernels(void);
/* 1 when BF16 products at `isa` run on AMX tiles (amx-bf16): AMX-BF16 that this process may use,
 * at the CPU's own avx512 level, unless KIME_BGEMM=avx512bf16 (read on every call). Attention's
 * BF16 products follow it too (attention.c). */
int kime_bgemm_amx(int isa);

/* Bytes the packed form of an [N, K] weight needs (bf16 panels, zero-padded). */
size_t kime_bgemm_packed_bytes(int N, int K, int geglu);
/* Round W [N, K] (row-major, a torch Linear weight) to bfloat16 and pack it; geglu pairs rows
 * [a; g] as the FP32 GEMM does. Portable C: it needs no BF16 instruction. `packed` should be
 * 64-byte aligned (any alignment is correct). */
void kime_bgemm_pack(const float *W, int N, int K, int geglu, void *packed);
/* Scratch bytes kime_bgemm needs for this K and thread count (per-thread A packing). */
size_t kime_bgemm_scratch_bytes(int K, int nthreads);
/* C = epilogue(bf16(A) bf16(W)^T + bias), arguments as kime_gemm (kernels.h): A [M, K] with row
 * stride lda, C with row stride ldc, bias NULL or N entries. Only where kime_bgemm_missing is
 * NULL. */
void kime_bgemm(const float *A, int lda, int M, int K, int N, const void *packed,
                const float *bias, int epilogue, float *C, int ldc, void *scratch, int nthreads);

#ifdef __cplusplus
}
#endif
#endif
