/* kime CPU kernels: the C interface the compiled forward pass calls.
 *
 * Every kernel is FP32 (attention's products may be BF16: KIME_ATTN_BF16), works on packed
 * unpadded rows (row r is tokens cu[r]..cu[r+1]), and is deterministic: work is split over rows and output columns, never over a reduction, and each
 * output element is reduced in one fixed order. So a token's result is the same bits whatever
 * the thread count, and whatever other rows share its batch (its value never depends on M or on
 * which tile of a GEMM it falls in).
 *
 * Threads: each kernel takes `nthreads` and runs its steps as tasks of kime's pool (pool.h), or
 * serially where the pool has no threads (pool.h). Kernels never allocate; callers pass scratch.
 */
#ifndef KIME_KERNELS_H
#define KIME_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- ISA dispatch ------------------------------------------------------------------------- */

/* An ISA is a level of the architecture kime is built for; each level implies those below it, so
 * levels compare with < and > on one architecture. x86-64: 1 AVX2 + FMA, 2 AVX-512 (F, BW, VL).
 * aarch64: 1 NEON (ASIMD), 2 + dotprod (sdot/udot), 3 + i8mm (smmla/usmmla), 4 + bf16
 * (bfmmla/bfdot). The numbers overlap across architectures: compare with an architecture's
 * names only in code built for it (x86 names under an x86 #if, aarch64 names under
 * __aarch64__). */
enum kime_isa {
    KIME_ISA_PORTABLE = 0,
    KIME_ISA_AVX2 = 1,
    KIME_ISA_AVX512 = 2,
    KIME_ISA_NEON = 1,
    KIME_ISA_DOTPROD = 2,
    KIME_ISA_I8MM = 3,
    KIME_ISA_BF16 = 4
};

/* The best ISA this CPU supports (cpuid; getauxval on aarch64), capped by the KIME_ISA
 * environment variable ("portable", "avx2", "avx512"; on aarch64 "portable", "neon", "dotprod",
 * "i8mm", "bf16") so tests can force each path. */
int kime_isa_detect(void);
/* 1 when `isa` is this CPU's own best level and KIME_ISA names no level: only then may a kernel
 * use an extension above the level's own set (x86's AVX-VNNI beside avx2), so that a named level
 * runs that level's kernels, the same ones on every CPU. */
int kime_isa_uncapped(int isa);
/* The level's name on this architecture; "unknown" past its highest level. */
const char *kime_isa_name(int isa);
/* The aarch64 features this CPU has (getauxval, cached; KIME_ISA does not cap them), as
 * KIME_ARM_* bits; 0 on other architectures. For kime doctor, and for a kernel that needs one
 * feature outside the level order (SVE). */
enum {
    KIME_ARM_ASIMD = 1,
    KIME_ARM_DOTPROD = 2,
    KIME_ARM_I8MM = 4,
    KIME_ARM_BF16 = 8,
    KIME_ARM_SVE = 16,
    KIME_ARM_SVE2 = 32
};
unsigned kime_isa_arm_features(void);

/* ---- GEMM: C[M, N] = A[M, K] @ W[N, K]^T, over weights packed once at load ------------------ */

enum kime_epilogue {
    KIME_EPI_STORE = 0,    /* C = AW^T + bias                                                 */
    KIME_EPI_ACCUM = 1,    /* C += AW^T + bias         (residual add, in place)                */
    KIME_EPI_GELU = 2,     /* C = gelu_erf(AW^T + bias)                                         */
    KIME_EPI_RELU = 3,     /* C = max(AW^T + bias, 0)                                           */
    KIME_EPI_GEGLU = 4     /* W has N = 2*I rows [a; g]; C[M, I] = gelu_erf(a) * g, with bias  */
};

/* Floats the packed form of an [N, K] weight needs for `isa` (includes any padding). */
size_t kime_gemm_packed_floats(int isa, int N, int K, int geglu);
/* Pack W [N, K] row-major (a torch Linear weight) for `isa`. With geglu=1, W's first N/2 rows are
 * the GELU half and the last N/2 the gate half, and packing pairs them for the GEGLU epilogue. */
void kime_gemm_pack(int isa, const float *W, int N, int K, int geglu, float *packed);
/* Run the GEMM. A is [M, K] with row stride lda; C has row stride ldc; bias may be NULL (for
 * GEGLU it has N = 2*I entries). `scratch` holds kime_gemm_scratch_floats(isa, K, nthreads)
 * floats (per-thread A packing). */
size_t kime_gemm_scratch_floats(int isa, int K, int nthreads);
/* The micro-kernel `isa` runs, as "NAME MRxNR" ("neon 12x8"), for kime doctor. */
const char *kime_gemm_kernel_name(int isa);
void kime_gemm(int isa, const float *A, int lda, int M, int K, int N, const float *packed,
               const float *bias, int epilogue, float *C, int ldc, float *scratch, int nthreads);

/* ---- attention over unpadded rows ---------------------------------------------------------- */

/* RoPE (rotate-half, as transformers' ModernBERT) in place on the q and k parts of qkv:
 * qkv is [T, 3*H*hd] with q at columns [0, H*hd), k at [H*hd, 2*H*hd), heads contiguous.
 * The position of token t is pos[t] (pos indexed like qkv's rows, each in [0, max_pos)), or its
 * index inside its row when pos is NULL. cos and sin are [max_pos, hd/2] tables:
 * cos[p, i] = cos(p * inv_freq[i]) in FP32 as transformers computes them. */
void kime_rope(float *qkv, int T, const int32_t *cu, int R, int H, int hd, const float *cos_table,
               const float *sin_table, const int32_t *pos, int nthreads);

/* Attention's products: KIME_ATTN_F32 computes everything in FP32; KIME_ATTN_BF16 rounds the
 * scaled queries, the keys, the softmax's probabilities and the values to bfloat16 and sums
 * their products into FP32 as x86's vdpbf16ps does: with that instruction where the CPU has
 * AVX512_BF16, and with FMAs that give its bits on every other SIMD level and on aarch64, so the
 * bits do not depend on the level (attention_bf16.h). The softmax and the output's scaling stay
 * FP32. */
enum kime_attn_precision { KIME_ATTN_F32 = 0, KIME_ATTN_BF16 = 1 };
/* What computes the BF16 products at `isa`: "amx-bf16" (AMX tiles, two-term queries and
 * probabilities, for head dims of a multiple of 32; vdpbf16ps for others), "vdpbf16ps",
 * "avx2 fma", "neon fma" or "c" (the portable C level, whose sums round each product apart: its
 * own bits). */
const char *kime_attention_bf16_kernels(int isa);

/* Softmax attention per row and head, blocked with an online softmax in FP32, its products in
 * `precision`. q, k, v are read
 * from qkv (layout as above); out is [T, H*hd] with row stride ldo. scale = hd^-0.5. With
 * half_window >= 0, query i sees key j only when |i - j| <= half_window (ModernBERT's local
 * layers); half_window < 0 is full attention. scratch: kime_attention_scratch_floats floats
 * for the precision, at least the call's tokens (cu[R] - cu[0]), its heads and head dim.
 * pos and opt (both NULL, or both given) are the parallel option layout's position and option
 * ids, indexed like qkv's rows: query i then sees key j of its row unless opt[i] > 0, opt[j] > 0
 * and opt[i] != opt[j], and with a window only when |pos[i] - pos[j]| <= half_window. NULL runs
 * the sequential layout's code, whose bits the ids pos = index in row, opt = 0 reproduce. */
size_t kime_attention_scratch_floats(int precision, int tokens, int heads, int hd, int nthreads);
void kime_attention(int precision, const float *qkv, const int32_t *cu, int R, int H, int hd,
                    int half_window, const int32_t *pos, const int32_t *opt, float *out, int ldo,
                    float *scratch, int nthreads);
/* kime_rope on qkv's q and k with the same tables and positions (pos: the layout's position ids,
 * or NULL), then kime_attention, in one call with the same bits. With BF16 products q and k are
 * rotated as they are read (the keys as they are rounded into pairs, each block's queries into
 * the item's scratch), which saves RoPE's pass over qkv, and qkv is left as it was; FP32
 * products read the keys in place, so there kime_rope rotates qkv first. */
void kime_attention_rope(int precision, float *qkv, const int32_t *cu, int R, int H, int hd,
                         int half_window, const int32_t *pos, const int32_t *opt,
                         const float *cos_table, const float *sin_table, float *out, int ldo,
                         float *scratch, int nthreads);
/* Full attention for some of each row's queries only: row r's queries are q's rows
 * qcu[r]..qcu[r+1] (row stride ldq, heads contiguous), its keys and values qkv's rows
 * cu[r]..cu[r+1]; results go to out's rows qcu[r]..qcu[r+1]. A query's result is the same bits
 * as the one kime_attention gives the token it was copied from (the decision head's last layer
 * needs only the rows the scorer and act head read). */
void kime_attention_some(int precision, const float *q, int ldq, const int32_t *qcu,
                         const float *qkv, const int32_t *cu, int R, int H, int hd, float *out,
                         int ldo, float *scratch, int nthreads);

#ifdef __cplusplus
}
#endif
#endif
