/* kern_pool.c - persistent worker threads with an atomic task counter.
 *
 * Protocol (all atomics seq_cst unless noted; the job fields fn/ctx/n_tasks
 * are plain and protected by the protocol itself):
 *   state: even = closed, odd = a run is open. The caller writes the job,
 *          resets `next`, then moves state to the next odd value.
 *   A worker that sees an odd state first increments `busy`, then re-reads
 *   state; only if it is still the same open run does it read the job and
 *   claim tasks with fetch_add on `next`. Then it decrements `busy`.
 *   The caller claims tasks too; once `next` is exhausted it closes the run
 *   (state -> even) and waits for busy == 0.
 * Why this is enough: a worker that saw the run open incremented busy before
 * the caller's close (seq_cst order), so the caller's busy load counts it and
 * waits until it has finished its tasks and stopped reading the job. A worker
 * that increments busy after that load re-reads state and finds it closed (or
 * a later run, whose job was published before it opened), so the caller may
 * rewrite the job fields as soon as it sees busy == 0.
 *
 * Waiting: workers spin on state with a pause for KERN_POOL_SPIN_NS, which
 * covers the gap between the small kernel calls of a decode step, then sleep
 * on a condition variable; the caller signals only when someone sleeps
 * (`sleepers`), so a busy decode loop never touches the mutex. */
#include "kernels/cpu/kern_pool.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define cpu_relax() _mm_pause()
#else
#define cpu_relax() ((void)0)
#endif

/* 50 us: longer than the gaps between kernel calls inside one decode step
 * (a few us of single-threaded work), short enough that an idle server stops
 * burning CPU almost at once. */
#define KERN_POOL_SPIN_NS 50000

struct kern_pool {
    int n_threads; /* including the caller */
    pthread_t *threads;
    struct worker_arg *args;

    atomic_uint state;
    atomic_int next;
    atomic_int busy;
    atomic_int sleepers;
    atomic_int stop;

    /* The job of the current run (see the protocol above). */
    kern_task_fn fn;
    void *ctx;
    int n_tasks;

    pthread_mutex_t mu;
    pthread_cond_t cv;

    /* kern_pool_reserve_scratch: n_scratch buffers of scratch_bytes each. */
    void **scratch;
    int n_scratch;
    size_t scratch_bytes;
};

struct worker_arg {
    kern_pool *pool;
    int index;
};

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Returns once state differs from `seen` or stop is set. */
static unsigned wait_for_change(kern_pool *p, unsigned seen) {
    unsigned s;
    uint64_t t0 = 0;
    for (int i = 0;; i++) {
        s = atomic_load_explicit(&p->state, memory_order_acquire);
        if (s != seen || atomic_load_explicit(&p->stop, memory_order_relaxed))
            return s;
        cpu_relax();
        if ((i & 63) == 63) { /* read the clock only every 64 pauses */
            uint64_t t = now_ns();
            if (t0 == 0)
                t0 = t;
            else if (t - t0 > KERN_POOL_SPIN_NS)
                break;
        }
    }
    pthread_mutex_lock(&p->mu);
    atomic_fetch_add(&p->sleepers, 1);
    while ((s = atomic_load(&p->state)) == seen && !atomic_load(&p->stop))
        pthread_cond_wait(&p->cv, &p->mu);
    atomic_fetch_sub(&p->sleepers, 1);
    pthread_mutex_unlock(&p->mu);
    return s;
}

static void run_tasks(kern_pool *p, int thread) {
    kern_task_fn fn = p->fn;
    void *ctx = p->ctx;
    int n = p->n_tasks;
    for (;;) {
        int t = atomic_fetch_add_explicit(&p->next, 1, memory_order_relaxed);
        if (t >= n)
            break;
        fn(ctx, t, thread);
    }
}

static void *worker_main(void *arg) {
    struct worker_arg *wa = arg;
    kern_pool *p = wa->pool;
    unsigned seen = atomic_load(&p->state);
    for (;;) {
        unsigned s = wait_for_change(p, seen);
        if (atomic_load(&p->stop))
            break;
        seen = s;
        if (!(s & 1u))
            continue; /* a close; wait for the next open */
        atomic_fetch_add(&p->busy, 1);
        if (atomic_load(&p->state) == s)
            run_tasks(p, wa->index);
        atomic_fetch_sub_explicit(&p->busy, 1, memory_order_release);
    }
    return NULL;
}

kern_pool *kern_pool_create(int n_threads) {
    if (n_threads <= 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        n_threads = n > 0 ? (int)n : 1;
    }
    kern_pool *p = calloc(1, sizeof(*p));
    if (!p)
        return NULL;
    p->n_threads = n_threads;
    atomic_init(&p->state, 0);
    atomic_init(&p->next, 0);
    atomic_init(&p->busy, 0);
    atomic_init(&p->sleepers, 0);
    atomic_init(&p->stop, 0);
    if (pthread_mutex_init(&p->mu, NULL) != 0) {
        free(p);
        return NULL;
    }
    if (pthread_cond_init(&p->cv, NULL) != 0) {
        pthread_mutex_destroy(&p->mu);
        free(p);
        return NULL;
    }
    p->scratch = calloc((size_t)n_threads, sizeof(void *));
    p->n_scratch = n_threads;
    int n_workers = n_threads - 1;
    p->threads = calloc((size_t)(n_workers > 0 ? n_workers : 1), sizeof(pthread_t));
    p->args = calloc((size_t)(n_workers > 0 ? n_workers : 1), sizeof(struct worker_arg));
    if (!p->threads || !p->args || !p->scratch) {
        p->n_threads = 1;
        kern_pool_free(p);
        return NULL;
    }
    for (int i = 0; i < n_workers; i++) {
        p->args[i].pool = p;
        p->args[i].index = i + 1;
        if (pthread_create(&p->threads[i], NULL, worker_main, &p->args[i]) != 0) {
            p->n_threads = i + 1; /* join only the ones that started */
            kern_pool_free(p);
            return NULL;
        }
    }
    return p;
}

void kern_pool_free(kern_pool *pool) {
    if (!pool)
        return;
    pthread_mutex_lock(&pool->mu);
    atomic_store(&pool->stop, 1);
    pthread_cond_broadcast(&pool->cv);
    pthread_mutex_unlock(&pool->mu);
    for (int i = 0; i < pool->n_threads - 1; i++)
        pthread_join(pool->threads[i], NULL);
    pthread_cond_destroy(&pool->cv);
    pthread_mutex_destroy(&pool->mu);
    for (int i = 0; pool->scratch && i < pool->n_scratch; i++)
        free(pool->scratch[i]);
    free(pool->scratch);
    free(pool->threads);
    free(pool->args);
    free(pool);
}

int kern_pool_reserve_scratch(kern_pool *pool, size_t bytes) {
    if (!pool)
        return -1;
    if (bytes <= pool->scratch_bytes)
        return 0;
    size_t size = (bytes + 63) & ~(size_t)63;
    void **fresh = calloc((size_t)pool->n_scratch, sizeof(void *));
    int ok = fresh != NULL;
    for (int i = 0; ok && i < pool->n_scratch; i++)
        ok = (fresh[i] = aligned_alloc(64, size)) != NULL;
    if (!ok) { /* keep the old buffers */
        for (int i = 0; fresh && i < pool->n_scratch; i++)
            free(fresh[i]);
        free(fresh);
        return -1;
    }
    for (int i = 0; i < pool->n_scratch; i++) {
        free(pool->scratch[i]);
        pool->scratch[i] = fresh[i];
    }
    free(fresh);
    pool->scratch_bytes = size;
    return 0;
}

void *kern_pool_scratch(const kern_pool *pool, int thread) {
    if (!pool || thread < 0 || thread >= pool->n_scratch)
        return NULL;
    return pool->scratch[thread];
}

size_t kern_pool_scratch_bytes(const kern_pool *pool) {
    return pool ? pool->scratch_bytes : 0;
}

int kern_pool_size(const kern_pool *pool) {
    return pool ? pool->n_threads : 1;
}

void kern_pool_run(kern_pool *pool, kern_task_fn fn, void *ctx, int n_tasks) {
    if (n_tasks <= 0)
        return;
    /* One task, or no helpers: waking workers would only add latency. */
    if (!pool || pool->n_threads == 1 || n_tasks == 1) {
        for (int t = 0; t < n_tasks; t++)
            fn(ctx, t, 0);
        return;
    }
    pool->fn = fn;
    pool->ctx = ctx;
    pool->n_tasks = n_tasks;
    atomic_store_explicit(&pool->next, 0, memory_order_relaxed);
    unsigned s = atomic_load_explicit(&pool->state, memory_order_relaxed);
    atomic_store(&pool->state, s + 1); /* open (odd) */
    if (atomic_load(&pool->sleepers) > 0) {
        pthread_mutex_lock(&pool->mu);
        pthread_cond_broadcast(&pool->cv);
        pthread_mutex_unlock(&pool->mu);
    }
    run_tasks(pool, 0);
    atomic_store(&pool->state, s + 2); /* close (even) */
    /* Workers still inside a task finish it; they cannot start new ones. */
    for (int i = 0; atomic_load(&pool->busy) != 0; i++) {
        cpu_relax();
        if (i > (1 << 16)) /* a worker was descheduled mid-task: let it run */
            sched_yield();
    }
}
