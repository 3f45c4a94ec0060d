/* A C harness over the FP32 GEMM (kime/_cpu/csrc/gemm.c) for any architecture: built natively
 * on x86 and cross-compiled for aarch64 (run under qemu-user), by tests/kernels/test_gemm_arm64.py.
 *
 * For every ISA level up to kime_isa_detect() it checks, over random shapes with tails in M, K
 * and N and every epilogue:
 *   - accuracy against a double-precision reference (FP32.gemm's tolerance, tests/tolerances.py);
 *   - the store epilogue to the bit against a scalar fmaf chain over k from +0 (every SIMD path
 *     is one FMA per k in increasing k: the portable path is exempt, a compiler may not fuse);
 *   - the exact-erf GELU epilogue (K = 1, W = 1) against double erf;
 *   - bits independent of the thread count and of which rows share the batch.
 * "quick" runs a third of the shapes on portable, the first SIMD level and the best; "isa" only
 * prints the dispatch line. It prints one FNV-1a hash of the output bits per (level, case) so two builds (x86 AVX2 and
 * aarch64 NEON) can be compared, and "isa NAME features BITS" first. Exit status 1 on a failure.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels.h"

static uint64_t rng_state;

static uint64_t next(void)
{
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* roughly normal (the sum of four uniforms), the same floats on every architecture */
static float randn(void)
{
    double s = 0.0;
    for (int i = 0; i < 4; i++)
        s += (double)(next() >> 11) * 0x1.0p-53;
    return (float)((s - 2.0) * 1.7320508075688772);
}

static void fill(float *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        x[i] = randn();
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

static double gelu_d(double x) { return 0.5 * x * (1.0 + erf(x / sqrt(2.0))); }

static float *aligned(size_t floats)
{
    void *p = NULL;
    if (posix_memalign(&p, 64, (floats ? floats : 1) * sizeof(float)))
        abort();
    return p;
}

static const char *const EPI[] = {"store", "accum", "gelu", "relu", "geglu"};

/* C (M x n) for the epilogue, into C (which holds C0 for accum), with `threads` threads */
static void run(int isa, const float *A, int M, int K, int N, const float *packed,
                const float *bias, int epi, float *C, int threads)
{
    float *scratch = aligned(kime_gemm_scratch_floats(isa, K, threads));
    kime_gemm(isa, A, K, M, K, N, packed, bias, epi, C, epi == KIME_EPI_GEGLU ? N / 2 : N,
              scratch, threads);
    free(scratch);
}

static uint64_t check_case(int isa, int M, int K, int N, int epi, int with_bias, int threads)
{
    const int geglu = epi == KIME_EPI_GEGLU, n = geglu ? N / 2 : N;
    float *W = aligned((size_t)N * K), *A = aligned((size_t)M * K), *bias = aligned(N);
    float *C0 = aligned((size_t)M * n), *C = aligned((size_t)M * n);
    fill(W, (size_t)N * K);
    fill(A, (size_t)M * K);
    fill(bias, N);
    fill(C0, (size_t)M * n);
    float *packed = aligned(kime_gemm_packed_floats(isa, N, K, geglu));
    kime_gemm_pack(isa, W, N, K, geglu, packed);
    memcpy(C, C0, (size_t)M * n * sizeof(float));
    const float *b = with_bias ? bias : NULL;
    run(isa, A, M, K, N, packed, b, epi, C, threads);
    double worst = 0.0;
    long bits_off = 0;
    for (int i = 0; i < M; i++)
        for (int j = 0; j < n; j++) {
            double x[2], mag[2];
            float f[2];
            for (int h = 0; h < 1 + geglu; h++) {
                const int row = j + h * n;
                double s = 0.0, m = 0.0;
                float c = 0.0f;
                for (int k = 0; k < K; k++) {
                    double p = (double)A[(size_t)i * K + k] * W[(size_t)row * K + k];
                    s += p;
                    m += fabs(p);
                    c = fmaf(A[(size_t)i * K + k], W[(size_t)row * K + k], c);
                }
                x[h] = s + (b ? b[row] : 0.0);
                mag[h] = m + (b ? fabs(b[row]) : 0.0);
                f[h] = c + (b ? b[row] : 0.0f);
            }
            double want = x[0], tmag = mag[0];
            const float got = C[(size_t)i * n + j];
            switch (epi) {
            case KIME_EPI_ACCUM: want += C0[(size_t)i * n + j]; tmag += fabs(C0[(size_t)i * n + j]); break;
            case KIME_EPI_GELU: want = gelu_d(want); break;
            case KIME_EPI_RELU: want = want < 0 ? 0 : want; break;
            case KIME_EPI_GEGLU: want = gelu_d(x[0]) * x[1]; tmag = (fabs(x[0]) + mag[0]) * mag[1]; break;
            }
            if (epi == KIME_EPI_GELU)
                tmag += fabs(x[0]); /* GELU's slope is at most 1.13 */
            const double tol = 1e-5 * fabs(want) + 1e-6 * sqrt((double)K) * tmag + 1e-30;
            const double err = fabs((double)got - want) / tol;
            worst = err > worst ? err : worst;
            if (epi == KIME_EPI_STORE && isa != KIME_ISA_PORTABLE && memcmp(&got, &f[0], 4))
                bits_off++;
        }
    if (worst > 1.0)
        FAIL("accuracy %s isa=%d M=%d K=%d N=%d bias=%d: %.2fx tol", EPI[epi], isa, M, K, N,
             with_bias, worst);
    if (bits_off)
        FAIL("fmaf bits %s isa=%d M=%d K=%d N=%d: %ld elements differ", EPI[epi], isa, M, K, N,
             bits_off);
    /* the same rows at other thread counts, and rows in other batches */
    float *D = aligned((size_t)M * n);
    const int tcounts[] = {1, 2, 3, 5};
    for (int t = 0; t < 4; t++) {
        memcpy(D, C0, (size_t)M * n * sizeof(float));
        run(isa, A, M, K, N, packed, b, epi, D, tcounts[t]);
        if (memcmp(C, D, (size_t)M * n * sizeof(float)))
            FAIL("threads %s isa=%d M=%d K=%d N=%d: %d threads differ", EPI[epi], isa, M, K, N,
                 tcounts[t]);
    }
    for (int start = 0; start < M; start += 1 + M / 3) {
        const int rows = M - start < 7 ? M - start : 7;
        memcpy(D, C0 + (size_t)start * n, (size_t)rows * n * sizeof(float));
        run(isa, A + (size_t)start * K, rows, K, N, packed, b, epi, D, 1 + (start & 1));
        if (memcmp(C + (size_t)start * n, D, (size_t)rows * n * sizeof(float)))
            FAIL("batch %s isa=%d M=%d K=%d N=%d: rows %d+%d differ", EPI[epi], isa, M, K, N,
                 start, rows);
    }
    const uint64_t h = fnv(0xcbf29ce484222325ULL, C, (size_t)M * n);
    free(W), free(A), free(bias), free(C0), free(C), free(D), free(packed);
    return h;
}

static void check_gelu(int isa)
{
    const int M = 200001 + 6;
    float *A = aligned(M), *C = aligned((size_t)M * 3), one[3] = {1.0f, 1.0f, 1.0f};
    for (int i = 0; i < 200001; i++)
        A[i] = (float)(-12.0 + 24.0 * i / 200000.0);
    const float extra[6] = {0.0f, -0.0f, 1e-30f, -1e-30f, 50.0f, -50.0f};
    memcpy(A + 200001, extra, sizeof extra);
    float *packed = aligned(kime_gemm_packed_floats(isa, 3, 1, 0));
    kime_gemm_pack(isa, one, 3, 1, 0, packed);
    run(isa, A, M, 1, 3, packed, NULL, KIME_EPI_GELU, C, 2);
    long bad = 0;
    for (int i = 0; i < M; i++) {
        const double want = gelu_d(A[i]);
        const double tol = 1e-6 * fabs(want) + 2e-7 * fabs(A[i]) + 1e-45;
        for (int j = 0; j < 3; j++)
            bad += !(fabs((double)C[(size_t)i * 3 + j] - want) <= tol);
    }
    if (bad)
        FAIL("gelu isa=%d: %ld values off", isa, bad);
    float nan = NAN, out;
    run(isa, &nan, 1, 1, 1, packed, NULL, KIME_EPI_GELU, &out, 1);
    if (!isnan(out))
        FAIL("gelu isa=%d: NaN does not propagate", isa);
    printf("hash %s gelu %016llx\n", kime_isa_name(isa),
           (unsigned long long)fnv(0xcbf29ce484222325ULL, C, (size_t)M * 3));
    free(A), free(C), free(packed);
}

int main(int argc, char **argv)
{
    const int best = kime_isa_detect();
    printf("isa %s features %u\n", kime_isa_name(best), kime_isa_arm_features());
    if (argc > 1 && strcmp(argv[1], "isa") == 0) /* only the dispatch line */
        return 0;
    const int quick = argc > 1 && strcmp(argv[1], "quick") == 0;
    static const int MS[] = {1, 2, 7, 12, 13, 64, 333};
    static const int KS[] = {1, 3, 17, 64, 768};
    static const int NS[] = {1, 5, 8, 31, 32, 33, 100};
    for (int isa = 0; isa <= best; isa++) {
        if (quick && isa > 1 && isa < best)
            continue; /* quick: portable, the first SIMD level and the best */
        rng_state = 12345; /* every level sees the same data, so the hashes compare */
        for (int mi = 0; mi < 7; mi++)
            for (int ki = 0; ki < 5; ki++)
                for (int ni = 0; ni < 7; ni++) {
                    if (quick && (mi + ki + ni) % 3)
                        continue;
                    const int M = MS[mi], K = KS[ki], N = NS[ni];
                    if (M * (long)K * N > 2000000 && (mi + ni) % 2)
                        continue; /* keep emulation short: half of the largest shapes */
                    for (int epi = 0; epi < 5; epi++) {
                        const int n = epi == KIME_EPI_GEGLU ? N - N % 2 : N;
                        if (n == 0)
                            continue;
                        const int with_bias = (mi + ki + ni + epi) % 2;
                        uint64_t h = check_case(isa, M, K, n, epi, with_bias, 1 + (M == 333));
                        printf("hash %s %s M=%d K=%d N=%d bias=%d %016llx\n", kime_isa_name(isa),
                               EPI[epi], M, K, n, with_bias, (unsigned long long)h);
                    }
                }
        check_gelu(isa);
    }
    printf("%s: %d failures\n", failures ? "FAILED" : "ok", failures);
    return failures ? 1 : 0;
}
