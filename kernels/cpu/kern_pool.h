/* kern_pool.h - a fixed pool of worker threads for data-parallel kernels.
 *
 * Created once at start, sized to the machine; never one thread per call.
 * kern_pool_run() splits work into n_tasks tasks handed out through an atomic
 * counter; the calling thread works too and the call returns once every task
 * has finished. Workers spin briefly on a generation counter between calls
 * (a decode step issues hundreds of small calls, each a few microseconds) and
 * then sleep on a condition variable, so an idle pool burns no CPU.
 *
 * Only one thread may call kern_pool_run() on a given pool at a time (the
 * engine thread owns its pool). */
#ifndef KERN_POOL_H
#define KERN_POOL_H

#include <stddef.h>

typedef struct kern_pool kern_pool;

/* fn is called once per task index in [0, n_tasks); `thread` is the index of
 * the executing thread in [0, kern_pool_size()), usable for per-thread scratch. */
typedef void (*kern_task_fn)(void *ctx, int task, int thread);

/* n_threads <= 0 means the number of online CPUs. Returns NULL on failure. */
kern_pool *kern_pool_create(int n_threads);
void kern_pool_free(kern_pool *pool);
int kern_pool_size(const kern_pool *pool);
/* Runs fn(ctx, t, thread) for every t in [0, n_tasks). pool may be NULL:
 * then everything runs on the caller. */
void kern_pool_run(kern_pool *pool, kern_task_fn fn, void *ctx, int n_tasks);

/* Per-thread scratch, owned by the pool (freed by kern_pool_free).
 * kern_pool_reserve_scratch, called like kern_pool_run (by the one thread
 * that runs the pool, never during a run), makes each thread's buffer at
 * least `bytes` long, 64-byte aligned; returns 0, or -1 if pool is NULL or an
 * allocation failed (the buffers that exist keep their contents' size: check
 * kern_pool_scratch_bytes). kern_pool_scratch(pool, thread) is the buffer of
 * thread `thread` (the task callback's argument), NULL before any reserve;
 * a task uses only its own thread's buffer. */
int kern_pool_reserve_scratch(kern_pool *pool, size_t bytes);
void *kern_pool_scratch(const kern_pool *pool, int thread);
size_t kern_pool_scratch_bytes(const kern_pool *pool);

#endif
