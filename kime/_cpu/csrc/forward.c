/* The Laya forward pass over packed rows (see forward.h; kime/graph.py's module docstring is the
 * one description of the computation, step by step).
 *
 * GEMMs, RoPE and attention are the kernels of kernels.h; the small per-token ops live here.
 * Every loop splits work over tokens, rows or columns and reduces in a fixed order, so a row's
 * logits are the same bits at any thread count and in any batch. Built with -ffp-contract=off
 * (setup.py's CSRC_FLAGS): a product is rounded, then added, as in the x86-64 baseline.
 */
#include <math.h>
#include <string.h>

#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
#define KIME_X86 1
#include <immintrin.h>
#elif defined(__aarch64__)
#define KIME_NEON 1
#include <arm_neon.h>
#endif

#include "bgemm.h"
#include "forward.h"
#include "kernels.h"
#include "pool.h"
#include "qgemm.h"

#define HEAD_EPS 1e-5f /* graph.HEAD_NORM_EPS: the decision head's and the scorer's norms */

static inline float half_to_float(uint16_t bits) {
    uint32_t sign = (uint32_t)(bits & 0x8000u) << 16;
    uint32_t exponent = (bits >> 10) & 0x1fu, mantissa = bits & 0x3ffu, out;
    if (exponent == 0) {
        if (mantissa == 0) {
            out = sign;
        } else { /* subnormal: normalise */
            exponent = 113;
            while (!(mantissa & 0x400u)) {
                mantissa <<= 1;
                exponent--;
            }
            out = sign | (exponent << 23) | ((mantissa & 0x3ffu) << 13);
        }
    } else if (exponent == 31) {
        out = sign | 0x7f800000u | (mantissa << 13);
    } else {
        out = sign | ((exponent + 112) << 23) | (mantissa << 13);
    }
    float f;
    memcpy(&f, &out, sizeof f);
    return f;
}

/* y = (x - mean) / sqrt(var + eps) * w (+ b), statistics in double in a fixed order. Each sum
 * runs in NACC interleaved partial sums, combined in a fixed order: the same bits on any thread
 * count and batch, without one long chain of dependent double adds (which made LayerNorm about
 * 8% of an INT8 forward pass). */
#define NACC 8
static inline void norm_row(const float *x, float *y, int d, const float *w,
                            const float *b, float eps) {
    double part_s[NACC] = {0}, part_q[NACC] = {0};
    int i = 0;
    for (; i + NACC <= d; i += NACC)
        for (int k = 0; k < NACC; k++) part_s[k] += x[i + k];
    double sum = 0.0;
    for (int k = 0; k < NACC; k++) sum += part_s[k];
    for (int j = i; j < d; j++) sum += x[j];
    const double mean = sum / d;
    for (i = 0; i + NACC <= d; i += NACC)
        for (int k = 0; k < NACC; k++) {
            double c = x[i + k] - mean;
            part_q[k] += c * c;
        }
    double sq = 0.0;
    for (int k = 0; k < NACC; k++) sq += part_q[k];
    for (int j = i; j < d; j++) {
        double c = x[j] - mean;
        sq += c * c;
    }
    const double inv = 1.0 / sqrt(sq / d + (double)eps);
    for (i = 0; i < d; i++) {
        float v = (float)((x[i] - mean) * inv) * w[i];
        y[i] = b ? v + b[i] : v;
    }
}

typedef void (*norm_fn)(const float *, float *, int, const float *, const float *, float);

#ifdef KIME_NEON
/* norm_row in NEON, to the bit (as norm_rows512 on AVX-512): the eight double partial sums are
 * the lanes of four float64x2 vectors (part_s[k] is vector k / 2, lane k % 2, taking x[i + k]),
 * and every other step is the same IEEE operation on the same values in the same order.
 * vmulq/vaddq are plain vector arithmetic in GCC's arm_neon.h, which it would fuse: this file
 * is compiled with -ffp-contract=off (setup.py's CSRC_FLAGS). */
static void norm_row_neon(const float *x, float *y, int d, const float *w,
                          const float *b, float eps) {
    const float64x2_t zero = vdupq_n_f64(0.0);
    float64x2_t acc[4] = {zero, zero, zero, zero};
    int i = 0;
    for (; i + NACC <= d; i += NACC) {
        const float32x4_t lo = vld1q_f32(x + i), hi = vld1q_f32(x + i + 4);
        acc[0] = vaddq_f64(acc[0], vcvt_f64_f32(vget_low_f32(lo)));
        acc[1] = vaddq_f64(acc[1], vcvt_high_f64_f32(lo));
        acc[2] = vaddq_f64(acc[2], vcvt_f64_f32(vget_low_f32(hi)));
        acc[3] = vaddq_f64(acc[3], vcvt_high_f64_f32(hi));
    }
    double part[NACC], sum = 0.0;
    for (int k = 0; k < 4; k++) vst1q_f64(part + 2 * k, acc[k]);
    for (int k = 0; k < NACC; k++) sum += part[k];
    for (int j = i; j < d; j++) sum += x[j];
    const double mean = sum / d;
    const float64x2_t vmean = vdupq_n_f64(mean);
    for (int k = 0; k < 4; k++) acc[k] = zero;
    for (i = 0; i + NACC <= d; i += NACC) {
        const float32x4_t lo = vld1q_f32(x + i), hi = vld1q_f32(x + i + 4);
        const float64x2_t c[4] = {vsubq_f64(vcvt_f64_f32(vget_low_f32(lo)), vmean),
                                  vsubq_f64(vcvt_high_f64_f32(lo), vmean),
                                  vsubq_f64(vcvt_f64_f32(vget_low_f32(hi)), vmean),
                                  vsubq_f64(vcvt_high_f64_f32(hi), vmean)};
        for (int k = 0; k < 4; k++) acc[k] = vaddq_f64(acc[k], vmulq_f64(c[k], c[k]));
    }
    double sq = 0.0;
    for (int k = 0; k < 4; k++) vst1q_f64(part + 2 * k, acc[k]);
    for (int k = 0; k < NACC; k++) sq += part[k];
    for (int j = i; j < d; j++) {
        double c = x[j] - mean;
        sq += c * c;
    }
    const double inv = 1.0 / sqrt(sq / d + (double)eps);
    const float64x2_t vinv = vdupq_n_f64(inv);
    for (i = 0; i + 4 <= d; i += 4) {
        const float32x4_t xv = vld1q_f32(x + i);
        const float64x2_t c0 = vmulq_f64(vsubq_f64(vcvt_f64_f32(vget_low_f32(xv)), vmean), vinv);
        const float64x2_t c1 = vmulq_f64(vsubq_f64(vcvt_high_f64_f32(xv), vmean), vinv);
        float32x4_t v = vmulq_f32(vcvt_high_f32_f64(vcvt_f32_f64(c0), c1), vld1q_f32(w + i));
        if (b) v = vaddq_f32(v, vld1q_f32(b + i));
        vst1q_f32(y + i, v);
    }
    for (; i < d; i++) {
        float v = (float)((x[i] - mean) * inv) * w[i];
        y[i] = b ? v + b[i] : v;
    }
}
#endif

#ifdef KIME_X86
/* norm_row in AVX-512, to the bit (norm_rows512): the eight double partial sums are the eight
 * lanes of one vector (lane k takes x[i + k], as part_s[k] does), and every other step is the
 * same IEEE operation on the same values, in the same order. GCC would contract (v * w) + b
 * into one FMA (a single rounding, other bits), so this file is compiled without contraction
 * (setup.py's CSRC_FLAGS), as the x86-64 baseline norm_row is built for has none.
 *
 * A row's two sums are each one chain of dependent double adds (d / 8 of them, 4 cycles each),
 * so norm_rows512 runs NORM_ROWS rows' chains side by side: each row still adds its own values
 * in its own order (the same bits alone or beside others): 182 x 768 took 0.69-0.74 of the
 * time. */
#define NORM_ROWS 4

/* lanes summed in part_s's order, then the tail past the last whole vector */
static inline double lanes_then_tail(const double *part, const float *x, int i, int d,
                                     double mean, int centred) {
    double s = 0.0;
    for (int k = 0; k < NACC; k++) s += part[k];
    for (int j = i; j < d; j++) {
        if (centred) {
            double c = x[j] - mean;
            s += c * c;
        } else {
            s += x[j];
        }
    }
    return s;
}

/* rows [0, R) of x (row stride d): their means and 1 / sqrt(var + eps), as norm_row makes them */
__attribute__((target("avx512f"), always_inline)) static inline void
stats512(const float *x, int R, int d, float eps, double *mean, double *inv) {
    __m512d acc[NORM_ROWS];
    double part[NACC];
    int i = 0;
    for (int r = 0; r < R; r++) acc[r] = _mm512_setzero_pd();
    for (; i + NACC <= d; i += NACC)
        for (int r = 0; r < R; r++)
            acc[r] = _mm512_add_pd(acc[r], _mm512_cvtps_pd(_mm256_loadu_ps(x + (size_t)r * d + i)));
    for (int r = 0; r < R; r++) {
        _mm512_storeu_pd(part, acc[r]);
        mean[r] = lanes_then_tail(part, x + (size_t)r * d, i, d, 0.0, 0) / d;
        acc[r] = _mm512_setzero_pd();
    }
    for (i = 0; i + NACC <= d; i += NACC)
        for (int r = 0; r < R; r++) {
            __m512d c = _mm512_sub_pd(_mm512_cvtps_pd(_mm256_loadu_ps(x + (size_t)r * d + i)),
                                      _mm512_set1_pd(mean[r]));
            acc[r] = _mm512_add_pd(acc[r], _mm512_mul_pd(c, c));
        }
    for (int r = 0; r < R; r++) {
        _mm512_storeu_pd(part, acc[r]);
        const double sq = lanes_then_tail(part, x + (size_t)r * d, i, d, mean[r], 1);
        inv[r] = 1.0 / sqrt(sq / d + (double)eps);
    }
}

/* y = (x - mean) * inv * w (+ b) for one row */
__attribute__((target("avx512f"))) static inline void
apply512(const float *x, float *y, int d, const float *w, const float *b, double mean,
         double inv) {
    const __m512d vmean = _mm512_set1_pd(mean), vinv = _mm512_set1_pd(inv);
    int i = 0;
    for (; i + NACC <= d; i += NACC) {
        __m512d c = _mm512_mul_pd(_mm512_sub_pd(_mm512_cvtps_pd(_mm256_loadu_ps(x + i)), vmean), vinv);
        __m256 v = _mm256_mul_ps(_mm512_cvtpd_ps(c), _mm256_loadu_ps(w + i));
        if (b) v = _mm256_add_ps(v, _mm256_loadu_ps(b + i));
        _mm256_storeu_ps(y + i, v);
    }
    for (; i < d; i++) {
        float v = (float)((x[i] - mean) * inv) * w[i];
        y[i] = b ? v + b[i] : v;
    }
}

/* n rows at a row stride of d, NORM_ROWS at a time (in place too: a row is read whole before
 * it is written) */
__attribute__((target("avx512f"))) static void
norm_rows512(const float *x, float *y, int n, int d, const float *w, const float *b, float eps) {
    double mean[NORM_ROWS], inv[NORM_ROWS];
    for (int r0 = 0; r0 < n; r0 += NORM_ROWS) {
        const int R = n - r0 < NORM_ROWS ? n - r0 : NORM_ROWS;
        const float *xr = x + (size_t)r0 * d;
        if (R == NORM_ROWS)
            stats512(xr, NORM_ROWS, d, eps, mean, inv); /* a constant R: the chains in registers */
        else
            stats512(xr, R, d, eps, mean, inv);
        for (int r = 0; r < R; r++)
            apply512(xr + (size_t)r * d, y + (size_t)(r0 + r) * d, d, w, b, mean[r], inv[r]);
    }
}
#endif

#ifdef KIME_X86
/* norm_row in AVX2, to the bit, as norm_rows512: the eight double partial sums are the lanes of
 * two 4-lane vectors (lo takes x[i + k] for k < 4, hi for k >= 4), every other step the same
 * IEEE operation on the same values in the same order (no contraction: CSRC_FLAGS), and
 * NORM_ROWS rows' chains side by side as in norm_rows512. */
__attribute__((target("avx2"), always_inline)) static inline void
stats256(const float *x, int R, int d, float eps, double *mean, double *inv) {
    __m256d lo[NORM_ROWS], hi[NORM_ROWS];
    double part[NACC];
    int i = 0;
    for (int r = 0; r < R; r++) lo[r] = hi[r] = _mm256_setzero_pd();
    for (; i + NACC <= d; i += NACC)
        for (int r = 0; r < R; r++) {
            const float *xr = x + (size_t)r * d + i;
            lo[r] = _mm256_add_pd(lo[r], _mm256_cvtps_pd(_mm_loadu_ps(xr)));
            hi[r] = _mm256_add_pd(hi[r], _mm256_cvtps_pd(_mm_loadu_ps(xr + 4)));
        }
    for (int r = 0; r < R; r++) {
        _mm256_storeu_pd(part, lo[r]);
        _mm256_storeu_pd(part + 4, hi[r]);
        mean[r] = lanes_then_tail(part, x + (size_t)r * d, i, d, 0.0, 0) / d;
        lo[r] = hi[r] = _mm256_setzero_pd();
    }
    for (i = 0; i + NACC <= d; i += NACC)
        for (int r = 0; r < R; r++) {
            const float *xr = x + (size_t)r * d + i;
            const __m256d vmean = _mm256_set1_pd(mean[r]);
            __m256d c0 = _mm256_sub_pd(_mm256_cvtps_pd(_mm_loadu_ps(xr)), vmean);
            __m256d c1 = _mm256_sub_pd(_mm256_cvtps_pd(_mm_loadu_ps(xr + 4)), vmean);
            lo[r] = _mm256_add_pd(lo[r], _mm256_mul_pd(c0, c0));
            hi[r] = _mm256_add_pd(hi[r], _mm256_mul_pd(c1, c1));
        }
    for (int r = 0; r < R; r++) {
        _mm256_storeu_pd(part, lo[r]);
        _mm256_storeu_pd(part + 4, hi[r]);
        const double sq = lanes_then_tail(part, x + (size_t)r * d, i, d, mean[r], 1);
        inv[r] = 1.0 / sqrt(sq / d + (double)eps);
    }
}

__attribute__((target("avx2"))) static inline void
apply256(const float *x, float *y, int d, const float *w, const float *b, double mean,
         double inv) {
    const __m256d vmean = _mm256_set1_pd(mean), vinv = _mm256_set1_pd(inv);
    int i = 0;
    for (; i + NACC <= d; i += NACC) {
        __m256d c0 = _mm256_mul_pd(_mm256_sub_pd(_mm256_cvtps_pd(_mm_loadu_ps(x + i)), vmean), vinv);
        __m256d c1 =
            _mm256_mul_pd(_mm256_sub_pd(_mm256_cvtps_pd(_mm_loadu_ps(x + i + 4)), vmean), vinv);
        __m256 c = _mm256_set_m128(_mm256_cvtpd_ps(c1), _mm256_cvtpd_ps(c0));
        __m256 v = _mm256_mul_ps(c, _mm256_loadu_ps(w + i));
        if (b) v = _mm256_add_ps(v, _mm256_loadu_ps(b + i));
        _mm256_storeu_ps(y + i, v);
    }
    for (; i < d; i++) {
        float v = (float)((x[i] - mean) * inv) * w[i];
        y[i] = b ? v + b[i] : v;
    }
}

__attribute__((target("avx2"))) static void
norm_rows256(const float *x, float *y, int n, int d, const float *w, const float *b, float eps) {
    double mean[NORM_ROWS], inv[NORM_ROWS];
    for (int r0 = 0; r0 < n; r0 += NORM_ROWS) {
        const int R = n - r0 < NORM_ROWS ? n - r0 : NORM_ROWS;
        const float *xr = x + (size_t)r0 * d;
        if (R == NORM_ROWS)
            stats256(xr, NORM_ROWS, d, eps, mean, inv);
        else
            stats256(xr, R, d, eps, mean, inv);
        for (int r = 0; r < R; r++)
            apply256(xr + (size_t)r * d, y + (size_t)(r0 + r) * d, d, w, b, mean[r], inv[r]);
    }
}
#endif

/* n rows at a row stride of d, one at a time: the norms without a multi-row form */
static void norm_rows_one(norm_fn row, const float *x, float *y, int n, int d, const float *w,
                          const float *b, float eps) {
    for (int r = 0; r < n; r++) row(x + (size_t)r * d, y + (size_t)r * d, d, w, b, eps);
}

static void norm_rows_portable(const float *x, float *y, int n, int d, const float *w,
                               const float *b, float eps) {
    norm_rows_one(norm_row, x, y, n, d, w, b, eps);
}

#ifdef KIME_NEON
static void norm_rows_neon(const float *x, float *y, int n, int d, const float *w,
                           const float *b, float eps) {
    norm_rows_one(norm_row_neon, x, y, n, d, w, b, eps);
}
#endif

typedef void (*norm_rows_fn)(const float *, float *, int, int, const float *, const float *,
                             float);

/* The rows' norm kime_layer_norm runs at this ISA level: each gives norm_row's bits. */
static norm_rows_fn norm_for_isa(void) {
#ifdef KIME_X86
    if (kime_isa_detect() == KIME_ISA_AVX512) return norm_rows512;
    if (kime_isa_detect() == KIME_ISA_AVX2) return norm_rows256;
#elif defined(KIME_NEON)
    if (kime_isa_detect() >= KIME_ISA_NEON) return norm_rows_neon;
#endif
    return norm_rows_portable;
}

typedef struct {
    norm_rows_fn rows;
    const float *x, *w, *b;
    float *y;
    int n, d, chunk;
    float eps;
} norm_job;

static void norm_task(void *ctx, int task, int tid)
{
    const norm_job *j = (const norm_job *)ctx;
    const int t0 = task * j->chunk, t1 = t0 + j->chunk < j->n ? t0 + j->chunk : j->n;
    (void)tid;
    j->rows(j->x + (size_t)t0 * j->d, j->y + (size_t)t0 * j->d, t1 - t0, j->d, j->w, j->b,
            j->eps);
}

void kime_layer_norm(const float *x, float *y, int n, int d, const float *w,
                     const float *b, float eps, int nthreads) {
    if (n <= 0) return;
    norm_job j = {norm_for_isa(), x, w, b, y, n, d, kime_chunk(n, nthreads, 4, 4), eps};
    kime_parallel(nthreads, (n + j.chunk - 1) / j.chunk, norm_task, &j);
}

/* Embedding gather, FP16 -> FP32, then the embedding LayerNorm. */
typedef struct {
    const kime_model *m;
    const int32_t *ids;
    float *x, *tmp;
    norm_rows_fn norm;
    int n, chunk;
} embed_job;

static void embed_task(void *ctx, int task, int tid)
{
    const embed_job *j = (const embed_job *)ctx;
    const int d = j->m->d, t0 = task * j->chunk;
    const int t1 = t0 + j->chunk < j->n ? t0 + j->chunk : j->n;
    (void)tid;
    for (int t = t0; t < t1; t++) {
        const uint16_t *src = j->m->tok_emb + (size_t)j->ids[t] * d;
        float *row = j->tmp + (size_t)t * d;
        for (int i = 0; i < d; i++) row[i] = half_to_float(src[i]);
    }
    /* the chunk's rows normed together (norm_rows512 runs four at once) */
    j->norm(j->tmp + (size_t)t0 * d, j->x + (size_t)t0 * d, t1 - t0, d, j->m->emb_norm_w,
            j->m->emb_norm_b, j->m->norm_eps);
}

static void embed(const kime_model *m, const int32_t *ids, int n, float *x,
                  float *tmp, int nthreads) {
    if (n <= 0) return;
    embed_job j = {m, ids, x, tmp, norm_for_isa(), n, kime_chunk(n, nthreads, 4, 4)};
    kime_parallel(nthreads, (n + j.chunk - 1) / j.chunk, embed_task, &j);
}

/* An encoder or decision-head linear layer, in its layer's precision (L->prec), on nthreads
 * threads from scratch byte `off` of the arena's scratch for that precision (0, or a thread's
 * share when one thread runs it inside a fused layer's task). */
static void linear_at(const kime_model *m, const kime_arena *a, const kime_layer *L, size_t off,
                      const float *A, int lda, int M, int K, int N, const float *W,
                      const float *bias, int epi, float *C, int ldc, int nthreads) {
    if (L->prec == KIME_PREC_INT8)
        kime_qgemm(m->qisa, A, lda, M, K, N, (const void *)W, bias, epi, C, ldc,
                   (char *)a->qgemm_scratch + off, nthreads);
    else if (L->prec == KIME_PREC_BF16)
        kime_bgemm(A, lda, M, K, N, (const void *)W, bias, epi, C, ldc,
                   (char *)a->bgemm_scratch + off, nthreads);
    else
        kime_gemm(m->isa, A, lda, M, K, N, W, bias, epi, C, ldc,
                  (float *)((char *)a->gemm_scratch + off), nthreads);
}

static void linear(const kime_model *m, const kime_arena *a, const kime_layer *L, const float *A,
                   int lda, int M, int K, int N, const float *W, const float *bias, int epi,
                   float *C, int ldc, int nthreads) {
    linear_at(m, a, L, 0, A, lda, M, K, N, W, bias, epi, C, ldc, nthreads);
}

/* An encoder layer's attention, RoPE included: a->qkv to a->attn. */
static void attend(const kime_model *m, const kime_arena *a, const kime_layer *L,
                   const int32_t *cu, int rows, const int32_t *pos, const int32_t *opt,
                   int nthreads) {
    const int d = m->d;
    kime_attention_rope(L->attn, a->qkv, cu, rows, m->heads, d / m->heads,
                        L->is_global ? -1 : m->half_window, pos, opt,
                        L->is_global ? m->cos_global : m->cos_local,
                        L->is_global ? m->sin_global : m->sin_local, a->attn, d, a->attn_scratch,
                        nthreads);
}

/* ---- long batches: a layer's row-local steps a chunk of rows at a time ----------------------
 *
 * On a long batch a layer's activations outgrow the caches: each step of the plain layer wrote
 * its output to memory and the next step read it back (the norm's output, the FFN's hidden, the
 * residual), and every step ended in a wait for the slowest thread. Everything but attention is
 * row by row, so there a task takes a chunk of rows through the first LayerNorm and the QKV
 * GEMM, and after attention through the output projection, the second LayerNorm and the FFN:
 * two steps instead of six. The chunk's norm output and FFN hidden live in its thread's slot
 * (rows tid * FUSE_ROWS.. of a->h and a->ffn, scratch in the plain layer too) and stay in its
 * L2, and each GEMM runs on the task's thread with the thread's own share of the scratch. A
 * row's bits do not depend on the rows beside it in a GEMM or a norm, so they are the plain
 * layer's.
 *
 * Interleaved A/B on Zen 5, 2 threads, base: W3 (5,120 tokens) 2.7% less time at INT8 and BF16,
 * 2.2% at FP32, W2 (1,805 tokens) 3.0% at INT8; 400 tokens 5%, 320 tokens 3%, 260 even. W1's
 * 182 tokens ran 4% slower fused (each thread streams every weight for few rows), and one thread
 * 2% slower below W3's size, so both stay step by step. Chunks of 64 rows beat 32, 48, 56, 84,
 * 112 and 168. */
#define FUSE_ROWS 64

/* At least two and a half chunks per thread, on 2 to FUSE_THREADS threads. Fused, each thread
 * reads a layer's weights once per chunk of 64 rows rather than once per block of hundreds:
 * some 8 GB/s per core at INT8's and FP32's rates, which L3 serves to a few cores; many cores
 * share it (and FP32's 20 MB a layer may not stay in it), so past the thread counts measured
 * they run step by step. */
#define FUSE_THREADS 4
int kime_fused_layer(int n, int nthreads) {
    return nthreads > 1 && nthreads <= FUSE_THREADS
           && 2 * (long long)n >= 5LL * FUSE_ROWS * nthreads;
}

/* Bytes of one thread's share of precision prec's GEMM scratch, enough for K = d and inter. */
static size_t gemm_share(const kime_model *m, int prec) {
    size_t most = 0;
    const int ks[2] = {m->d, m->inter};
    for (int i = 0; i < 2; i++) {
        size_t b = prec == KIME_PREC_INT8   ? kime_qgemm_scratch_bytes(m->qisa, ks[i], 1) - 64
                   : prec == KIME_PREC_BF16 ? kime_bgemm_scratch_bytes(ks[i], 1) - 64
                                            : (kime_gemm_scratch_floats(m->isa, ks[i], 1) - 16) *
                                                  sizeof(float);
        most = b > most ? b : most;
    }
    return (most + 63) & ~(size_t)63;
}

/* linear on one thread, with thread tid's share of the scratch */
static void linear_one(const kime_model *m, const kime_arena *a, const kime_layer *L, int tid,
                       size_t share, const float *A, int lda, int M, int K, int N, const float *W,
                       const float *bias, int epi, float *C, int ldc) {
    linear_at(m, a, L, (size_t)tid * share, A, lda, M, K, N, W, bias, epi, C, ldc, 1);
}

typedef struct {
    const kime_model *m;
    const kime_arena *a;
    const kime_layer *L;
    int n, chunk;
    size_t share;
} fuse_job;

static void fused_pre_task(void *ctx, int task, int tid)
{
    const fuse_job *j = (const fuse_job *)ctx;
    const kime_model *m = j->m;
    const kime_layer *L = j->L;
    const int d = m->d, r0 = task * j->chunk;
    const int rn = j->n - r0 < j->chunk ? j->n - r0 : j->chunk;
    const float *in = j->a->x + (size_t)r0 * d;
    if (L->norm_w) {
        float *h = j->a->h + (size_t)tid * FUSE_ROWS * d;
        kime_layer_norm(in, h, rn, d, L->norm_w, L->norm_b, m->norm_eps, 1);
        in = h;
    }
    linear_one(m, j->a, L, tid, j->share, in, d, rn, d, 3 * d, L->qkv, L->qkv_b, KIME_EPI_STORE,
               j->a->qkv + (size_t)r0 * 3 * d, 3 * d);
}

static void fused_post_task(void *ctx, int task, int tid)
{
    const fuse_job *j = (const fuse_job *)ctx;
    const kime_model *m = j->m;
    const kime_arena *a = j->a;
    const kime_layer *L = j->L;
    const int d = m->d, I = m->inter, r0 = task * j->chunk;
    const int rn = j->n - r0 < j->chunk ? j->n - r0 : j->chunk;
    float *x = a->x + (size_t)r0 * d, *h = a->h + (size_t)tid * FUSE_ROWS * d;
    float *f = a->ffn + (size_t)tid * FUSE_ROWS * I;
    linear_one(m, a, L, tid, j->share, a->attn + (size_t)r0 * d, d, rn, d, d, L->out, L->out_b,
               KIME_EPI_ACCUM, x, d);
    kime_layer_norm(x, h, rn, d, L->norm2_w, L->norm2_b, m->norm_eps, 1);
    linear_one(m, a, L, tid, j->share, h, d, rn, d, 2 * I, L->up, L->up_b, KIME_EPI_GEGLU, f, I);
    linear_one(m, a, L, tid, j->share, f, I, rn, I, d, L->down, L->down_b, KIME_EPI_ACCUM, x, d);
}

static void encoder_layer(const kime_model *m, const kime_arena *a, const kime_layer *L,
                          const int32_t *cu, int rows, int n, const int32_t *pos,
                          const int32_t *opt, int nthreads) {
    const int d = m->d;
    if (kime_fused_layer(n, nthreads)) {
        /* chunks of at most FUSE_ROWS, as many per thread (a last chunk short of the others
         * left a thread idle: 320 tokens in five chunks of 64 ran 7% slower than plain) */
        const int want = nthreads * ((n + nthreads * FUSE_ROWS - 1) / (nthreads * FUSE_ROWS));
        const int chunk = (n + want - 1) / want, tasks = (n + chunk - 1) / chunk;
        const fuse_job j = {m, a, L, n, chunk, gemm_share(m, L->prec)};
        kime_parallel(nthreads, tasks, fused_pre_task, (void *)&j);
        attend(m, a, L, cu, rows, pos, opt, nthreads);
        kime_parallel(nthreads, tasks, fused_post_task, (void *)&j);
        return;
    }
    const float *in = a->x;
    if (L->norm_w) {
        kime_layer_norm(a->x, a->h, n, d, L->norm_w, L->norm_b, m->norm_eps, nthreads);
        in = a->h;
    }
    linear(m, a, L, in, d, n, d, 3 * d, L->qkv, L->qkv_b, KIME_EPI_STORE, a->qkv, 3 * d, nthreads);
    attend(m, a, L, cu, rows, pos, opt, nthreads);
    linear(m, a, L, a->attn, d, n, d, d, L->out, L->out_b, KIME_EPI_ACCUM, a->x, d, nthreads);
    kime_layer_norm(a->x, a->h, n, d, L->norm2_w, L->norm2_b, m->norm_eps, nthreads);
    linear(m, a, L, a->h, d, n, d, 2 * m->inter, L->up, L->up_b, KIME_EPI_GEGLU, a->ffn, m->inter,
           nthreads);
    linear(m, a, L, a->ffn, m->inter, n, m->inter, d, L->down, L->down_b, KIME_EPI_ACCUM, a->x, d,
           nthreads);
}

/* nn.TransformerEncoderLayer with norm_first=True, ReLU, biases everywhere. */
static void head_layer(const kime_model *m, const kime_arena *a, const kime_layer *L,
                       const int32_t *cu, int rows, int n, int nthreads) {
    int d = m->d;
    kime_layer_norm(a->x, a->h, n, d, L->norm_w, L->norm_b, HEAD_EPS, nthreads);
    linear(m, a, L, a->h, d, n, d, 3 * d, L->qkv, L->qkv_b, KIME_EPI_STORE, a->qkv, 3 * d,
           nthreads);
    kime_attention(L->attn, a->qkv, cu, rows, m->head_heads, d / m->head_heads, -1, NULL, NULL,
                   a->attn, d, a->attn_scratch, nthreads);
    linear(m, a, L, a->attn, d, n, d, d, L->out, L->out_b, KIME_EPI_ACCUM, a->x, d, nthreads);
    kime_layer_norm(a->x, a->h, n, d, L->norm2_w, L->norm2_b, HEAD_EPS, nthreads);
    linear(m, a, L, a->h, d, n, d, 4 * d, L->up, L->up_b, KIME_EPI_RELU, a->ffn, 4 * d, nthreads);
    linear(m, a, L, a->ffn, 4 * d, n, 4 * d, d, L->down, L->down_b, KIME_EPI_ACCUM, a->x, d,
           nthreads);
}

/* The decision head's last layer, for the tokens read after it only: each row's first token (the
 * act head) and its markers (the scorer), copied in that order into xc's rows a->qcu[r].. (a row
 * of k markers takes k + 1). Keys and values need every token, so the norm and the QKV GEMM run
 * on all n; attention, the out projection and the feed-forward block run on those rows alone.
 * Every op is per row (kime_attention_some gives a query the bits of the full attention), so each
 * gets the bits of the full layer at about 4% less work on a base model. */
static void head_layer_last(const kime_model *m, const kime_arena *a, const kime_layer *L,
                            const int32_t *cu, int rows, int n, const int32_t *markers,
                            const int32_t *mcu, float *xc, int nthreads) {
    const int d = m->d;
    const size_t row_bytes = (size_t)d * sizeof(float);
    int32_t *qcu = a->qcu;
    float *qc = a->ffn; /* the kept rows' queries: free until the feed-forward block */
    kime_layer_norm(a->x, a->h, n, d, L->norm_w, L->norm_b, HEAD_EPS, nthreads);
    linear(m, a, L, a->h, d, n, d, 3 * d, L->qkv, L->qkv_b, KIME_EPI_STORE, a->qkv, 3 * d,
           nthreads);
    for (int r = 0; r <= rows; r++)
        qcu[r] = r + mcu[r];
    for (int r = 0; r < rows; r++)
        for (int c = qcu[r]; c < qcu[r + 1]; c++) {
            int t = cu[r] + (c == qcu[r] ? 0 : markers[mcu[r] + c - qcu[r] - 1]);
            memcpy(qc + (size_t)c * d, a->qkv + (size_t)t * 3 * d, row_bytes);
            memcpy(xc + (size_t)c * d, a->x + (size_t)t * d, row_bytes);
        }
    const int nq = qcu[rows];
    kime_attention_some(L->attn, qc, d, qcu, a->qkv, cu, rows, m->head_heads, d / m->head_heads,
                        a->attn, d, a->attn_scratch, nthreads);
    linear(m, a, L, a->attn, d, nq, d, d, L->out, L->out_b, KIME_EPI_ACCUM, xc, d, nthreads);
    kime_layer_norm(xc, a->h, nq, d, L->norm2_w, L->norm2_b, HEAD_EPS, nthreads);
    linear(m, a, L, a->h, d, nq, d, 4 * d, L->up, L->up_b, KIME_EPI_RELU, a->ffn, 4 * d, nthreads);
    linear(m, a, L, a->ffn, 4 * d, nq, 4 * d, d, L->down, L->down_b, KIME_EPI_ACCUM, xc, d,
           nthreads);
}

void kime_act_features(const float *logits, int k, float *out) {
    float mx = k > 0 ? logits[0] : 0.f; /* a row without options reads no logit */
    for (int j = 1; j < k; j++) mx = logits[j] > mx ? logits[j] : mx;
    float sum = 0.f, top1 = 0.f, top2 = 0.f, ent = 0.f;
    for (int j = 0; j < k; j++) sum += expf(logits[j] - mx);
    for (int j = 0; j < k; j++) {
        float p = expf(logits[j] - mx) / sum;
        ent -= p * logf(p > 1e-9f ? p : 1e-9f);
        if (p > top1) {
            top2 = top1;
            top1 = p;
        } else if (p > top2) {
            top2 = p;
        }
    }
    float kk = (float)(k < 2 ? 2 : k);
    out[0] = top1;
    out[1] = top1 - top2;
    out[2] = ent / logf(kk);
    out[3] = kk / 255.0f;
}

void kime_act_head(int isa, const float *x, const int32_t *cu, int rows, int d,
                   const float *logits, const int32_t *mcu, const float *w0, const float *b0,
                   const float *w2, const float *b2, int n_act, float *act_in, float *act_h,
                   float *gemm_scratch, float *act, int nthreads) {
    int din = d + 4;
    for (int r = 0; r < rows; r++) {
        float *in = act_in + (size_t)r * din;
        memcpy(in, x + (size_t)cu[r] * d, d * sizeof(float));
        kime_act_features(logits + mcu[r], mcu[r + 1] - mcu[r], in + d);
    }
    kime_gemm(isa, act_in, din, rows, din, KIME_ACT_HIDDEN, w0, b0, KIME_EPI_GELU, act_h,
              KIME_ACT_HIDDEN, gemm_scratch, nthreads);
    kime_gemm(isa, act_h, KIME_ACT_HIDDEN, rows, KIME_ACT_HIDDEN, n_act, w2, b2, KIME_EPI_STORE,
              act, n_act, gemm_scratch, nthreads);
    for (int r = 0; r < rows; r++) {
        float *row = act + (size_t)r * n_act, mx = row[0], sum = 0.f;
        for (int i = 1; i < n_act; i++) mx = row[i] > mx ? row[i] : mx;
        for (int i = 0; i < n_act; i++) sum += (row[i] = expf(row[i] - mx));
        for (int i = 0; i < n_act; i++) row[i] /= sum;
    }
}

/* The guards every entry shares: 0, or kime_forward's negative codes. */
static int check_batch(const kime_model *m, const kime_arena *a, const int32_t *ids,
                       const int32_t *cu, int rows, const int32_t *pos) {
    int n = cu[rows];
    if (n > a->max_tokens || rows > a->max_rows) return -1;
    for (int t = 0; t < n; t++)
        if (ids[t] < 0 || ids[t] >= m->vocab) return -2;
    for (int r = 0; r < rows; r++)
        if (cu[r + 1] - cu[r] > m->max_pos) return -3;
    if (pos)
        for (int t = 0; t < n; t++)
            if (pos[t] < 0 || pos[t] >= m->max_pos) return -4;
    return 0;
}

/* The ModernBERT encoder through its final norm: a->x holds the last hidden state. Decisions and
 * embeddings run this same code, so both see the same bits of it. */
static void encode(const kime_model *m, const kime_arena *a, const int32_t *ids, const int32_t *cu,
                   int rows, const int32_t *pos, const int32_t *opt, int nthreads) {
    int n = cu[rows];
    embed(m, ids, n, a->x, a->h, nthreads);
    for (int i = 0; i < m->layers; i++)
        encoder_layer(m, a, &m->enc[i], cu, rows, n, pos, opt, nthreads);
    kime_layer_norm(a->x, a->x, n, m->d, m->final_norm_w, m->final_norm_b, m->norm_eps, nthreads);
}

#define POOL_COLS 64
typedef struct {
    const float *x;
    const int32_t *cu;
    float *out;
    int d, chunks;
} pool_job;

static void mean_pool_task(void *ctx, int job, int tid)
{
    const pool_job *j = (const pool_job *)ctx;
    const int d = j->d, r = job / j->chunks, c0 = (job % j->chunks) * POOL_COLS;
    const int width = d - c0 < POOL_COLS ? d - c0 : POOL_COLS;
    (void)tid;
    double acc[POOL_COLS];
    for (int i = 0; i < width; i++) acc[i] = 0.0;
    for (int t = j->cu[r]; t < j->cu[r + 1]; t++) {
        const float *row = j->x + (size_t)t * d + c0;
        for (int i = 0; i < width; i++) acc[i] += row[i];
    }
    const int len = j->cu[r + 1] - j->cu[r];
    const double count = len > 0 ? (double)len : 1.0; /* Laya clamps the count at 1 */
    float *dst = j->out + (size_t)r * d + c0;
    for (int i = 0; i < width; i++) dst[i] = (float)(acc[i] / count);
}

void kime_mean_pool(const float *x, const int32_t *cu, int rows, int d, float *out,
                    int nthreads) {
    pool_job j = {x, cu, out, d, (d + POOL_COLS - 1) / POOL_COLS};
    kime_parallel(nthreads, rows * j.chunks, mean_pool_task, &j);
}

int kime_embed(const kime_model *m, const kime_arena *a, const int32_t *ids, const int32_t *cu,
               int rows, float *pooled, int nthreads) {
    int rc = check_batch(m, a, ids, cu, rows, NULL);
    if (rc != 0) return rc;
    encode(m, a, ids, cu, rows, NULL, NULL, nthreads);
    kime_mean_pool(a->x, cu, rows, m->d, pooled, nthreads);
    return 0;
}

/* x's tokens += their row's question-type embedding (type_emb[qtype[r]]), a chunk of tokens
 * per task. */
typedef struct {
    const kime_model *m;
    float *x;
    const int32_t *cu, *qtype;
    int rows, chunk;
} types_job;

static void types_task(void *ctx, int task, int tid)
{
    const types_job *j = (const types_job *)ctx;
    const int d = j->m->d, n = j->cu[j->rows], t0 = task * j->chunk;
    const int t1 = t0 + j->chunk < n ? t0 + j->chunk : n;
    (void)tid;
    int r = 0;
    while (t0 >= j->cu[r + 1]) r++;
    for (int t = t0; t < t1; t++) {
        while (t >= j->cu[r + 1]) r++;
        const float *type = j->m->type_emb + (size_t)j->qtype[r] * d;
        float *row = j->x + (size_t)t * d;
        for (int i = 0; i < d; i++) row[i] += type[i];
    }
}

static void add_types(const kime_model *m, float *x, const int32_t *cu, int rows,
                      const int32_t *qtype, int nthreads) {
    const int n = cu[rows];
    if (n <= 0) return;
    types_job j = {m, x, cu, qtype, rows, kime_chunk(n, nthreads, 4, 8)};
    kime_parallel(nthreads, (n + j.chunk - 1) / j.chunk, types_task, &j);
}

/* The scorer's dot product rounds each product, as on x86 (no contraction in this file). */
int kime_forward(const kime_model *m, const kime_arena *a, const int32_t *ids,
                 const int32_t *cu, int rows, const int32_t *markers, const int32_t *mcu,
                 const int32_t *qtype, const int32_t *pos, const int32_t *opt,
                 float *logits, float *act, int nthreads) {
    int d = m->d, n = cu[rows], n_markers = mcu[rows];
    if (n_markers > a->max_markers) return -1;
    if (!pos || !opt) pos = opt = NULL; /* both or neither */
    int rc = check_batch(m, a, ids, cu, rows, pos);
    if (rc != 0) return rc;
    encode(m, a, ids, cu, rows, pos, opt, nthreads);

    add_types(m, a->x, cu, rows, qtype, nthreads);
    /* After the head, the scorer and the act head read each row's markers and first token of
     * the hidden state F: row r's first token is F's row first[r], its marker j (of mcu[r]..) the
     * row first[r] + 1 + j - mcu[r] when the last layer kept only those rows, else cu[r] +
     * markers[j]. A batch whose kept rows would not fit the arena (never one kime lays out)
     * runs the last layer on every token. */
    const float *F = a->x;
    const int32_t *first = cu;
    const int kept = m->head_layers > 0 && rows + n_markers <= a->max_tokens;
    for (int j = 0; j < m->head_layers - kept; j++)
        head_layer(m, a, &m->head[j], cu, rows, n, nthreads);
    if (kept) {
        head_layer_last(m, a, &m->head[m->head_layers - 1], cu, rows, n, markers, mcu, a->m2,
                        nthreads);
        F = a->m2;
        first = a->qcu;
    }

    /* Scorer: the hidden state at each marker -> LayerNorm -> Linear -> GELU -> one logit. */
    for (int r = 0; r < rows; r++)
        for (int j = mcu[r]; j < mcu[r + 1]; j++) {
            int t = kept ? first[r] + 1 + j - mcu[r] : cu[r] + markers[j];
            memcpy(a->m + (size_t)j * d, F + (size_t)t * d, d * sizeof(float));
        }
    kime_layer_norm(a->m, a->h, n_markers, d, m->sc_norm_w, m->sc_norm_b, HEAD_EPS, nthreads);
    kime_gemm(m->isa, a->h, d, n_markers, d, d, m->sc1, m->sc1_b, KIME_EPI_GELU, a->m, d,
              a->gemm_scratch, nthreads);
    for (int j = 0; j < n_markers; j++) {
        const float *row = a->m + (size_t)j * d;
        float s = 0.f;
        for (int i = 0; i < d; i++) s += row[i] * m->sc3[i];
        logits[j] = s + m->sc3_b;
    }

    kime_act_head(m->isa, F, first, rows, d, logits, mcu, m->act0, m->act0_b, m->act2, m->act2_b,
                  m->n_act, a->act_in, a->act_h, a->gemm_scratch, act, nthreads);
    return 0;
}
