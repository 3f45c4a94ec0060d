/* How the GEMM drivers (gemm.c, qgemm.c, bgemm.c) share one call among a team of nt threads.
 *
 * Enough tiles (16 per thread): each thread takes a range of rows, whole tiles, and packs its own
 * A. Fewer (a short request): each thread takes a range of output panels, so it streams its
 * share of the weights; every thread then needs all of A, so the team packs each block of A
 * together into thread 0's block, a share of its tiles each, and meets at a barrier once the
 * block is packed and again before the next block overwrites it. A row's packed bytes do not
 * depend on which thread packs them, so the bits do not change.
 */
#ifndef KIME_TEAM_H
#define KIME_TEAM_H

typedef struct {
    int r0, r1, p0, p1; /* this thread's rows and output panels */
    int shared;         /* the team packs A together into thread 0's block */
} kime_share;

/* Row r_t of an even split of M rows over nt threads, rounded to a whole tile of mr. */
static inline int kime_split_rows(int M, int mr, int t, int nt)
{
    if (t >= nt)
        return M;
    long r = ((long)M * t / nt + mr / 2) / mr * mr;
    return r < M ? (int)r : M;
}

static inline kime_share kime_share_of(int M, int mr, int npanels, int t, int nt)
{
    kime_share s = {0, M, 0, npanels, nt > 1 && (M + mr - 1) / mr < 16 * nt};
    if (nt > 1 && !s.shared) {
        s.r0 = kime_split_rows(M, mr, t, nt);
        s.r1 = kime_split_rows(M, mr, t + 1, nt);
    } else {
        s.p0 = (int)((long)npanels * t / nt);
        s.p1 = (int)((long)npanels * (t + 1) / nt);
    }
    return s;
}

/* The tiles [*t0, *t1) of a block of `tiles` this thread packs: a share when shared, else all.
 * When shared, the team first waits until it is done with the previous block (not_first). */
static inline void kime_share_block(const kime_share *s, int tiles, int not_first, int t, int nt,
                                    int *t0, int *t1)
{
    *t0 = s->shared ? tiles * t / nt : 0;
    *t1 = s->shared ? tiles * (t + 1) / nt : tiles;
    if (s->shared && not_first) {
#ifdef _OPENMP
#pragma omp barrier
#endif
    }
}

/* After packing: when shared, wait until every tile of the block is packed. */
static inline void kime_share_packed(const kime_share *s)
{
    if (s->shared) {
#ifdef _OPENMP
#pragma omp barrier
#endif
    }
}

#endif
