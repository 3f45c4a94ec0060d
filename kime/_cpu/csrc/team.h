/* How the GEMM drivers (gemm.c, qgemm.c, bgemm.c) cut one call into tasks of kime's pool.
 *
 * Enough tiles (16 per thread): a task is a chunk of rows, whole tiles, that its thread packs
 * into its own A block and runs against every panel. Fewer (a short request): every panel needs
 * all of A, so the threads first pack each block of A together into thread 0's block, a tile per
 * task, and then run it against the panels, a panel per task, so each streams the weights it
 * claims. A late thread finds the tasks taken; nobody waits for it at a barrier. A row's packed
 * bytes and a tile's sums do not depend on which thread computes them, so the bits do not change.
 */
#ifndef KIME_TEAM_H
#define KIME_TEAM_H

#include "pool.h"

typedef struct {
    const void *job; /* the driver's own */
    int M, mr, mc, npanels;
    /* Pack rows [m0 + i, m0 + i + m) (m <= mr) at row i of thread `owner`'s A block, with
     * thread tid's row scratch. */
    void (*pack)(const void *job, int tid, int owner, int m0, int i, int m);
    /* Run panels [p0, p1) over rows [m0, m0 + mb) of thread `owner`'s A block, with thread
     * tid's accumulator tile. */
    void (*run)(const void *job, int tid, int owner, int m0, int mb, int p0, int p1);
    /* optional: a short request's block rows, where they differ from mc (0: mc); thread 0's
     * A block holds them */
    int mc_short;
} kime_gemm_plan;

typedef struct {
    const kime_gemm_plan *plan;
    int m0, mb, chunk;
} kime_gemm_step;

static void kime_gemm_pack_task(void *ctx, int task, int tid)
{
    const kime_gemm_step *s = (const kime_gemm_step *)ctx;
    const int mr = s->plan->mr, i = task * mr;
    s->plan->pack(s->plan->job, tid, 0, s->m0, i, s->mb - i < mr ? s->mb - i : mr);
}

static void kime_gemm_panel_task(void *ctx, int task, int tid)
{
    const kime_gemm_step *s = (const kime_gemm_step *)ctx;
    s->plan->run(s->plan->job, tid, 0, s->m0, s->mb, task, task + 1);
}

/* Rows [m0, m0 + mb) of A, packed and run against every panel by one thread, in blocks of mc. */
static void kime_gemm_rows(const kime_gemm_plan *p, int tid, int r0, int r1)
{
    for (int m0 = r0; m0 < r1; m0 += p->mc) {
        const int mb = r1 - m0 < p->mc ? r1 - m0 : p->mc;
        for (int i = 0; i < mb; i += p->mr)
            p->pack(p->job, tid, tid, m0, i, mb - i < p->mr ? mb - i : p->mr);
        p->run(p->job, tid, tid, m0, mb, 0, p->npanels);
    }
}

static void kime_gemm_chunk_task(void *ctx, int task, int tid)
{
    const kime_gemm_step *s = (const kime_gemm_step *)ctx;
    const int r0 = task * s->chunk, r1 = r0 + s->chunk;
    kime_gemm_rows(s->plan, tid, r0, r1 < s->plan->M ? r1 : s->plan->M);
}

/* Ask for the C lines a tile will store (rows [0, m), columns [n0, n0 + nv)) before its K loop:
 * an ACCUM epilogue reads them (the residual) and every store owns them, and at the forward's
 * sizes they sit in another core's cache or in DRAM (rows ldc apart, which the hardware
 * prefetchers do not follow across a tile). The K loop hides the wait. No bits change. */
static inline void kime_prefetch_tile(const float *C, int ldc, int m, int n0, int nv)
{
    for (int i = 0; i < m; i++, C += ldc)
        for (int c = n0; c < n0 + nv; c += 16)
            __builtin_prefetch(C + c, 0, 2);
}

/* A panel's first row tile reads the panel from DRAM (a short request streams every weight
 * once; the later tiles find it in L2), and the L2 streamer stops at each 4 KiB page. So the
 * register kernels' first-tile twins ask, every k step, for the step's B lines KIME_AHEAD bytes
 * on: a 182-row FP32 GEMM over distinct weights, 2 threads, AVX-512, ran 15-40% slower than on
 * one warm weight, and 10-23% faster with this (1-4 KiB alike). Past a panel's end it asks for
 * the next panel's lines or beyond the weights: a prefetch never faults. No bits change. */
#define KIME_AHEAD 4096

static inline void kime_fetch_ahead(const void *b, int lines)
{
    for (int l = 0; l < lines; l++)
        __builtin_prefetch((const char *)b + KIME_AHEAD + 64 * l, 0, 3);
}

/* An AMX kernel's next panel into L2 while the tiles after a panel's first run (those read the
 * panel from L2 and leave the memory system idle): tile t (1 <= t < tiles) of a panel asks,
 * every K step of its `steps`, for up to `per` lines of the next panel's `lines`, so the later
 * tiles between them ask for all of it once. The BF16 AMX kernel does (bgemm.c): base W1 BF16
 * on one thread took 0.82-0.83 of its time; on two threads, which share the VM's memory
 * bandwidth, 0.98-1.04 (no change); beside a spinning process 0.88 and 1.09 in two runs. The
 * INT8 one does not: 0.92 on one thread, but 1.05 on two and 1.06 beside the spinner. */
typedef struct {
    const char *first; /* tile t's first line; NULL: none */
    int per, count;    /* lines a step, lines in all */
} kime_next_panel;

static inline kime_next_panel kime_next_panel_part(const void *next, int lines, int tiles,
                                                   int steps, int t)
{
    kime_next_panel np = {NULL, 0, 0};
    if (!next || tiles < 2 || t < 1 || t >= tiles || steps < 1)
        return np;
    const int per = (lines + (tiles - 1) * steps - 1) / ((tiles - 1) * steps);
    const int from = (t - 1) * steps * per;
    if (from >= lines)
        return np;
    np.first = (const char *)next + (size_t)from * 64;
    np.per = per;
    np.count = lines - from < steps * per ? lines - from : steps * per;
    return np;
}

/* K step s's share of np */
static inline void kime_next_panel_step(kime_next_panel np, int s)
{
    for (int l = s * np.per; l < (s + 1) * np.per && l < np.count; l++)
        __builtin_prefetch(np.first + (size_t)l * 64, 0, 2);
}

/* The cases of a switch over a register kernel's row count m, each calling F(m, X) with m a
 * constant, so each row count gets its own register allocation. */
#define KIME_ROW_CASES6(F, X)                                                                    \
    case 1: F(1, X); break;                                                                      \
    case 2: F(2, X); break;                                                                      \
    case 3: F(3, X); break;                                                                      \
    case 4: F(4, X); break;                                                                      \
    case 5: F(5, X); break;                                                                      \
    case 6: F(6, X); break;
#define KIME_ROW_CASES14(F, X)                                                                   \
    KIME_ROW_CASES6(F, X)                                                                        \
    case 7: F(7, X); break;                                                                      \
    case 8: F(8, X); break;                                                                      \
    case 9: F(9, X); break;                                                                      \
    case 10: F(10, X); break;                                                                    \
    case 11: F(11, X); break;                                                                    \
    case 12: F(12, X); break;                                                                    \
    case 13: F(13, X); break;                                                                    \
    case 14: F(14, X); break;

static inline void kime_gemm_drive(const kime_gemm_plan *p, int nthreads)
{
    const int tiles = (p->M + p->mr - 1) / p->mr;
    if (nthreads <= 1 || !kime_pool_threaded()) {
        kime_gemm_rows(p, 0, 0, p->M);
        return;
    }
    kime_gemm_step s = {p, 0, 0, 0};
    if (tiles >= 16 * nthreads) {
        /* about 4 chunks per thread, each at most a block */
        int chunk = kime_chunk(tiles, nthreads, 4, 1) * p->mr;
        s.chunk = chunk < p->mc ? chunk : p->mc;
        kime_parallel(nthreads, (p->M + s.chunk - 1) / s.chunk, kime_gemm_chunk_task, &s);
        return;
    }
    const int mc = p->mc_short > 0 ? p->mc_short : p->mc;
    for (s.m0 = 0; s.m0 < p->M; s.m0 += mc) {
        s.mb = p->M - s.m0 < mc ? p->M - s.m0 : mc;
        kime_parallel(nthreads, (s.mb + p->mr - 1) / p->mr, kime_gemm_pack_task, &s);
        kime_parallel(nthreads, p->npanels, kime_gemm_panel_task, &s);
    }
}

#endif
