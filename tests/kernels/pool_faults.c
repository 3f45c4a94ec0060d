/* kime's thread pool (csrc/pool.c) when the threading library refuses it a resource, for
 * test_pool_faults.py. Linked with -Wl,--wrap for pthread_key_create, pthread_atfork,
 * pthread_mutex_init, pthread_cond_init and pthread_setspecific: the one named by POOL_FAIL
 * returns EAGAIN (initialising nothing), the others pass through. The pool must then run every
 * step on its caller, whole; with nothing failing it uses its workers. A forked child must
 * finish a step too (an alarm turns a hang into a failure).
 *
 * Prints "tasks T threads N child C" (T tasks ran of 4 x 64, on N distinct threads; C: the
 * child's exit status). Exits 1 when a task did not run.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "pool.h"

#define TASKS 64

static int failing(const char *name)
{
    const char *want = getenv("POOL_FAIL");
    return want && strcmp(want, name) == 0;
}

int __real_pthread_key_create(pthread_key_t *key, void (*destructor)(void *));
int __wrap_pthread_key_create(pthread_key_t *key, void (*destructor)(void *))
{
    return failing("pthread_key_create") ? EAGAIN : __real_pthread_key_create(key, destructor);
}

int __real_pthread_atfork(void (*prepare)(void), void (*parent)(void), void (*child)(void));
int __wrap_pthread_atfork(void (*prepare)(void), void (*parent)(void), void (*child)(void))
{
    return failing("pthread_atfork") ? ENOMEM : __real_pthread_atfork(prepare, parent, child);
}

int __real_pthread_mutex_init(pthread_mutex_t *m, const pthread_mutexattr_t *a);
int __wrap_pthread_mutex_init(pthread_mutex_t *m, const pthread_mutexattr_t *a)
{
    return failing("pthread_mutex_init") ? EAGAIN : __real_pthread_mutex_init(m, a);
}

int __real_pthread_cond_init(pthread_cond_t *c, const pthread_condattr_t *a);
int __wrap_pthread_cond_init(pthread_cond_t *c, const pthread_condattr_t *a)
{
    return failing("pthread_cond_init") ? EAGAIN : __real_pthread_cond_init(c, a);
}

int __real_pthread_setspecific(pthread_key_t key, const void *value);
int __wrap_pthread_setspecific(pthread_key_t key, const void *value)
{
    return failing("pthread_setspecific") ? ENOMEM : __real_pthread_setspecific(key, value);
}

static int ran[TASKS], tids[TASKS];

static void task(void *ctx, int i, int tid)
{
    (void)ctx;
    struct timespec end, now;
    clock_gettime(CLOCK_MONOTONIC, &end);
    end.tv_nsec += 300000; /* 0.3 ms: long enough that waiting workers join in */
    if (end.tv_nsec >= 1000000000L) {
        end.tv_sec++;
        end.tv_nsec -= 1000000000L;
    }
    do
        clock_gettime(CLOCK_MONOTONIC, &now);
    while (now.tv_sec < end.tv_sec || (now.tv_sec == end.tv_sec && now.tv_nsec < end.tv_nsec));
    __atomic_fetch_add(&ran[i], 1, __ATOMIC_RELAXED);
    tids[i] = tid;
}

int main(void)
{
    int seen[256] = {0}, threads = 0, total = 0;
    for (int step = 0; step < 4; step++) {
        kime_parallel(4, TASKS, task, NULL);
        for (int i = 0; i < TASKS; i++)
            if (!seen[tids[i] & 255]++)
                threads++;
    }
    for (int i = 0; i < TASKS; i++)
        total += ran[i];
    pid_t pid = fork();
    if (pid == 0) {
        alarm(20);
        memset(ran, 0, sizeof ran);
        kime_parallel(4, TASKS, task, NULL);
        for (int i = 0; i < TASKS; i++)
            if (ran[i] != 1)
                _exit(3);
        _exit(0);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    printf("tasks %d threads %d child %d\n", total, threads,
           WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
    return total == 4 * TASKS ? 0 : 1;
}
