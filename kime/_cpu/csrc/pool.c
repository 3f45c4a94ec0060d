/* kime's thread pool (see pool.h for why and what).
 *
 * The protocol, with every atomic sequentially consistent:
 * - A step is open while `gen` is even. The caller opens step g + 2 only after closing step g
 *   (gen odd) and seeing no worker inside it (busy == 0), so a worker that read a step's fields
 *   after entering reads them whole.
 * - A worker enters a step by busy++ and then re-reading gen: still the even value it saw, it
 *   is inside; it claims tasks by fetch_add on `next` until they run out, counts each task it
 *   finishes in `done`, and leaves by busy--.
 * - The caller claims tasks the same way and returns once done == ntasks; it closes the step
 *   only at its next call, so a worker leaving the step never holds the caller up.
 * - A worker waits for a new step by spinning on gen, unbounded while the step it left still
 *   has tasks running (done < its ntasks) and for a bounded time after, then sleeping on the
 *   condition variable with `sleepers` raised; the caller signals only when sleepers > 0.
 * - STORE_LOAD: the caller's store to gen and its load of busy (or sleepers), against a
 *   worker's add to busy (or sleepers) and its load of gen, is Dekker's pattern, so each side
 *   has a full fence between the two. C11's seq_cst store and load order them on hardware, but
 *   qemu-user on an x86 host compiles aarch64's stlr and ldar to plain moves and lets the load
 *   pass the store: there, without the fences, a worker entered a step while the caller rewrote
 *   it (a lost GEMM tile, a hang). On x86 hardware the fence costs some 30 cycles a step.
 */
#include "pool.h"

#include <stdlib.h>
#include <time.h>

#if !defined(_WIN32)
#define KIME_POOL 1
#endif

static inline long long now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

#ifdef KIME_POOL
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define CPU_RELAX() _mm_pause()
#elif defined(__aarch64__)
#define CPU_RELAX() __asm__ __volatile__("yield")
#else
#define CPU_RELAX() ((void)0)
#endif

#define MAX_WORKERS 255

typedef struct team team;

typedef struct {
    team *t;
    int id; /* 1.. */
} worker_arg;

struct team {
    _Alignas(64) _Atomic unsigned gen; /* even: a step is open */
    _Alignas(64) _Atomic int next;     /* the next task to claim */
    _Alignas(64) _Atomic int done;     /* tasks finished */
    _Alignas(64) _Atomic int busy;     /* workers inside the step */
    _Atomic int sleepers;
    _Atomic int stop;
    /* the open step: written only while gen is odd and busy == 0 */
    kime_task_fn fn;
    void *ctx;
    int ntasks, nthreads;
    int nworkers;
    unsigned long epoch; /* the process's fork count when the team started */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t threads[MAX_WORKERS];
    worker_arg args[MAX_WORKERS];
};

static _Atomic int spin_us = -1;
static _Atomic unsigned long fork_epoch;
static pthread_once_t once = PTHREAD_ONCE_INIT;
static pthread_key_t team_key;
static int teams_ok; /* the key (teams stop with their thread) and the fork handler are set */
static __thread team *my_team;

static void after_fork_child(void) { atomic_fetch_add(&fork_epoch, 1); }

static void stop_team(void *p);

/* Without the key a team would outlive its thread, and without the fork handler a child would
 * wait on its parent's workers: either failing, every step runs on its caller. */
static void init_once(void)
{
    teams_ok = pthread_key_create(&team_key, stop_team) == 0
               && pthread_atfork(NULL, NULL, after_fork_child) == 0;
    if (atomic_load(&spin_us) < 0) {
        const char *s = getenv("KIME_SPIN_US");
        long v = s && *s ? strtol(s, NULL, 10) : 200;
        atomic_store(&spin_us, v < 0 ? 0 : v > 1000000 ? 1000000 : (int)v);
    }
}

int kime_pool_spin_us(void)
{
    pthread_once(&once, init_once);
    return atomic_load(&spin_us);
}

void kime_pool_set_spin_us(int us)
{
    pthread_once(&once, init_once);
    atomic_store(&spin_us, us < 0 ? 0 : us);
}

int kime_pool_threaded(void) { return 1; }

/* Claims and runs tasks of the open step until none is left. */
static inline void take_tasks(team *t, kime_task_fn fn, void *ctx, int ntasks, int tid)
{
    for (;;) {
        int i = atomic_fetch_add(&t->next, 1);
        if (i >= ntasks)
            return;
        fn(ctx, i, tid);
        atomic_fetch_add(&t->done, 1);
    }
}

/* The next open step after `seen`, or seen when the team is stopping. `tasks` is step seen's
 * task count (0 when the worker took no part in it). While some of those tasks still run, the
 * next step is at most one task away: the worker keeps watching, and its bounded spin starts
 * only once the step is done (sleeping through a long task's tail cost a wake-up per step: ten
 * times the context switches on a 512-token batch). Every 1024 pauses (some 20 us) it yields
 * its core: without that, beside a busy process the watching worker held a core the caller's
 * last task needed, and INT8 W1 ran 45% slower there. */
static unsigned wait_step(team *t, unsigned seen, int tasks)
{
    const long long budget = (long long)atomic_load(&spin_us) * 1000;
    long long start = -1;
    for (unsigned n = 0;; n++) {
        unsigned g = atomic_load(&t->gen);
        if (g != seen && !(g & 1u))
            return g;
        if (atomic_load(&t->stop))
            return seen;
        if ((n & 63u) == 0) {
            if (g == seen && atomic_load(&t->done) < tasks) {
                if ((n & 1023u) == 0)
                    sched_yield();
            } else {
                long long ns = now_ns();
                if (start < 0)
                    start = ns;
                else if (ns - start >= budget)
                    break;
            }
        }
        CPU_RELAX();
    }
    pthread_mutex_lock(&t->mu);
    atomic_fetch_add(&t->sleepers, 1);
    unsigned g;
    while (((g = atomic_load(&t->gen)) == seen || (g & 1u)) && !atomic_load(&t->stop))
        pthread_cond_wait(&t->cv, &t->mu);
    atomic_fetch_sub(&t->sleepers, 1);
    pthread_mutex_unlock(&t->mu);
    return atomic_load(&t->stop) ? seen : g;
}

static void *worker_main(void *p)
{
    worker_arg *a = (worker_arg *)p;
    team *t = a->t;
    unsigned seen = atomic_load(&t->gen);
    int tasks = 0; /* the step seen's task count, read while inside it */
    for (;;) {
        unsigned g = wait_step(t, seen, tasks);
        if (atomic_load(&t->stop))
            return NULL;
        seen = g;
        tasks = 0;
        atomic_fetch_add(&t->busy, 1);
        atomic_thread_fence(memory_order_seq_cst); /* busy's add before gen's load */
        if (atomic_load(&t->gen) == g && a->id < t->nthreads) {
            tasks = t->ntasks; /* only a step's own threads wait out its tail */
            take_tasks(t, t->fn, t->ctx, tasks, a->id);
        }
        atomic_fetch_sub(&t->busy, 1);
    }
}

static void stop_team(void *p)
{
    team *t = (team *)p;
    if (!t || t->epoch != atomic_load(&fork_epoch))
        return; /* a forked child's copy: its workers are not in this process */
    atomic_store(&t->stop, 1);
    pthread_mutex_lock(&t->mu);
    pthread_cond_broadcast(&t->cv);
    pthread_mutex_unlock(&t->mu);
    for (int i = 0; i < t->nworkers; i++)
        pthread_join(t->threads[i], NULL);
    pthread_cond_destroy(&t->cv);
    pthread_mutex_destroy(&t->mu);
    free(t);
}

/* This thread's team with at least `workers` workers (fewer when threads cannot start), or
 * NULL when no team can be set up: the caller then runs the step alone. */
static team *team_of(int workers)
{
    pthread_once(&once, init_once);
    if (!teams_ok)
        return NULL;
    team *t = my_team;
    if (t && t->epoch != atomic_load(&fork_epoch))
        t = NULL; /* started before a fork: its workers stayed in the parent */
    if (!t) {
        t = (team *)calloc(1, sizeof *t);
        if (!t)
            return NULL;
        int made = 0; /* 1: the mutex, 2: and the condition, 3: and the key's value */
        if (pthread_mutex_init(&t->mu, NULL) == 0 && ++made
            && pthread_cond_init(&t->cv, NULL) == 0 && ++made
            && pthread_setspecific(team_key, t) == 0)
            made++;
        if (made < 3) {
            if (made >= 2)
                pthread_cond_destroy(&t->cv);
            if (made >= 1)
                pthread_mutex_destroy(&t->mu);
            free(t);
            return NULL;
        }
        atomic_init(&t->gen, 1u); /* closed: no step yet */
        t->epoch = atomic_load(&fork_epoch);
        my_team = t;
    }
    if (workers > MAX_WORKERS)
        workers = MAX_WORKERS;
    if (t->nworkers < workers) {
        /* Workers block every signal: they belong to the threads the host program made. */
        sigset_t all, old;
        sigfillset(&all);
        pthread_sigmask(SIG_SETMASK, &all, &old);
        while (t->nworkers < workers) {
            worker_arg *a = &t->args[t->nworkers];
            a->t = t;
            a->id = t->nworkers + 1;
            if (pthread_create(&t->threads[t->nworkers], NULL, worker_main, a) != 0)
                break;
            t->nworkers++;
        }
        pthread_sigmask(SIG_SETMASK, &old, NULL);
    }
    return t;
}

void kime_parallel(int nthreads, int ntasks, kime_task_fn fn, void *ctx)
{
    if (ntasks <= 0)
        return;
    if (nthreads > ntasks)
        nthreads = ntasks;
    team *t = nthreads > 1 ? team_of(nthreads - 1) : NULL;
    if (!t || t->nworkers == 0) {
        for (int i = 0; i < ntasks; i++)
            fn(ctx, i, 0);
        return;
    }
    /* Close the last step and wait until no worker is inside it. */
    unsigned g = atomic_load(&t->gen);
    if (!(g & 1u))
        atomic_store(&t->gen, ++g);
    atomic_thread_fence(memory_order_seq_cst); /* gen's store before busy's load: see STORE_LOAD */
    for (unsigned n = 0; atomic_load(&t->busy) != 0; n++) {
        if (n < 4096)
            CPU_RELAX();
        else
            sched_yield(); /* a worker lost its core between two loads: let it run */
    }
    t->fn = fn;
    t->ctx = ctx;
    t->ntasks = ntasks;
    t->nthreads = nthreads <= t->nworkers + 1 ? nthreads : t->nworkers + 1;
    atomic_store(&t->next, 0);
    atomic_store(&t->done, 0);
    atomic_store(&t->gen, g + 1); /* open */
    atomic_thread_fence(memory_order_seq_cst); /* gen's store before sleepers' load */
    if (atomic_load(&t->sleepers) > 0) {
        pthread_mutex_lock(&t->mu);
        pthread_cond_broadcast(&t->cv);
        pthread_mutex_unlock(&t->mu);
    }
    take_tasks(t, fn, ctx, ntasks, 0);
    /* Only tasks other threads claimed are left: a short wait, then yield the core. */
    for (unsigned n = 0; atomic_load(&t->done) < ntasks; n++) {
        if (n < 4096)
            CPU_RELAX();
        else
            sched_yield();
    }
}

#else /* one thread */

void kime_parallel(int nthreads, int ntasks, kime_task_fn fn, void *ctx)
{
    (void)nthreads;
    for (int i = 0; i < ntasks; i++)
        fn(ctx, i, 0);
}

int kime_pool_spin_us(void) { return 0; }
void kime_pool_set_spin_us(int us) { (void)us; }
int kime_pool_threaded(void) { return 0; }

#endif

/* A step whose task i holds its thread busy_us[i] microseconds and records who ran it. */
typedef struct {
    const int *busy_us;
    int *tids;
} probe_job;

static void probe_task(void *ctx, int task, int tid)
{
    const probe_job *j = (const probe_job *)ctx;
    const long long end = now_ns() + (long long)j->busy_us[task] * 1000;
    while (now_ns() < end)
        ;
    j->tids[task] = tid;
}

void kime_pool_probe(int nthreads, int ntasks, const int *busy_us, int *tids)
{
    probe_job j = {busy_us, tids};
    kime_parallel(nthreads, ntasks, probe_task, &j);
}
