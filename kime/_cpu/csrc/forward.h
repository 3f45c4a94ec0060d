/* The whole Laya forward pass on the CPU: ModernBERT encoder, type embedding, decision head,
 * scorer and act head over a packed batch of unpadded rows, in one call with no allocation.
 *
 * The model struct only points at weights owned by the caller (a mapped, packed blob) and the
 * arena only points at buffers sized once per bucket, so a forward pass touches no allocator.
 */
#ifndef KIME_FORWARD_H
#define KIME_FORWARD_H

#include <stddef.h>
#include <stdint.h>

#define KIME_MAX_LAYERS 64
#define KIME_ACT_HIDDEN 256 /* graph.ACT_HIDDEN: Linear(d + 4, 256) -> GELU -> Linear(256, n_act) */

/* A layer's GEMM precision (kime_layer.prec): how its weights are packed, which kernel runs them */
#define KIME_PREC_F32 0
#define KIME_PREC_INT8 1 /* qgemm.h, called with the model's qisa */
#define KIME_PREC_BF16 2 /* bgemm.h */

typedef struct {
    const float *norm_w, *norm_b; /* pre-norm (NULL norm_w: identity, layer 0 of the encoder) */
    const float *qkv, *qkv_b;     /* packed [3d, d] (int8: qgemm's bytes; bf16: bgemm's) */
    const float *out, *out_b;     /* packed [d, d] */
    const float *norm2_w, *norm2_b;
    const float *up, *up_b;       /* encoder: packed GEGLU Wi [2I, d]; head: linear1 [4d, d] */
    const float *down, *down_b;   /* encoder: Wo [d, I]; head: linear2 [d, 4d] */
    int is_global;
    int attn; /* its attention's products: kernels.h's KIME_ATTN_F32 or KIME_ATTN_BF16 */
    int prec; /* KIME_PREC_*: the same in every layer of a uniform model; the gate's choice
               * (kime gate --mixed) layer by layer in a mixed one */
} kime_layer;

typedef struct {
    int isa;
    int int8; /* every encoder and decision-head layer is INT8 (qgemm.h); scorer, act head FP32 */
    int qisa; /* what the INT8 GEMMs are called with: the isa with its qgemm impl pinned */
    int bf16; /* every encoder and decision-head layer is BF16 (bgemm.h); scorer and act head
               * FP32. Neither flag in a mixed model: each layer's prec says what it runs. */
    int d, vocab, layers, heads, inter, half_window;
    float norm_eps;
    const uint16_t *tok_emb;      /* [vocab, d] FP16 bits: gathered and widened per token */
    const float *emb_norm_w, *emb_norm_b, *final_norm_w, *final_norm_b;
    kime_layer enc[KIME_MAX_LAYERS];
    const float *cos_global, *sin_global, *cos_local, *sin_local; /* [max_pos, hd/2] */
    int max_pos;
    const float *type_emb;        /* [3, d] */
    int head_layers, head_heads;
    kime_layer head[KIME_MAX_LAYERS];
    const float *sc_norm_w, *sc_norm_b, *sc1, *sc1_b, *sc3; /* sc1 packed [d, d]; sc3 [d] */
    float sc3_b;
    const float *act0, *act0_b, *act2, *act2_b; /* packed [256, d+4] and [n_act, 256] */
    int n_act;
} kime_model;

typedef struct {
    int max_tokens, max_rows, max_markers;
    float *x, *h, *qkv, *attn, *ffn;   /* [T,d] [T,d] [T,3d] [T,d] [T,max(I,4d)] */
    float *m, *m2;                     /* [M,d] [M,d] */
    float *act_in, *act_h;             /* [R,d+4] [R,256] */
    int32_t *qcu;                      /* [R+1]: the decision head's last layer's row offsets */
    float *gemm_scratch, *attn_scratch;
    void *qgemm_scratch;               /* unused unless a layer is INT8 */
    void *bgemm_scratch;               /* unused unless a layer is BF16 */
} kime_arena;

/* Runs the batch; returns 0, or a negative code when the batch does not fit the arena or holds
 * an id outside the vocabulary or a position outside the tables (the caller checked, so this is
 * a guard, not an API). pos and opt (per token, like ids) are a parallel-layout batch's position
 * and option ids, both NULL for a sequential batch: the encoder's RoPE and attention read them
 * (kernels.h), the decision head never does. */
int kime_forward(const kime_model *m, const kime_arena *a, const int32_t *ids, const int32_t *cu,
                 int rows, const int32_t *markers, const int32_t *mcu, const int32_t *qtype,
                 const int32_t *pos, const int32_t *opt, float *logits, float *act, int nthreads);

/* The encoder alone (no decision head) and each row's mean over its tokens of the last hidden
 * state (after the final norm): pooled [rows, d]. The same guards and codes as kime_forward. */
int kime_embed(const kime_model *m, const kime_arena *a, const int32_t *ids, const int32_t *cu,
               int rows, float *pooled, int nthreads);

/* out[r] = the mean of x's rows cu[r]..cu[r+1] (the zero vector for an empty row), summed in
 * double in token order: the same bits at any thread count and in any batch. */
void kime_mean_pool(const float *x, const int32_t *cu, int rows, int d, float *out, int nthreads);

/* Whether an encoder layer over n tokens on nthreads threads runs its row-local steps in
 * chunks of rows (forward.c's fused layer: long batches on 2-4 threads) rather than step by
 * step; the bits are the same. */
int kime_fused_layer(int n, int nthreads);

/* The per-token pieces of kime_forward, exported so each has a kernel test of its own
 * (_forward.pyx's test wrappers); the forward pass calls exactly these. */

/* y = (x - mean) / sqrt(var + eps) * w (+ b) over n rows of d (b may be NULL; y may be x). The
 * statistics are doubles summed in a fixed order, so a row's bits do not depend on nthreads. */
void kime_layer_norm(const float *x, float *y, int n, int d, const float *w, const float *b,
                     float eps, int nthreads);

/* The act head's four answer features of one row's k option logits, in float32 as Laya's torch
 * code: top1, top1 - top2, entropy / log(max(k, 2)), max(k, 2) / 255 (top2 is 0 when k == 1). */
void kime_act_features(const float *logits, int k, float *out);

/* act[r] = softmax(w2 @ gelu(w0 @ [x[cu[r]], features(logits[mcu[r]:mcu[r+1]])] + b0) + b2) for
 * each row: w0 packed [KIME_ACT_HIDDEN, d + 4] and w2 packed [n_act, KIME_ACT_HIDDEN] (kime_gemm's
 * panels, FP32 even in an INT8 model); act_in [rows, d + 4], act_h [rows, KIME_ACT_HIDDEN] and
 * the GEMM scratch are the caller's. */
void kime_act_head(int isa, const float *x, const int32_t *cu, int rows, int d,
                   const float *logits, const int32_t *mcu, const float *w0, const float *b0,
                   const float *w2, const float *b2, int n_act, float *act_in, float *act_h,
                   float *gemm_scratch, float *act, int nthreads);

#endif
