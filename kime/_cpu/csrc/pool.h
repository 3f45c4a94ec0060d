/* kime's own thread pool: each step of a forward pass is a set of tasks that threads claim.
 *
 * Why not OpenMP's fork/join. Under libgomp every kernel was a parallel region split in fixed
 * shares, so the step waited for its slowest thread: when another process took one of the
 * cores for a moment, the whole step waited for that thread to be scheduled again, a hundred
 * times per forward pass. Here the caller publishes a step and takes tasks itself; a worker
 * that wakes late finds fewer tasks left or none, and the caller waits only for tasks already
 * claimed, never for a thread to arrive. Which thread runs a task may vary; what a task
 * computes does not, so results keep their bits.
 *
 * Waiting. A worker out of tasks waits for the step's last task awake, yielding its core every
 * few tens of microseconds to a thread that wants it; from the step's end it spins for a
 * bounded time (KIME_SPIN_US microseconds, default 200), long enough to span the serial gaps
 * between the steps of one forward pass, then sleeps on a condition variable until the next
 * step, so an idle engine holds no core.
 *
 * Teams. Each thread that calls kime_parallel gets a team of workers of its own, created on its
 * first call (kime._cpu.masters keeps those callers few). A forked child starts new teams.
 * The pool needs POSIX threads and nothing else (no OpenMP); without them (Windows) every step
 * runs on the caller, in task order.
 */
#ifndef KIME_POOL_H
#define KIME_POOL_H

/* fn(ctx, task, tid) for one task; tid is 0 on the caller, 1.. on its workers (< nthreads). */
typedef void (*kime_task_fn)(void *ctx, int task, int tid);

/* Runs fn for every task in [0, ntasks) on at most nthreads threads and returns when all are
 * done. Tasks are claimed in increasing order, one at a time. */
void kime_parallel(int nthreads, int ntasks, kime_task_fn fn, void *ctx);

/* The bounded spin of a waiting worker, in microseconds (0: sleep at once). Read from
 * KIME_SPIN_US when the first team starts; set applies to waits that begin afterwards. */
int kime_pool_spin_us(void);
void kime_pool_set_spin_us(int us);

/* Whether kime_parallel runs tasks on more than one thread in this build. */
int kime_pool_threaded(void);

/* The pool's own tests: one step of ntasks tasks on at most nthreads threads, task i holding
 * its thread for busy_us[i] microseconds and writing the id of the thread that ran it to
 * tids[i]. */
void kime_pool_probe(int nthreads, int ntasks, const int *busy_us, int *tids);

/* A task count for n items split into chunks of at least `min_chunk`, about `per_thread`
 * chunks per thread: enough that a late thread's share is taken by the others. */
static inline int kime_chunk(int n, int nthreads, int per_thread, int min_chunk)
{
    int want = nthreads * per_thread, chunk = want > 0 ? (n + want - 1) / want : n;
    return chunk < min_chunk ? min_chunk : chunk;
}

#endif
