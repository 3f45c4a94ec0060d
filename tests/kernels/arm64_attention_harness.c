/* A C harness over attention, RoPE (kime/_cpu/csrc/attention.c) and LayerNorm (forward.c's
 * kime_layer_norm) for any architecture: built natively on x86 and cross-compiled for aarch64
 * (run under qemu-user) by tests/kernels/test_attention_arm64.py.
 *
 * For the portable level and the best level kime_isa_detect() allows (KIME_ISA caps it; each
 * level is then forced through KIME_ISA), over random cases:
 *   - attention: rows of mixed lengths (1 up to > 2 * QB), head dims 2..128, half windows -1, 0,
 *     small, large and n - 2, sequential rows and the parallel layout's position and option ids
 *     (laya's rule, kime.layout.parallel_layout), against a double reference with
 *     FP32.attention's tolerance (tests/tolerances.py: 1e-5 + 1e-5 * |want|);
 *   - RoPE: to the bit against x * cos + rotate_half(x) * sin with each product rounded (the
 *     reference's float32 bits), by row index and by position ids; and BF16 attention with
 *     RoPE inside (kime_attention_rope) to the bit against RoPE then attention;
 *   - BF16 attention (KIME_ATTN_BF16) on the same batches: against double on its own rounded
 *     operands (the scaled queries, keys and values rounded to bfloat16 as the kernel rounds
 *     them, bf16.h), within FP32's tolerance plus 2^-8 of the probability-weighted mean |v|
 *     for the probabilities' own rounding (BF16.attention_probs);
 *   - LayerNorm: against double (FP32.layer_norm: 1e-5 + 1e-5 * |want|), widths over every tail
 *     of the eight partial sums, with and without bias, in place;
 *   - each: the same bits on 1 and 3 threads, and for rows run in another batch.
 * It prints one FNV-1a hash of the output bits per (level, kind, case), so the aarch64 build's
 * hashes can be compared with the native x86 build's, and "isa NAME features BITS" first.
 * Exit status 1 on a failure.
 */
/* The references round every product (no FMA contraction, which aarch64's GCC does by default);
 * the kernel sources are compiled with setup.py's flags. */
#pragma GCC optimize("fp-contract=off")
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bf16.h"
#include "forward.h"
#include "kernels.h"

static uint64_t rng_state;

static uint64_t next(void)
{
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static int rnd(int n) { return (int)(next() % (uint64_t)n); } /* 0 .. n - 1 */

/* roughly normal (the sum of four uniforms), the same floats on every architecture */
static float randn(void)
{
    double s = 0.0;
    for (int i = 0; i < 4; i++)
        s += (double)(next() >> 11) * 0x1.0p-53;
    return (float)((s - 2.0) * 1.7320508075688772);
}

static void fill(float *x, size_t n, float scale, float offset)
{
    for (size_t i = 0; i < n; i++)
        x[i] = randn() * scale + offset;
}

static int failures;

#define FAIL(...)                                                                              \
    do {                                                                                       \
        printf("FAIL " __VA_ARGS__);                                                           \
        printf("\n");                                                                          \
        failures++;                                                                            \
    } while (0)

static uint64_t fnv(uint64_t h, const float *x, size_t n)
{
    const unsigned char *p = (const unsigned char *)x;
    for (size_t i = 0; i < n * sizeof(float); i++)
        h = (h ^ p[i]) * 0x100000001b3ULL;
    return h;
}

static void *aligned(size_t bytes)
{
    void *p = NULL;
    if (posix_memalign(&p, 64, bytes ? bytes : 1))
        abort();
    return p;
}

#define MAXROWS 5

/* One attention batch: R rows of lens, H heads of hd, its q/k/v and (parallel) ids. */
typedef struct {
    int R, H, hd, w, parallel, T;
    int32_t cu[MAXROWS + 1];
    float *qkv;
    int32_t *pos, *opt;
} batch;

/* laya's parallel layout of a row of n tokens (kime.layout.parallel_layout): an instruction,
 * `slots` option spans from the same position on (option ids 1..), the closing [SEP] and the
 * state after the longest span; cut to n tokens as max_len cuts a row. */
static void parallel_row(int n, int32_t *pos, int32_t *opt)
{
    const int start = 1 + rnd(8), slots = rnd(5);
    int len = 0, longest = 0;
    for (int i = 0; i < start && len < n; i++, len++)
        pos[len] = i, opt[len] = 0;
    for (int s = 0; s < slots; s++) {
        const int span = 1 + rnd(12);
        longest = span > longest ? span : longest;
        for (int i = 0; i < span && len < n; i++, len++)
            pos[len] = start + i, opt[len] = s + 1;
    }
    for (int p = start + longest; len < n; len++, p++)
        pos[len] = p, opt[len] = 0;
}

static void make_batch(batch *b, int c)
{
    static const int HDS[] = {2, 3, 7, 16, 24, 32, 64, 128};
    b->hd = HDS[c % 8];
    b->H = b->hd >= 64 ? 1 : 1 + rnd(3);
    b->R = 1 + rnd(b->hd >= 64 ? 2 : MAXROWS);
    b->parallel = c % 3 == 2;
    int maxlen = 0;
    b->cu[0] = 0;
    for (int r = 0; r < b->R; r++) {
        /* 1, short, or past two query blocks (2 * 32) */
        const int pick = (r + c) % 3;
        const int n = pick == 0 ? 1 + rnd(3) * (c & 1) * 10 : pick == 1 ? 2 + rnd(40) : 65 + rnd(30);
        b->cu[r + 1] = b->cu[r] + n;
        maxlen = n > maxlen ? n : maxlen;
    }
    b->T = b->cu[b->R];
    const int windows[] = {-1, 0, 1 + rnd(6), 1000, maxlen - 2 > 0 ? maxlen - 2 : 0, 8 + rnd(20)};
    b->w = windows[c % 6];
    const size_t n = (size_t)b->T * 3 * b->H * b->hd;
    b->qkv = aligned(n * sizeof(float));
    fill(b->qkv, n, 1.5f, 0.0f); /* scores of standard deviation 2.25: far from uniform */
    b->pos = b->opt = NULL;
    if (b->parallel) {
        b->pos = aligned((size_t)b->T * sizeof(int32_t));
        b->opt = aligned((size_t)b->T * sizeof(int32_t));
        for (int r = 0; r < b->R; r++)
            parallel_row(b->cu[r + 1] - b->cu[r], b->pos + b->cu[r], b->opt + b->cu[r]);
    }
}

/* out [T, H*hd] for rows r0.. r0 + R - 1 of b as their own batch, products in `precision` */
static void attend(const batch *b, int precision, int r0, int R, float *out, int threads)
{
    int32_t cu[MAXROWS + 1];
    for (int r = 0; r <= R; r++)
        cu[r] = b->cu[r0 + r] - b->cu[r0];
    const size_t t0 = (size_t)b->cu[r0], ld = (size_t)3 * b->H * b->hd;
    float *scratch = aligned(kime_attention_scratch_floats(precision, cu[R], b->H, b->hd,
                                                           threads) * sizeof(float));
    kime_attention(precision, b->qkv + t0 * ld, cu, R, b->H, b->hd, b->w,
                   b->pos ? b->pos + t0 : NULL, b->opt ? b->opt + t0 : NULL, out, b->H * b->hd,
                   scratch, threads);
    free(scratch);
}

static float bf16_of(float x)
{
    const uint32_t u = (uint32_t)round_bf16(x) << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* The double reference: the full score matrix per row and head, the window on row indices (or
 * position ids), laya's option mask. With bf16, on BF16 attention's rounded operands (the
 * queries scaled by log2(e) / sqrtf(hd) in float first, scores in base 2), and `mag` gets the
 * probability-weighted mean |v|. */
static void attend_ref(const batch *b, int bf16, double *out, double *mag)
{
    const int H = b->H, hd = b->hd, ld = 3 * H * hd;
    const float scale = 1.4426950408889634f / sqrtf((float)hd);
    double *p = aligned((size_t)b->T * sizeof(double));
    for (int r = 0; r < b->R; r++) {
        const int lo = b->cu[r], n = b->cu[r + 1] - lo;
        for (int h = 0; h < H; h++)
            for (int i = 0; i < n; i++) {
                const float *q = b->qkv + (size_t)(lo + i) * ld + h * hd;
                double mx = -INFINITY, sum = 0.0;
                for (int j = 0; j < n; j++) {
                    int seen;
                    if (b->parallel) {
                        const int pi = b->pos[lo + i], pj = b->pos[lo + j];
                        const int oi = b->opt[lo + i], oj = b->opt[lo + j];
                        seen = (b->w < 0 || abs(pi - pj) <= b->w) &&
                               !(oi > 0 && oj > 0 && oi != oj);
                    } else {
                        seen = b->w < 0 || abs(i - j) <= b->w;
                    }
                    double s = -INFINITY;
                    if (seen) {
                        const float *k = b->qkv + (size_t)(lo + j) * ld + (H + h) * hd;
                        s = 0.0;
                        for (int d = 0; d < hd; d++)
                            s += bf16 ? (double)bf16_of(q[d] * scale) * bf16_of(k[d])
                                      : (double)q[d] * k[d];
                        s = bf16 ? s * log(2.0) : s / sqrt((double)hd);
                    }
                    p[j] = s;
                    mx = s > mx ? s : mx;
                }
                for (int j = 0; j < n; j++)
                    sum += (p[j] = p[j] == -INFINITY ? 0.0 : exp(p[j] - mx));
                double *o = out + (size_t)(lo + i) * H * hd + h * hd;
                for (int d = 0; d < hd; d++) {
                    double acc = 0.0, size = 0.0;
                    for (int j = 0; j < n; j++) {
                        const float v = b->qkv[(size_t)(lo + j) * ld + (2 * H + h) * hd + d];
                        acc += p[j] * (bf16 ? bf16_of(v) : v);
                        size += p[j] * fabs(bf16 ? bf16_of(v) : v);
                    }
                    o[d] = acc / sum;
                    if (mag)
                        mag[(size_t)(lo + i) * H * hd + h * hd + d] = size / sum;
                }
            }
    }
    free(p);
}

/* Attention in `precision` against its reference (mag: BF16's probability bound's scale). */
static uint64_t check_attention(const batch *b, int precision, const double *want,
                                const double *mag, int level, int c)
{
    const size_t n = (size_t)b->T * b->H * b->hd;
    const char *kind = precision == KIME_ATTN_BF16 ? "attention_bf16" : "attention";
    float *out = aligned(n * sizeof(float)), *again = aligned(n * sizeof(float));
    attend(b, precision, 0, b->R, out, 1);
    double worst = 0.0;
    for (size_t i = 0; i < n; i++) {
        const double tol = 1e-5 + 1e-5 * fabs(want[i]) + (mag ? 1.01 * 0x1p-8 * mag[i] : 0.0);
        const double err = fabs((double)out[i] - want[i]) / tol;
        worst = err > worst || err != err ? err : worst;
    }
    if (!(worst <= 1.0))
        FAIL("%s accuracy level=%d case=%d H=%d hd=%d w=%d parallel=%d: %.2fx tol", kind, level,
             c, b->H, b->hd, b->w, b->parallel, worst);
    attend(b, precision, 0, b->R, again, 3);
    if (memcmp(out, again, n * sizeof(float)))
        FAIL("%s threads level=%d case=%d: 3 threads differ", kind, level, c);
    if (b->R > 1) { /* rows 1.. as a batch of their own */
        const size_t at = (size_t)b->cu[1] * b->H * b->hd;
        attend(b, precision, 1, b->R - 1, again, 2);
        if (memcmp(out + at, again, (n - at) * sizeof(float)))
            FAIL("%s batch level=%d case=%d: rows 1.. alone differ", kind, level, c);
    }
    const uint64_t h = fnv(0xcbf29ce484222325ULL, out, n);
    free(out), free(again);
    return h;
}

/* RoPE over a batch's q and k, by row index (pos NULL) or position ids, checked to the bit. */
static uint64_t check_rope(const batch *b, int by_pos, int level, int c)
{
    const int H = b->H, hd = b->hd, half = hd / 2, ld = 3 * H * hd, maxpos = 128;
    const size_t n = (size_t)b->T * ld;
    float *x = aligned(n * sizeof(float)), *y = aligned(n * sizeof(float));
    float *cs = aligned((size_t)maxpos * (half + 1) * sizeof(float));
    float *sn = aligned((size_t)maxpos * (half + 1) * sizeof(float));
    int32_t *pos = aligned((size_t)b->T * sizeof(int32_t));
    fill(cs, (size_t)maxpos * half, 0.6f, 0.0f); /* any table: the kernel only reads it */
    fill(sn, (size_t)maxpos * half, 0.6f, 0.0f);
    for (int r = 0; r < b->R; r++)
        for (int t = b->cu[r]; t < b->cu[r + 1]; t++)
            pos[t] = by_pos ? rnd(maxpos) : t - b->cu[r];
    memcpy(x, b->qkv, n * sizeof(float));
    kime_rope(x, b->T, b->cu, b->R, H, hd, cs, sn, by_pos ? pos : NULL, 1);
    long off = 0;
    for (int t = 0; t < b->T; t++)
        for (int u = 0; u < 2 * H; u++) {
            const float *in = b->qkv + (size_t)t * ld + u * hd, *got = x + (size_t)t * ld + u * hd;
            const float *ct = cs + (size_t)pos[t] * half, *st = sn + (size_t)pos[t] * half;
            for (int i = 0; i < half; i++) {
                const float a = in[i], bb = in[i + half];
                const float ac = (float)((double)a * ct[i]), bs = (float)((double)bb * st[i]);
                const float bc = (float)((double)bb * ct[i]), as = (float)((double)a * st[i]);
                const float w0 = ac - bs, w1 = bc + as;
                off += memcmp(&w0, got + i, 4) != 0;
                off += memcmp(&w1, got + i + half, 4) != 0;
            }
        }
    for (size_t t = 0; t < (size_t)b->T; t++) /* v untouched */
        off += memcmp(b->qkv + t * ld + 2 * H * hd, x + t * ld + 2 * H * hd,
                      (size_t)H * hd * 4) != 0;
    if (off)
        FAIL("rope bits level=%d case=%d hd=%d pos=%d: %ld values differ", level, c, hd, by_pos,
             off);
    memcpy(y, b->qkv, n * sizeof(float));
    kime_rope(y, b->T, b->cu, b->R, H, hd, cs, sn, by_pos ? pos : NULL, 3);
    if (memcmp(x, y, n * sizeof(float)))
        FAIL("rope threads level=%d case=%d: 3 threads differ", level, c);
    /* kime_attention_rope with BF16 products rotates q and k as it reads them: the bits of
     * kime_attention on the rotated batch, and qkv left as it was */
    const size_t o = (size_t)b->T * H * hd;
    int32_t *opt = aligned((size_t)b->T * sizeof(int32_t));
    float *want = aligned(o * sizeof(float)), *got = aligned(o * sizeof(float));
    float *scr = aligned(kime_attention_scratch_floats(KIME_ATTN_BF16, b->T, H, hd, 3) *
                         sizeof(float));
    memset(opt, 0, (size_t)b->T * sizeof(int32_t));
    memcpy(y, b->qkv, n * sizeof(float));
    kime_attention(KIME_ATTN_BF16, x, b->cu, b->R, H, hd, b->w, by_pos ? pos : NULL,
                   by_pos ? opt : NULL, want, H * hd, scr, 3);
    kime_attention_rope(KIME_ATTN_BF16, y, b->cu, b->R, H, hd, b->w, by_pos ? pos : NULL,
                        by_pos ? opt : NULL, cs, sn, got, H * hd, scr, 3);
    if (memcmp(want, got, o * sizeof(float)))
        FAIL("attention_rope bits level=%d case=%d hd=%d pos=%d", level, c, hd, by_pos);
    if (memcmp(y, b->qkv, n * sizeof(float)))
        FAIL("attention_rope level=%d case=%d: wrote qkv", level, c);
    free(opt), free(want), free(got), free(scr);
    const uint64_t h = fnv(0xcbf29ce484222325ULL, x, n);
    free(x), free(y), free(cs), free(sn), free(pos);
    return h;
}

static uint64_t check_norm(int n, int d, int with_bias, float eps, int level)
{
    float *x = aligned((size_t)n * d * 4), *y = aligned((size_t)n * d * 4);
    float *z = aligned((size_t)n * d * 4), *w = aligned((size_t)d * 4), *b = aligned((size_t)d * 4);
    fill(x, (size_t)n * d, 3.0f, 2.0f);
    fill(w, d, 1.0f, 0.0f);
    fill(b, d, 1.0f, 0.0f);
    const float *bias = with_bias ? b : NULL;
    kime_layer_norm(x, y, n, d, w, bias, eps, 1);
    double worst = 0.0;
    for (int t = 0; t < n; t++) {
        const float *row = x + (size_t)t * d;
        double mean = 0.0, var = 0.0;
        for (int i = 0; i < d; i++)
            mean += row[i];
        mean /= d;
        for (int i = 0; i < d; i++)
            var += (row[i] - mean) * (row[i] - mean);
        var /= d;
        for (int i = 0; i < d; i++) {
            const double want = (row[i] - mean) / sqrt(var + (double)eps) * w[i] +
                                (bias ? bias[i] : 0.0);
            const double err = fabs(y[(size_t)t * d + i] - want) / (1e-5 + 1e-5 * fabs(want));
            worst = err > worst || err != err ? err : worst;
        }
    }
    if (!(worst <= 1.0))
        FAIL("norm accuracy level=%d n=%d d=%d bias=%d eps=%g: %.2fx tol", level, n, d,
             with_bias, eps, worst);
    kime_layer_norm(x, z, n, d, w, bias, eps, 3);
    if (memcmp(y, z, (size_t)n * d * 4))
        FAIL("norm threads level=%d n=%d d=%d: 3 threads differ", level, n, d);
    if (n > 1) {
        kime_layer_norm(x + d, z, n - 1, d, w, bias, eps, 2);
        if (memcmp(y + d, z, (size_t)(n - 1) * d * 4))
            FAIL("norm batch level=%d n=%d d=%d: rows 1.. alone differ", level, n, d);
    }
    memcpy(z, x, (size_t)n * d * 4); /* in place, as the final norm runs */
    kime_layer_norm(z, z, n, d, w, bias, eps, 2);
    if (memcmp(y, z, (size_t)n * d * 4))
        FAIL("norm in place level=%d n=%d d=%d: differs", level, n, d);
    const uint64_t h = fnv(0xcbf29ce484222325ULL, y, (size_t)n * d);
    free(x), free(y), free(z), free(w), free(b);
    return h;
}

#define CASES 48

int main(int argc, char **argv)
{
    const int best = kime_isa_detect(); /* KIME_ISA, if set, caps it */
    printf("isa %s features %u\n", kime_isa_name(best), kime_isa_arm_features());
    if (argc > 1 && strcmp(argv[1], "isa") == 0)
        return 0;
    const int levels[2] = {KIME_ISA_PORTABLE, best};
    batch b[CASES];
    double *want[CASES], *want_bf16[CASES], *mag[CASES];
    rng_state = 777;
    for (int c = 0; c < CASES; c++) {
        make_batch(&b[c], c);
        const size_t n = (size_t)b[c].T * b[c].H * b[c].hd * sizeof(double);
        want[c] = aligned(n), want_bf16[c] = aligned(n), mag[c] = aligned(n);
        attend_ref(&b[c], 0, want[c], NULL);
        attend_ref(&b[c], 1, want_bf16[c], mag[c]);
    }
    static const int NORM[][2] = {{1, 1}, {1, 7}, {3, 8}, {5, 9}, {7, 13}, {2, 17},
                                  {33, 65}, {4, 768}, {3, 1031}, {16, 64}};
    static const float EPS[] = {1e-5f, 1e-6f, 1e-12f, 0.1f};
    for (int li = 0; li < 2 - (best == KIME_ISA_PORTABLE); li++) {
        const int level = levels[li];
        const char *name = kime_isa_name(level);
        setenv("KIME_ISA", name, 1);
        if (kime_isa_detect() != level)
            FAIL("KIME_ISA=%s gives %s", name, kime_isa_name(kime_isa_detect()));
        for (int c = 0; c < CASES; c++) {
            const batch *bc = &b[c];
            printf("hash %s attention case=%d R=%d T=%d H=%d hd=%d w=%d parallel=%d %016llx\n",
                   name, c, bc->R, bc->T, bc->H, bc->hd, bc->w, bc->parallel,
                   (unsigned long long)check_attention(bc, KIME_ATTN_F32, want[c], NULL, level,
                                                       c));
            printf("hash %s attention_bf16 case=%d %016llx\n", name, c,
                   (unsigned long long)check_attention(bc, KIME_ATTN_BF16, want_bf16[c], mag[c],
                                                       level, c));
        }
        rng_state = 4242; /* the same tables and ids at every level */
        for (int c = 0; c < CASES; c += 3)
            for (int by_pos = 0; by_pos < 2 && b[c].hd % 2 == 0; by_pos++) /* even, as models */
                printf("hash %s rope case=%d hd=%d pos=%d %016llx\n", name, c, b[c].hd, by_pos,
                       (unsigned long long)check_rope(&b[c], by_pos, level, c));
        rng_state = 99;
        for (int s = 0; s < (int)(sizeof NORM / sizeof NORM[0]); s++)
            for (int with_bias = 0; with_bias < 2; with_bias++) {
                const float eps = EPS[(s + with_bias) % 4];
                printf("hash %s norm n=%d d=%d bias=%d eps=%g %016llx\n", name, NORM[s][0],
                       NORM[s][1], with_bias, eps,
                       (unsigned long long)check_norm(NORM[s][0], NORM[s][1], with_bias, eps,
                                                      level));
            }
    }
    printf("%s: %d failures\n", failures ? "FAILED" : "ok", failures);
    return failures ? 1 : 0;
}
