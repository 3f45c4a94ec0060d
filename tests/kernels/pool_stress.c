/* A C stress of kime's thread pool (csrc/pool.c) alone, for test_pool_harness.py: millions of
 * short steps, one thread count after another (1 to the maximum), each step as many tasks as
 * a GEMM's pack or panel step. A write step stamps one slot per task; the caller checks every
 * slot when kime_parallel returns (a task left out, or one still running, shows as an old
 * stamp), and a read step's tasks check them again on the workers (the write step's stores
 * must be seen by whoever runs the next step). Every task checks its thread id is below the
 * step's thread count. A pool that lets a worker into a step the caller is rewriting fails
 * here or hangs (the test's timeout): under qemu-user on an x86 host, without pool.c's
 * STORE_LOAD fences, every run of 5 million steps did one or the other.
 *
 * Usage: pool_stress STEPS MAX_THREADS. Prints one line; exits 1 on a failure.
 */
#include <stdio.h>
#include <stdlib.h>

#include "pool.h"

#define MAX_TASKS 64

typedef struct {
    int *slot;
    int stamp, nthreads, work;
    long *bad; /* counted with atomic adds: tasks run on several threads */
} job;

static void write_task(void *ctx, int task, int tid)
{
    const job *j = (const job *)ctx;
    volatile int sink = 0;
    for (int k = 0; k < j->work * (task == 0 ? 20 : 1); k++) /* task 0 long: a step's tail */
        sink += k;
    if (tid < 0 || tid >= j->nthreads)
        __atomic_fetch_add(j->bad, 1, __ATOMIC_RELAXED);
    j->slot[task] = j->stamp;
}

static void read_task(void *ctx, int task, int tid)
{
    const job *j = (const job *)ctx;
    (void)task;
    if (tid < 0 || tid >= j->nthreads)
        __atomic_fetch_add(j->bad, 1, __ATOMIC_RELAXED);
    for (int k = 0; k < MAX_TASKS; k++)
        if (j->slot[k] != j->stamp) {
            __atomic_fetch_add(j->bad, 1, __ATOMIC_RELAXED);
            return;
        }
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: pool_stress STEPS MAX_THREADS\n");
        return 2;
    }
    const long steps = atol(argv[1]);
    const int most = atoi(argv[2]);
    int slot[MAX_TASKS];
    long bad_tasks = 0, bad_caller = 0;
    for (long s = 0; s < steps; s++) {
        const int threads = s % 7 == 0 ? most : 1 + (int)(s % most);
        const int ntasks = 1 + (int)(s % MAX_TASKS);
        job j = {slot, (int)s + 1, threads, (int)(s % 50), &bad_tasks};
        for (int k = ntasks; k < MAX_TASKS; k++)
            slot[k] = j.stamp; /* the caller's own: the read step checks all */
        kime_parallel(threads, ntasks, write_task, &j);
        for (int k = 0; k < ntasks; k++)
            if (slot[k] != j.stamp) {
                bad_caller++;
                break;
            }
        kime_parallel(threads, 1 + (int)(s % 5), read_task, &j);
    }
    printf("%ld steps, up to %d threads: %ld bad in tasks, %ld bad in the caller\n", 2 * steps,
           most, __atomic_load_n(&bad_tasks, __ATOMIC_RELAXED), bad_caller);
    return bad_tasks || bad_caller ? 1 : 0;
}
