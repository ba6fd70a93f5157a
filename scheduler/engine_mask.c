/* engine_mask.c - the grammar mask workers (see engine_mask.h). */
#include "scheduler/engine_mask.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/brisk_alloc.h"
#include "common/brisk_error.h"
#include "common/brisk_log.h"

/* Below the engine and its kernel pool: mask work fills the cores the
 * forward leaves idle. 10 of nice is a CFS weight of 110 against 1024. */
#define MASK_WORKER_NICE 10

struct sched_mask_pool {
    pthread_mutex_t mu;
    pthread_cond_t cv; /* jobs queued, or quit */
    sched_mask_job *head, *tail;
    int quit;
    int n_workers;
    pthread_t *threads;
    void (*done)(void *ctx);
    void *ctx;
};

static void job_free(sched_mask_job *j) {
    model_grammar_matcher_free(j->gm);
    free(j->mask);
    free(j);
}

/* Computes j's mask (no lock held: the job is RUNNING and only this thread
 * touches its matcher and buffer), then publishes it or, when its sequence
 * has gone meanwhile, frees it. */
static void job_run(sched_mask_pool *p, sched_mask_job *j) {
    int rc = model_grammar_mask(j->gm, j->mask);
    long long work = model_grammar_last_work(j->gm);
    pthread_mutex_lock(&p->mu);
    int orphan = j->orphan;
    if (!orphan) {
        j->rc = rc;
        j->work = work;
        j->state = SCHED_MASK_READY;
    }
    pthread_mutex_unlock(&p->mu);
    if (orphan)
        job_free(j);
}

static void *worker_main(void *arg) {
    sched_mask_pool *p = arg;
#ifdef SYS_gettid
    /* Per-thread on Linux; raising one's own nice value is always allowed. */
    if (setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), MASK_WORKER_NICE) != 0)
        BRISK_DEBUG("engine: grammar mask worker keeps its priority");
#endif
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (!p->quit && !p->head)
            pthread_cond_wait(&p->cv, &p->mu);
        if (p->quit)
            break;
        sched_mask_job *j = p->head;
        p->head = j->next;
        if (!p->head)
            p->tail = NULL;
        j->next = NULL;
        j->state = SCHED_MASK_RUNNING;
        pthread_mutex_unlock(&p->mu);
        job_run(p, j);
        p->done(p->ctx);
        pthread_mutex_lock(&p->mu);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

sched_mask_pool *sched_mask_pool_create(int n_workers, void (*done)(void *ctx), void *ctx) {
    sched_mask_pool *p = brisk_calloc(1, sizeof *p);
    if (!p || n_workers < 0)
        goto fail;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    p->done = done;
    p->ctx = ctx;
    if (n_workers > 0 && !(p->threads = brisk_calloc((size_t)n_workers, sizeof *p->threads)))
        goto fail_sync;
    for (int i = 0; i < n_workers; i++) {
        if (pthread_create(&p->threads[i], NULL, worker_main, p) != 0)
            break;
        p->n_workers++;
    }
    if (p->n_workers == n_workers)
        return p;
    sched_mask_pool_free(p);
    return NULL;
fail_sync:
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv);
fail:
    free(p);
    return NULL;
}

void sched_mask_pool_free(sched_mask_pool *p) {
    if (!p)
        return;
    pthread_mutex_lock(&p->mu);
    p->quit = 1;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; i < p->n_workers; i++)
        pthread_join(p->threads[i], NULL);
    /* Queued orphans never reached a worker (running ones were freed by it). */
    for (sched_mask_job *j = p->head, *n; j; j = n) {
        n = j->next;
        j->next = NULL;
        j->state = SCHED_MASK_IDLE;
        if (j->orphan)
            job_free(j);
    }
    free(p->threads);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv);
    free(p);
}

int sched_mask_pool_workers(const sched_mask_pool *p) {
    return p->n_workers;
}

sched_mask_job *sched_mask_job_create(model_grammar_matcher *gm, uint32_t *mask) {
    sched_mask_job *j = gm && mask ? brisk_calloc(1, sizeof *j) : NULL;
    if (!j) {
        model_grammar_matcher_free(gm);
        free(mask);
        return NULL;
    }
    j->gm = gm;
    j->mask = mask;
    return j;
}

void sched_mask_submit(sched_mask_pool *p, sched_mask_job *j) {
    /* Most states were met before (the next item of an array, a string's
     * middle): their mask is a cache lookup, ready at once, with no worker
     * to wake and no step to sit out. Only the state's job is touched: it is
     * not queued, so no worker sees it. */
    int rc = model_grammar_mask_try(j->gm, j->mask, 0);
    pthread_mutex_lock(&p->mu);
    if (rc != BRISK_ENOSPC) {
        j->rc = rc;
        j->work = model_grammar_last_work(j->gm);
        j->state = SCHED_MASK_READY;
        pthread_mutex_unlock(&p->mu);
        return;
    }
    j->state = SCHED_MASK_QUEUED;
    j->next = NULL;
    if (p->tail)
        p->tail->next = j;
    else
        p->head = j;
    p->tail = j;
    if (p->n_workers > 0)
        pthread_cond_signal(&p->cv);
    pthread_mutex_unlock(&p->mu);
}

sched_mask_state sched_mask_poll(sched_mask_pool *p, sched_mask_job *j, int *rc, long long *work) {
    pthread_mutex_lock(&p->mu);
    sched_mask_state st = j->state;
    if (st == SCHED_MASK_READY) {
        *rc = j->rc;
        *work = j->work;
    }
    pthread_mutex_unlock(&p->mu);
    return st;
}

/* Under p->mu: takes j off the queue; 1 if it was there. */
static int unqueue(sched_mask_pool *p, sched_mask_job *j) {
    for (sched_mask_job **at = &p->head, *prev = NULL; *at; prev = *at, at = &(*at)->next) {
        if (*at != j)
            continue;
        *at = j->next;
        if (p->tail == j)
            p->tail = prev;
        j->next = NULL;
        return 1;
    }
    return 0;
}

int sched_mask_run_here(sched_mask_pool *p, sched_mask_job *j, long long budget) {
    pthread_mutex_lock(&p->mu);
    int mine = j->state == SCHED_MASK_QUEUED && unqueue(p, j);
    if (mine)
        j->state = SCHED_MASK_RUNNING;
    pthread_mutex_unlock(&p->mu);
    if (!mine)
        return 0;
    if (budget < 0) {
        job_run(p, j);
        return 1;
    }
    int rc = model_grammar_mask_try(j->gm, j->mask, budget);
    pthread_mutex_lock(&p->mu);
    if (rc == BRISK_ENOSPC) { /* costlier: back to the workers, first in line */
        j->state = SCHED_MASK_QUEUED;
        j->next = p->head;
        p->head = j;
        if (!p->tail)
            p->tail = j;
        if (p->n_workers > 0)
            pthread_cond_signal(&p->cv);
    } else {
        j->rc = rc;
        j->work = model_grammar_last_work(j->gm);
        j->state = SCHED_MASK_READY;
    }
    pthread_mutex_unlock(&p->mu);
    return rc != BRISK_ENOSPC;
}

void sched_mask_job_release(sched_mask_pool *p, sched_mask_job *j) {
    if (!j)
        return;
    pthread_mutex_lock(&p->mu);
    int running = j->state == SCHED_MASK_RUNNING;
    if (running)
        j->orphan = 1;
    else if (j->state == SCHED_MASK_QUEUED)
        unqueue(p, j);
    pthread_mutex_unlock(&p->mu);
    if (!running)
        job_free(j);
}
