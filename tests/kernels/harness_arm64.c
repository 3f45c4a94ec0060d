/* A C check of the aarch64 INT8 and BF16 GEMMs (csrc/qgemm.c, csrc/bgemm.c), for a cross
 * compiler and qemu-user before (or beside) an arm64 Python: test_harness_arm64.py builds it with
 * `aarch64-linux-gnu-gcc -O3 -static -pthread` against the kernel sources and runs it under
 * qemu-aarch64-static once per QEMU_CPU model, so every dispatch branch runs.
 *
 * INT8, on every impl the CPU runs (KIME_QGEMM forces each): the raw INT32 sums equal an integer
 * reference over the same quantization (float32 multiply, nearest even, clamp to +-127), bit for
 * bit, over odd K, N and M tails, GEGLU packing, +-127 extremes, the K limit and 1-3 threads;
 * the SIMD impls' outputs agree bit for bit for every epilogue; a row's bits do not depend on the
 * thread count or its batch. BF16 (where the CPU has it): against the double product of the
 * bfloat16-rounded operands within FP32's sum error, bitwise across threads and batches.
 * Prints one "impl NAME: ..." line per kernel set and "FAIL ..." lines; exits 1 on a failure.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bgemm.h"
#include "qgemm.h"

static int failures;
static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static double urand(void) /* [0, 1) */
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (double)(rng_state >> 11) / 9007199254740992.0;
}

static float nrand(void) /* roughly standard normal: a sum of uniforms */
{
    double s = 0;
    for (int i = 0; i < 4; i++)
        s += urand();
    return (float)((s - 2.0) * 1.7320508);
}

static void *xalloc(size_t n)
{
    void *p = NULL;
    if (posix_memalign(&p, 64, n ? n : 64) != 0)
        abort();
    memset(p, 0, n ? n : 64);
    return p;
}

#define FAIL(...)                                                                              \
    do {                                                                                       \
        if (failures++ < 20) {                                                                 \
            printf("FAIL ");                                                                   \
            printf(__VA_ARGS__);                                                               \
            printf("\n");                                                                      \
        }                                                                                      \
    } while (0)

/* ---- INT8 --------------------------------------------------------------------------------- */

/* The reference quantization (tests/kernels/reference.py's quantize_int8). */
static float ref_quant(const float *x, int K, int32_t *q)
{
    float amax = 0;
    for (int k = 0; k < K; k++)
        amax = fabsf(x[k]) > amax ? fabsf(x[k]) : amax;
    const float inv = amax > 0 ? 127.0f / amax : 0.0f;
    for (int k = 0; k < K; k++) {
        volatile float t = x[k] * inv; /* one float32 rounding, never fused */
        float r = nearbyintf(t);
        q[k] = (int32_t)(r > 127 ? 127 : r < -127 ? -127 : r);
    }
    return amax / 127.0f;
}

static void ref_sums(const float *A, int M, const float *W, int N, int K, int64_t *out)
{
    int32_t *qa = xalloc((size_t)M * K * 4 + 4), *qw = xalloc((size_t)N * K * 4 + 4);
    for (int m = 0; m < M; m++)
        ref_quant(A + (size_t)m * K, K, qa + (size_t)m * K);
    for (int n = 0; n < N; n++)
        ref_quant(W + (size_t)n * K, K, qw + (size_t)n * K);
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            int64_t s = 0;
            for (int k = 0; k < K; k++)
                s += (int64_t)qa[(size_t)m * K + k] * qw[(size_t)n * K + k];
            out[(size_t)m * N + n] = s;
        }
    free(qa);
    free(qw);
}

static int check_int32(int isa, const float *A, int M, const float *W, int N, int K, int geglu,
                       const int64_t *want, int ldw, int threads, const char *what)
{
    void *packed = xalloc(kime_qgemm_packed_bytes(isa, N, K, geglu));
    kime_qgemm_pack(isa, W, N, K, geglu, packed);
    void *scratch = xalloc(kime_qgemm_scratch_bytes(isa, K, threads));
    int32_t *C = xalloc((size_t)M * N * 4);
    kime_qgemm_int32(isa, A, K, M, K, N, packed, geglu, C, N, scratch, threads);
    int bad = 0;
    for (int m = 0; m < M && !bad; m++)
        for (int n = 0; n < N; n++)
            if ((int64_t)C[(size_t)m * N + n] != want[(size_t)m * ldw + n]) {
                FAIL("%s int32 M=%d K=%d N=%d geglu=%d threads=%d at (%d,%d): %d != %lld", what,
                     M, K, N, geglu, threads, m, n, C[(size_t)m * N + n],
                     (long long)want[(size_t)m * ldw + n]);
                bad = 1;
                break;
            }
    free(packed);
    free(scratch);
    free(C);
    return !bad;
}

static int int8_sums_case(int isa, const char *name, int M, int K, int N)
{
    float *A = xalloc((size_t)M * K * 4), *W = xalloc((size_t)N * K * 4);
    for (size_t i = 0; i < (size_t)M * K; i++)
        A[i] = 3.0f * nrand();
    for (size_t i = 0; i < (size_t)N * K; i++)
        W[i] = nrand();
    W[0] = 40.0f; /* an outlier */
    if (N > 2)
        memset(W + 2 * (size_t)K, 0, (size_t)K * 4); /* a zero row */
    if (M > 1)
        memset(A + (size_t)(M - 1) * K, 0, (size_t)K * 4);
    int64_t *want = xalloc((size_t)M * N * 8);
    ref_sums(A, M, W, N, K, want);
    int ok = 1;
    for (int t = 1; t <= 3; t++) {
        ok &= check_int32(isa, A, M, W, N, K, 0, want, N, t, name);
        if (N >= 2) /* GEGLU packing of the first G rows: columns in W's row order */
            ok &= check_int32(isa, A, M, W, N - N % 2, K, 1, want, N, t, name);
    }
    free(A);
    free(W);
    free(want);
    return ok;
}

static int int8_extremes(int isa, const char *name, int M, int K, int N, int random)
{
    float *A = xalloc((size_t)M * K * 4), *W = xalloc((size_t)N * K * 4);
    for (size_t i = 0; i < (size_t)M * K; i++)
        A[i] = urand() < 0.5 ? -1.0f : 1.0f;
    for (size_t i = 0; i < (size_t)N * K; i++)
        W[i] = urand() < 0.5 ? -1.0f : 1.0f;
    for (int k = 0; k < K; k++) {
        A[k] = W[k] = 1.0f;
        A[K + k] = W[K + k] = -1.0f;
        if (random) {
            A[2 * (size_t)K + k] = nrand();
            W[2 * (size_t)K + k] = nrand();
        }
    }
    int64_t *want = xalloc((size_t)M * N * 8);
    ref_sums(A, M, W, N, K, want);
    int ok = check_int32(isa, A, M, W, N, K, 0, want, N, 2, name);
    if (want[0] != 127LL * 127 * K || want[1] != -127LL * 127 * K)
    {
        FAIL("%s extremes reference", name);
        ok = 0;
    }
    free(A);
    free(W);
    free(want);
    return ok;
}

/* The float outputs of one impl, for the bit-for-bit comparisons. */
static float *int8_out(int isa, const float *A, int M, const float *W, int N, int K,
                       const float *bias, int epi, const float *C0, int threads)
{
    const int geglu = epi == KIME_EPI_GEGLU, nout = geglu ? N / 2 : N;
    void *packed = xalloc(kime_qgemm_packed_bytes(isa, N, K, geglu));
    kime_qgemm_pack(isa, W, N, K, geglu, packed);
    void *scratch = xalloc(kime_qgemm_scratch_bytes(isa, K, threads));
    float *C = xalloc((size_t)M * nout * 4);
    if (C0)
        memcpy(C, C0, (size_t)M * nout * 4);
    kime_qgemm(isa, A, K, M, K, N, packed, bias, epi, C, nout, scratch, threads);
    free(packed);
    free(scratch);
    return C;
}

static const char *const EPI_NAMES[] = {"store", "accum", "gelu", "relu", "geglu"};

/* The dequantized, epilogued output against double arithmetic on the exact sums. */
static void int8_epilogue_case(int isa, const char *name, int M, int K, int N, int epi)
{
    const int geglu = epi == KIME_EPI_GEGLU, nout = geglu ? N / 2 : N;
    float *A = xalloc((size_t)M * K * 4), *W = xalloc((size_t)N * K * 4), *bias = xalloc(N * 4);
    float *C0 = xalloc((size_t)M * nout * 4);
    for (size_t i = 0; i < (size_t)M * K; i++)
        A[i] = nrand();
    for (size_t i = 0; i < (size_t)N * K; i++)
        W[i] = nrand();
    for (int i = 0; i < N; i++)
        bias[i] = nrand();
    for (size_t i = 0; i < (size_t)M * nout; i++)
        C0[i] = nrand();
    float *got = int8_out(isa, A, M, W, N, K, bias, epi, epi == KIME_EPI_ACCUM ? C0 : NULL, 1);
    int64_t *sums = xalloc((size_t)M * N * 8);
    ref_sums(A, M, W, N, K, sums);
    int32_t *q = xalloc((size_t)K * 4 + 4);
    double worst = 0;
    for (int m = 0; m < M; m++) {
        const double sa = ref_quant(A + (size_t)m * K, K, q);
        for (int j = 0; j < nout; j++) {
            const double swa = ref_quant(W + (size_t)j * K, K, q);
            double x = (double)sums[(size_t)m * N + j] * sa * swa + bias[j], want;
            double scale = fabs(x) + 1;
            if (epi == KIME_EPI_GEGLU) {
                const double swg = ref_quant(W + (size_t)(j + nout) * K, K, q);
                const double g = (double)sums[(size_t)m * N + j + nout] * sa * swg + bias[j + nout];
                want = 0.5 * x * (1 + erf(x / sqrt(2.0))) * g;
                scale = (fabs(x) + 1) * (fabs(g) + 1);
            } else if (epi == KIME_EPI_ACCUM) {
                want = C0[(size_t)m * nout + j] + x;
                scale += fabs(C0[(size_t)m * nout + j]);
            } else if (epi == KIME_EPI_GELU) {
                want = 0.5 * x * (1 + erf(x / sqrt(2.0)));
            } else if (epi == KIME_EPI_RELU) {
                want = x < 0 ? 0 : x;
            } else {
                want = x;
            }
            const double err = fabs(got[(size_t)m * nout + j] - want) / scale;
            worst = err > worst ? err : worst;
        }
    }
    if (worst > 1e-5)
        FAIL("%s %s M=%d K=%d N=%d: relative error %.3g", name, EPI_NAMES[epi], M, K, N, worst);
    free(A), free(W), free(bias), free(C0), free(got), free(sums), free(q);
}

/* A row's bits whatever its batch and the thread count. */
static void int8_determinism(int isa, const char *name, int epi)
{
    const int M = 333, K = 768, N = epi == KIME_EPI_GEGLU ? 100 : 33;
    const int nout = epi == KIME_EPI_GEGLU ? N / 2 : N;
    float *A = xalloc((size_t)M * K * 4), *W = xalloc((size_t)N * K * 4), *bias = xalloc(N * 4);
    float *C0 = xalloc((size_t)M * nout * 4);
    for (size_t i = 0; i < (size_t)M * K; i++)
        A[i] = nrand();
    for (size_t i = 0; i < (size_t)N * K; i++)
        W[i] = nrand();
    for (int i = 0; i < N; i++)
        bias[i] = nrand();
    for (size_t i = 0; i < (size_t)M * nout; i++)
        C0[i] = nrand();
    const float *c0 = epi == KIME_EPI_ACCUM ? C0 : NULL;
    float *full = int8_out(isa, A, M, W, N, K, bias, epi, c0, 1);
    for (int t = 2; t <= 3; t++) {
        float *o = int8_out(isa, A, M, W, N, K, bias, epi, c0, t);
        if (memcmp(o, full, (size_t)M * nout * 4))
            FAIL("%s %s: threads=%d changes bits", name, EPI_NAMES[epi], t);
        free(o);
    }
    static const int rows[] = {0, 5, 13, 14, 100, 331, 332}, sizes[] = {1, 7, 64};
    for (int r = 0; r < 7; r++)
        for (int s = 0; s < 3; s++) {
            int start = rows[r] - sizes[s] / 2;
            start = start < 0 ? 0 : start > M - sizes[s] ? M - sizes[s] : start;
            float *o = int8_out(isa, A + (size_t)start * K, sizes[s], W, N, K, bias, epi,
                                c0 ? c0 + (size_t)start * nout : NULL, 1 + s % 2);
            if (memcmp(o + (size_t)(rows[r] - start) * nout, full + (size_t)rows[r] * nout,
                       (size_t)nout * 4))
                FAIL("%s %s: row %d in a batch of %d changes bits", name, EPI_NAMES[epi],
                     rows[r], sizes[s]);
            free(o);
        }
    free(A), free(W), free(bias), free(C0), free(full);
}

static const char *const IMPLS[] = {"portable", "neon", "sdot", "smmla"};

static void int8_all(int isa)
{
    static const int Ks[] = {1, 3, 5, 7, 8, 9, 17, 67, 768};
    static const int Ns[] = {1, 5, 8, 9, 31, 33, 100};
    static const int Ms[] = {1, 2, 5, 12, 13, 25, 64, 333};
    int ran[4] = {0};
    for (int i = 0; i < 4; i++) {
        setenv("KIME_QGEMM", IMPLS[i], 1);
        const char *runs = kime_qgemm_impl_name(kime_qgemm_impl(isa));
        if (strcmp(runs, IMPLS[i]) != 0) {
            printf("impl %s: skipped (this CPU runs %s)\n", IMPLS[i], runs);
            continue;
        }
        ran[i] = 1;
        const int before = failures;
        int cases = 0;
        for (int a = 0; a < 9; a++)
            for (int b = 0; b < 7; b++)
                for (int c = 0; c < 8; c++, cases++)
                    int8_sums_case(isa, IMPLS[i], Ms[c], Ks[a], Ns[b]);
        int8_extremes(isa, IMPLS[i], 13, 768, 33, 0);
        int8_extremes(isa, IMPLS[i], 3, 133143, 5, 1); /* qgemm.h's K limit */
        for (int e = 0; e < 5; e++) {
            int8_epilogue_case(isa, IMPLS[i], 7, 67, 34, e);
            int8_epilogue_case(isa, IMPLS[i], 64, 768, 100, e);
            int8_determinism(isa, IMPLS[i], e);
        }
        printf("impl %s: %d int32 shapes x 3 threads (+GEGLU), extremes, K limit, 5 epilogues, "
               "determinism: %s\n", IMPLS[i], cases, failures == before ? "ok" : "FAILED");
    }
    /* the SIMD impls agree bit for bit */
    int simd = ran[1] + ran[2] + ran[3];
    if (simd >= 2) {
        static const int shapes[][3] = {{1, 3, 6}, {7, 67, 34}, {64, 768, 100}, {333, 45, 70}};
        const int before = failures;
        for (int e = 0; e < 5; e++)
            for (int s = 0; s < 4; s++) {
                const int M = shapes[s][0], K = shapes[s][1], N = shapes[s][2];
                const int nout = e == KIME_EPI_GEGLU ? N / 2 : N;
                float *A = xalloc((size_t)M * K * 4), *W = xalloc((size_t)N * K * 4);
                float *bias = xalloc(N * 4), *C0 = xalloc((size_t)M * nout * 4);
                for (size_t i = 0; i < (size_t)M * K; i++)
                    A[i] = 2 * nrand();
                for (size_t i = 0; i < (size_t)N * K; i++)
                    W[i] = nrand();
                for (int i = 0; i < N; i++)
                    bias[i] = nrand();
                for (size_t i = 0; i < (size_t)M * nout; i++)
                    C0[i] = nrand();
                float *first = NULL;
                for (int i = 1; i < 4; i++) {
                    if (!ran[i])
                        continue;
                    setenv("KIME_QGEMM", IMPLS[i], 1);
                    float *o = int8_out(isa, A, M, W, N, K, bias, e,
                                        e == KIME_EPI_ACCUM ? C0 : NULL, 2);
                    if (!first)
                        first = o;
                    else {
                        if (memcmp(o, first, (size_t)M * nout * 4))
                            FAIL("%s %s M=%d K=%d N=%d differs from the first SIMD impl",
                                 IMPLS[i], EPI_NAMES[e], M, K, N);
                        free(o);
                    }
                }
                free(first), free(A), free(W), free(bias), free(C0);
            }
        printf("simd impls agree bit for bit (%d of them, 5 epilogues): %s\n", simd,
               failures == before ? "ok" : "FAILED");
    }
    unsetenv("KIME_QGEMM");
}

/* ---- BF16 --------------------------------------------------------------------------------- */

static float bf16r(float x) /* reference.py's bf16: nearest even, NaN quiet, denormals to 0 */
{
    uint32_t u;
    memcpy(&u, &x, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        u = (u | 0x00400000u) & 0xffff0000u;
    else {
        if (!(u & 0x7f800000u))
            u &= 0x80000000u;
        u = (u + 0x7fffu + (u >> 16 & 1u)) & 0xffff0000u;
    }
    memcpy(&x, &u, 4);
    return x;
}

static float *bf16_out(const float *A, int M, const float *W, int N, int K, const float *bias,
                       int epi, const float *C0, int threads)
{
    const int geglu = epi == KIME_EPI_GEGLU, nout = geglu ? N / 2 : N;
    void *packed = xalloc(kime_bgemm_packed_bytes(N, K, geglu));
    kime_bgemm_pack(W, N, K, geglu, packed);
    void *scratch = xalloc(kime_bgemm_scratch_bytes(K, threads));
    float *C = xalloc((size_t)M * nout * 4 + 4);
    if (C0)
        memcpy(C, C0, (size_t)M * nout * 4);
    kime_bgemm(A, K, M, K, N, packed, bias, epi, C, nout, scratch, threads);
    free(packed);
    free(scratch);
    return C;
}

static void bf16_all(int isa)
{
    const char *why = kime_bgemm_missing(isa);
    if (why) {
        printf("bf16: skipped (missing: %s)\n", why);
        return;
    }
    const int before = failures;
    static const int Ks[] = {1, 2, 3, 4, 5, 17, 64, 768};
    static const int Ns[] = {1, 5, 8, 9, 31, 32, 33, 100};
    static const int Ms[] = {1, 2, 7, 13, 14, 15, 64, 333};
    int cases = 0;
    for (int a = 0; a < 8; a++)
        for (int b = 0; b < 8; b++)
            for (int c = 0; c < 8; c += 1 + (Ks[a] > 64)) {
                const int M = Ms[c], K = Ks[a], N = Ns[b];
                float *A = xalloc((size_t)M * K * 4), *W = xalloc((size_t)N * K * 4);
                float *bias = xalloc(N * 4), *C0 = xalloc((size_t)M * N * 4);
                for (size_t i = 0; i < (size_t)M * K; i++)
                    A[i] = nrand();
                for (size_t i = 0; i < (size_t)N * K; i++)
                    W[i] = nrand();
                for (int i = 0; i < N; i++)
                    bias[i] = nrand();
                for (size_t i = 0; i < (size_t)M * N; i++)
                    C0[i] = nrand();
                for (int e = 0; e < 5; e++) {
                    if (e == KIME_EPI_GEGLU && N < 2)
                        continue;
                    const int n = e == KIME_EPI_GEGLU ? N - N % 2 : N;
                    const int nout = e == KIME_EPI_GEGLU ? n / 2 : n;
                    float *got = bf16_out(A, M, W, n, K, bias, e,
                                          e == KIME_EPI_ACCUM ? C0 : NULL, 1 + (M == 333));
                    cases++;
                    for (int m = 0; m < M; m++)
                        for (int j = 0; j < nout; j++) {
                            double x = bias[j], mag = fabs(bias[j]), g = 0, gmag = 0;
                            for (int k = 0; k < K; k++) {
                                const double p = (double)bf16r(A[(size_t)m * K + k]) *
                                                 bf16r(W[(size_t)j * K + k]);
                                x += p, mag += fabs(p);
                            }
                            if (e == KIME_EPI_GEGLU) {
                                g = bias[j + nout], gmag = fabs(g);
                                for (int k = 0; k < K; k++) {
                                    const double p = (double)bf16r(A[(size_t)m * K + k]) *
                                                     bf16r(W[(size_t)(j + nout) * K + k]);
                                    g += p, gmag += fabs(p);
                                }
                            }
                            double want = x, tmag = mag;
                            if (e == KIME_EPI_ACCUM)
                                want += C0[(size_t)m * nout + j],
                                    tmag += fabs(C0[(size_t)m * nout + j]);
                            else if (e == KIME_EPI_GELU)
                                want = 0.5 * x * (1 + erf(x / sqrt(2.0))), tmag *= 1.2;
                            else if (e == KIME_EPI_RELU)
                                want = x < 0 ? 0 : x;
                            else if (e == KIME_EPI_GEGLU)
                                want = 0.5 * x * (1 + erf(x / sqrt(2.0))) * g,
                                tmag = 1.2 * mag * (fabs(g) + gmag) + fabs(x) * gmag;
                            /* tests/kernels/reference.py's check_gemm: FP32 rtol and a
                             * sqrt(K)-scaled atol on the magnitude */
                            const double tol = 1e-5 * fabs(want) +
                                               1e-6 * sqrt(K > 1 ? K : 1) * tmag + 1e-30;
                            const double err = fabs(got[(size_t)m * nout + j] - want);
                            if (!(err <= tol)) {
                                FAIL("bf16 %s M=%d K=%d N=%d at (%d,%d): %.9g vs %.9g (%.2fx tol)",
                                     EPI_NAMES[e], M, K, n, m, j, got[(size_t)m * nout + j],
                                     want, err / tol);
                                m = M;
                                break;
                            }
                        }
                    free(got);
                }
                free(A), free(W), free(bias), free(C0);
            }
    /* bits across threads and batches, and W = 1 returns bf16(A) exactly */
    {
        const int M = 333, K = 768, N = 100;
        float *A = xalloc((size_t)M * K * 4), *W = xalloc((size_t)N * K * 4), *bias = xalloc(N * 4);
        for (size_t i = 0; i < (size_t)M * K; i++)
            A[i] = nrand();
        for (size_t i = 0; i < (size_t)N * K; i++)
            W[i] = nrand();
        for (int i = 0; i < N; i++)
            bias[i] = nrand();
        for (int e = 0; e < 5; e++) {
            if (e == KIME_EPI_ACCUM)
                continue;
            const int nout = e == KIME_EPI_GEGLU ? N / 2 : N;
            float *full = bf16_out(A, M, W, N, K, bias, e, NULL, 1);
            for (int t = 2; t <= 5; t++) {
                float *o = bf16_out(A, M, W, N, K, bias, e, NULL, t);
                if (memcmp(o, full, (size_t)M * nout * 4))
                    FAIL("bf16 %s: threads=%d changes bits", EPI_NAMES[e], t);
                free(o);
            }
            static const int rows[] = {0, 5, 13, 14, 100, 331, 332}, sizes[] = {1, 7, 64};
            for (int r = 0; r < 7; r++)
                for (int s = 0; s < 3; s++) {
                    int start = rows[r] - sizes[s] / 2;
                    start = start < 0 ? 0 : start > M - sizes[s] ? M - sizes[s] : start;
                    float *o = bf16_out(A + (size_t)start * K, sizes[s], W, N, K, bias, e, NULL,
                                        1 + s % 2);
                    if (memcmp(o + (size_t)(rows[r] - start) * nout,
                               full + (size_t)rows[r] * nout, (size_t)nout * 4))
                        FAIL("bf16 %s: row %d in a batch of %d changes bits", EPI_NAMES[e],
                             rows[r], sizes[s]);
                    free(o);
                }
            free(full);
        }
        float one = 1.0f;
        float x[40];
        const uint32_t specials[] = {0x00000001u, 0x807fffffu, 0x7f800000u, 0xff800000u,
                                     0x3f808000u, 0x3f818000u, 0x7f7fffffu, 0x00800000u};
        for (int i = 0; i < 40; i++) {
            x[i] = nrand() * (float)pow(10.0, (double)(i % 9) - 4);
            if (i < 8)
                memcpy(&x[i], &specials[i], 4);
        }
        float *o = bf16_out(x, 40, &one, 1, 1, NULL, KIME_EPI_STORE, NULL, 1);
        for (int i = 0; i < 40; i++)
            if (o[i] != bf16r(x[i]))
                FAIL("bf16 rounding of %a: %a, want %a", x[i], o[i], bf16r(x[i]));
        free(o), free(A), free(W), free(bias);
    }
    printf("bf16: %d shape x epilogue cases vs double, threads/batch bits, rounding: %s\n", cases,
           failures == before ? "ok" : "FAILED");
}

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0); /* a line at a time, for a reader under a slow emulator */
    const int isa = kime_isa_detect();
    printf("isa %s, qgemm impl %s, bf16 missing: %s\n", kime_isa_name(isa),
           kime_qgemm_impl_name(kime_qgemm_impl(isa)),
           kime_bgemm_missing(isa) ? kime_bgemm_missing(isa) : "none");
    int8_all(isa);
    bf16_all(isa);
    printf(failures ? "FAILED: %d\n" : "all ok\n", failures);
    return failures != 0;
}
