/* engine_trace.c - the step trace's file: JSON lines through a large stdio
 * buffer (engine_trace.h). */
#include "scheduler/engine_trace.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/brisk_error.h"
#include "common/brisk_log.h"

/* A line is ~500 bytes: 1 MiB holds ~2,000 steps, a few seconds of decode
 * at 256 streams, so a busy engine writes a few times a second. */
#define TRACE_BUF_BYTES ((size_t)1 << 20)

struct sched_trace {
    FILE *f;
    char *buf; /* f's buffer: freed after fclose */
    double t0; /* brisk_now() at open: lines give times from here */
    int dirty; /* lines added since the last flush */
    int failed;
};

int sched_trace_open(const char *path, sched_trace **out, char *err, size_t err_len) {
    *out = NULL;
    sched_trace *t = calloc(1, sizeof *t);
    char *buf = malloc(TRACE_BUF_BYTES);
    if (!t || !buf) {
        free(t);
        free(buf);
        return brisk_set_err(err, err_len, BRISK_ENOMEM, "step trace: out of memory");
    }
    t->f = fopen(path, "a");
    if (!t->f) {
        int e = errno;
        free(t);
        free(buf);
        return brisk_set_err(err, err_len, BRISK_EIO, "step trace: cannot open '%s': %s", path,
                             strerror(e));
    }
    setvbuf(t->f, buf, _IOFBF, TRACE_BUF_BYTES);
    t->buf = buf;
    t->t0 = brisk_now();
    *out = t;
    return 0;
}

static void trace_failed(sched_trace *t) {
    if (!t->failed)
        BRISK_ERROR("step trace: write failed (%s); no more steps are traced", strerror(errno));
    t->failed = 1;
}

void sched_trace_write(sched_trace *t, const sched_trace_step *s) {
    if (t->failed)
        return;
    const double ms = 1e3;
    int n = fprintf(
        t->f,
        "{\"step\":%lld,\"t\":%.6f,\"wall_ms\":%.3f,\"sched_ms\":%.3f,\"forward_ms\":%.3f,"
        "\"mask_ms\":%.3f,\"sample_ms\":%.3f,\"host_ms\":%.3f,\"gap_ms\":%.3f,\"tokens\":%d,"
        "\"decode_rows\":%d,\"prefill_tokens\":%d,\"prefill_chunks\":%d,\"sampled\":%d,"
        "\"constrained\":%d,\"logprob_rows\":%d,\"parked\":%d,\"unparked\":%d,"
        "\"admitted\":%d,\"preempted\":%d,"
        "\"running\":%d,\"waiting\":%d,\"kv_blocks_used\":%d,\"kv_blocks_total\":%d,"
        "\"pass\":\"%s\",\"spec_proposed\":%d,\"spec_accepted\":%d,\"spec_seqs\":%d}\n",
        s->step, s->t_start - t->t0, s->wall_s * ms, s->sched_s * ms, s->forward_s * ms,
        s->mask_s * ms, s->sample_s * ms, s->host_s * ms, s->gap_s * ms, s->tokens, s->decode_rows,
        s->prefill_tokens, s->prefill_chunks, s->sampled, s->constrained, s->logprob_rows,
        s->parked, s->unparked, s->admitted, s->preempted, s->running, s->waiting,
        s->kv_blocks_used, s->kv_blocks_total, model_pass_kind_name(s->pass), s->spec_proposed,
        s->spec_accepted, s->spec_seqs);
    if (n < 0)
        trace_failed(t);
    t->dirty = 1;
}

void sched_trace_flush(sched_trace *t) {
    if (!t->dirty || t->failed)
        return;
    t->dirty = 0;
    if (fflush(t->f) != 0)
        trace_failed(t);
}

void sched_trace_close(sched_trace *t) {
    if (!t)
        return;
    if (fclose(t->f) != 0 && !t->failed) /* fclose flushes */
        BRISK_ERROR("step trace: closing failed: %s", strerror(errno));
    free(t->buf);
    free(t);
}
