/* test_kern_pool.c - every task runs exactly once on a valid thread index,
 * edge counts (0, fewer tasks than threads, NULL pool), workers that went to
 * sleep wake up, and the cost of 10k back-to-back tiny dispatches. Run it
 * under TSan (BRISK_TSAN=ON) too: the job hand-off must be race-free. */
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

#include "kernels/cpu/kern_bench.h"
#include "kernels/cpu/kern_pool.h"
#include "test_kern_util.h"

#define MAX_TASKS 1024

typedef struct {
    atomic_int count[MAX_TASKS];
    atomic_int bad_thread;
    int n_threads;
    int payload
        [MAX_TASKS]; /* plain writes: TSan checks they are ordered before the caller's reads */
} job;

static void task_fn(void *ctx, int task, int thread) {
    job *j = ctx;
    atomic_fetch_add(&j->count[task], 1);
    if (thread < 0 || thread >= j->n_threads)
        atomic_fetch_add(&j->bad_thread, 1);
    j->payload[task] = task * 3 + 1;
}

static int run_and_check(kern_pool *pool, job *j, int n_tasks) {
    for (int i = 0; i < MAX_TASKS; i++)
        atomic_store(&j->count[i], 0);
    memset(j->payload, 0, sizeof(j->payload));
    kern_pool_run(pool, task_fn, j, n_tasks);
    int bad = 0;
    for (int i = 0; i < MAX_TASKS; i++) {
        int want = i < n_tasks ? 1 : 0;
        if (atomic_load(&j->count[i]) != want || (want && j->payload[i] != i * 3 + 1))
            bad++;
    }
    return bad;
}

static void test_pool(int n_threads) {
    kern_pool *pool = kern_pool_create(n_threads);
    CHECK(pool != NULL, "create %d", n_threads);
    if (!pool)
        return;
    int size = kern_pool_size(pool);
    CHECK(n_threads <= 0 ? size >= 1 : size == n_threads, "size %d for %d", size, n_threads);
    static job j;
    j.n_threads = size;
    atomic_store(&j.bad_thread, 0);
    int bad = 0;
    const int counts[] = {0, 1, 2, 3, 7, 64, 1000, MAX_TASKS};
    for (int rep = 0; rep < 200; rep++)
        for (size_t c = 0; c < sizeof(counts) / sizeof(counts[0]); c++)
            bad += run_and_check(pool, &j, counts[c]);
    /* Fewer tasks than threads. */
    for (int n = 1; n < size; n++)
        bad += run_and_check(pool, &j, n);
    /* Let the workers fall asleep (spin window is 50 us), then wake them. */
    for (int rep = 0; rep < 5; rep++) {
        usleep(2000);
        bad += run_and_check(pool, &j, 100);
    }
    CHECK(bad == 0, "%d threads: %d tasks miscounted", size, bad);
    CHECK(atomic_load(&j.bad_thread) == 0, "thread index out of range");

    /* Dispatch cost: what each of the hundreds of kernel calls of a decode
     * step pays on top of its work. */
    double us = kern_bench_pool_dispatch(pool, 10000);
    printf("pool %d threads: %.2f us per dispatch (10k runs of %d empty tasks)\n", size, us, size);
    kern_pool_free(pool);
}

int main(void) {
    kern_pool_run(NULL, task_fn, &(job){.n_threads = 1}, 0);
    static job j1;
    j1.n_threads = 1;
    CHECK(run_and_check(NULL, &j1, 10) == 0, "NULL pool runs on the caller");
    test_pool(1);
    test_pool(2);
    test_pool(4);
    test_pool(0);
    kern_pool_free(NULL);
    return finish("test_kern_pool");
}
