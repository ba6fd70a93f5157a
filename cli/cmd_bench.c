/* cmd_bench.c - `brisk bench`: llama-bench style throughput of the engine.
 *   pp<P>: one batched forward of P prompt tokens (tokens/s);
 *   tg<N>: N single-token decode steps from an empty context, or after
 *          --depth D positions of context filled first (llama-bench's -d;
 *          tokens/s at that depth: attention reads the D positions' KV);
 * plus the machine's measured read-only memory bandwidth (read_bw_gb_s: the
 * CPU's pool threads reading 512 MiB, CUDA's streaming reduction over 2 GiB)
 * and the decode roofline it implies (tg_roofline_tok_s = that bandwidth /
 * weight bytes read per generated token; tg_frac_roofline = tg_tok_s over it).
 * CUDA also reports its device-to-device copy bandwidth (copy_bw_gb_s, read +
 * write; null on the CPU), which is not the roofline. Prints one JSON object;
 * bench/model_bench.sh turns several into a table. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/cli_opts.h"
#include "common/brisk_error.h"
#include "common/brisk_log.h"
#include "kernels/cpu/kern_bench.h"
#include "kernels/cpu/kern_cpu.h"
#include "kernels/cpu/kern_pool.h"
#include "models/backend.h"
#include "models/model.h"
#include "scheduler/sched_setup.h"

/* Random token ids from a fixed seed: benchmarks never run on zeros. */
static void bench_tokens(int32_t *ids, int n, int n_vocab) {
    uint64_t x = 0x2545f4914f6cdd1dull;
    for (int i = 0; i < n; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        ids[i] = (int32_t)(x % (uint64_t)n_vocab);
    }
}

static int bench_pp(model_backend *be, kv_cache *kv, const int32_t *ids, int n, double *secs) {
    int32_t *pos = malloc((size_t)n * sizeof *pos);
    int32_t *seq = calloc((size_t)n, sizeof *seq);
    if (!pos || !seq) {
        free(pos);
        free(seq);
        return BRISK_ENOMEM;
    }
    for (int i = 0; i < n; i++)
        pos[i] = i;
    model_batch b = {n, ids, pos, seq, NULL, NULL};
    int n_out;
    double t0 = brisk_now();
    int rc = model_backend_forward(be, kv, &b, &n_out);
    *secs = brisk_now() - t0;
    free(pos);
    free(seq);
    return rc;
}

/* One forward of ids[p0, p0 + n) at their positions (filling the context). */
static int bench_fill(model_backend *be, kv_cache *kv, const int32_t *ids, int p0, int n) {
    int32_t *pos = malloc((size_t)n * sizeof *pos);
    int32_t *seq = calloc((size_t)n, sizeof *seq);
    int rc = BRISK_ENOMEM;
    if (pos && seq) {
        for (int i = 0; i < n; i++)
            pos[i] = p0 + i;
        model_batch b = {n, ids + p0, pos, seq, NULL, NULL};
        int n_out;
        rc = model_backend_forward(be, kv, &b, &n_out);
    }
    free(pos);
    free(seq);
    return rc;
}

/* n decode steps at positions pos0, pos0 + 1, ... (the KV before pos0 is
 * already written). */
static int bench_tg(model_backend *be, kv_cache *kv, const int32_t *ids, int pos0, int n,
                    double *secs) {
    const int32_t seq0 = 0;
    double t0 = brisk_now();
    for (int i = pos0; i < pos0 + n; i++) {
        int32_t pos = i;
        model_batch b = {1, &ids[i], &pos, &seq0, NULL, NULL};
        int n_out;
        int rc = model_backend_forward(be, kv, &b, &n_out);
        if (rc < 0)
            return rc;
    }
    *secs = brisk_now() - t0;
    return 0;
}

/* Writes s as a JSON string literal: the model name comes from the file,
 * which may hold quotes, backslashes or control bytes. */
static void bench_json_string(FILE *f, const char *s) {
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\')
            fprintf(f, "\\%c", *p);
        else if (*p < 0x20)
            fprintf(f, "\\u%04x", *p);
        else
            fputc(*p, f);
    }
    fputc('"', f);
}

int cmd_bench(int argc, char **argv) {
    cli_bench_opts o = {.weights = MODEL_WEIGHTS_AUTO,
                        .device = MODEL_DEVICE_CPU,
                        .n_pp = 512,
                        .n_tg = 128,
                        .reps = 3,
                        .cuda_graphs = 1,
                        .kv_dtype = KERN_KV_F16};
    cli_vals v;
    int prc = cli_opts_parse(CLI_BENCH, argc, argv, &v);
    if (prc != CLI_OK)
        return prc == CLI_HELP ? 0 : 2;
    if (cli_opts_fill(CLI_BENCH, &v, &o, sizeof o) < 0)
        return 1;
    if (cli_check_dummy(o.dummy, o.tokenizer, o.model) < 0)
        return 2;
    if (o.dummy)
        o.model = o.dummy;
    if (!o.model)
        o.model = cli_default_model();
    if (!o.model) {
        cli_error("bench: --model is required");
        return 2;
    }
    long n_pp = o.n_pp, n_tg = o.n_tg;
    char err[512] = "";
    int status = 1;
    kern_pool *pool = kern_pool_create((int)o.threads);
    sched_setup st = {0};
    model *m = NULL;          /* st.m */
    model_backend *be = NULL; /* st.be */
    kv_cache *kv = NULL;      /* st.kv */
    int32_t *ids = NULL;
    if (!pool)
        goto out;
    long depth = o.depth;
    int n_ctx = (int)(n_pp > depth + n_tg ? n_pp : depth + n_tg);
    if (n_ctx < 1)
        n_ctx = 1;
    /* The depth is filled in chunks of the pp size (at most 512 when there
     * is no pp test). */
    int chunk = n_pp > 0 ? (int)n_pp : depth < 512 ? (int)depth : 512;
    if (chunk < 1)
        chunk = 1;
    sched_setup_opts so = {.model_path = o.model,
                           .dummy = o.dummy,
                           .tokenizer = o.tokenizer,
                           .weights = o.weights,
                           .device = o.device,
                           .pool = pool,
                           .max_batch_tokens = chunk,
                           .max_ctx = n_ctx,
                           .max_seqs = 1,
                           .cuda_graphs = o.cuda_graphs,
                           .kv_dtype = o.kv_dtype,
                           .kv_exact = 1};
    if (sched_setup_create(&so, &st, err, sizeof err) < 0) {
        cli_error("%s", err);
        goto out;
    }
    m = st.m, be = st.be, kv = st.kv;
    const model_config *c = model_get_config(m);
    if (kv_cache_seq_grow(kv, 0, n_ctx) < 0)
        kv = NULL;
    ids = malloc((size_t)n_ctx * sizeof *ids);
    if (!kv || !ids) {
        cli_error("bench: out of memory");
        goto out;
    }
    bench_tokens(ids, n_ctx, c->n_vocab);

    /* Warm-up: page the weights in and let the pool's threads settle. */
    double secs, best_pp = 0, best_tg = 0;
    if (bench_tg(be, kv, ids, 0, n_tg < 8 ? (int)n_tg : 8, &secs) < 0)
        goto out;
    /* The context of the depth, once, in chunks: later passes (the pp test,
     * each tg rep) write the same tokens at the same positions, so the same
     * K/V (batch invariance), and tg reads positions [0, depth) as filled. */
    for (long p = 0; p < depth; p += chunk) {
        int k = depth - p < chunk ? (int)(depth - p) : chunk;
        if (bench_fill(be, kv, ids, (int)p, k) < 0)
            goto out;
    }
    for (long r = 0; r < o.reps; r++) {
        if (n_pp > 0) {
            if (bench_pp(be, kv, ids, (int)n_pp, &secs) < 0)
                goto out;
            if (best_pp == 0 || secs < best_pp)
                best_pp = secs;
        }
        if (n_tg > 0) {
            if (bench_tg(be, kv, ids, (int)depth, (int)n_tg, &secs) < 0)
                goto out;
            if (best_tg == 0 || secs < best_tg)
                best_tg = secs;
        }
    }
    /* The roofline is the read-only bandwidth (a decode step reads its
     * weights and writes next to nothing); the copy figure, where the backend
     * has one (CUDA), is reported beside it and never used as the roofline. */
    double bw = be->ops->mem_bw(be) * 1e-9; /* GB/s */
    double copy_bw = be->ops->copy_bw ? be->ops->copy_bw(be) * 1e-9 : 0.0;
    size_t wbytes = be->weight_bytes;
    char cpu[256], dev[256];
    kern_cpu_describe(cpu, sizeof cpu);
    be->ops->describe(be, dev, sizeof dev);
    double tg_tps = best_tg > 0 ? (double)n_tg / best_tg : 0.0;
    double roof = bw * 1e9 / (double)wbytes;
    printf("{\"model\": ");
    bench_json_string(stdout, model_name(m));
    printf(
        ", \"weights\": \"%s\", \"threads\": %d, \"n_params\": %lld, \"n_params_active\": %lld, "
        "\"weight_bytes\": %zu, \"pp\": %ld, \"pp_tok_s\": %.2f, \"tg\": %ld, \"tg_tok_s\": %.2f, "
        "\"depth\": %ld, \"kv_dtype\": \"%s\", \"read_bw_gb_s\": %.2f, \"tg_roofline_tok_s\": "
        "%.2f, "
        "\"tg_frac_roofline\": %.3f, ",
        model_weights_fmt_name(o.weights), kern_pool_size(pool), (long long)model_n_params(m),
        (long long)model_n_params_active(m), wbytes, n_pp,
        best_pp > 0 ? (double)n_pp / best_pp : 0.0, n_tg, tg_tps, depth,
        kern_kv_dtype_name(st.kv_dtype), bw, roof, roof > 0 ? tg_tps / roof : 0.0);
    /* At a depth the step also reads the KV cache: the positions' K and V
     * of every layer (kern_kv.h's bytes), on average depth + n_tg / 2 of
     * them; the roofline with them is the decode ceiling at that context. */
    kv_cache_shape sh;
    kv_cache_get_shape(kv, &sh);
    double kv_pos = (double)sh.block_bytes / (double)kv_cache_block_size(kv);
    double kv_read = kv_pos * ((double)depth + (double)n_tg / 2.0);
    printf("\"kv_bytes_per_pos\": %.1f, \"tg_roofline_kv_tok_s\": %.2f, ", kv_pos,
           bw * 1e9 / ((double)wbytes + kv_read));
    if (be->ops->copy_bw)
        printf("\"copy_bw_gb_s\": %.2f, ", copy_bw);
    else
        printf("\"copy_bw_gb_s\": null, ");
    printf("\"cpu\": \"%s\", \"device\": ", cpu);
    bench_json_string(stdout, dev);
    char kernels[1024] = "";
    if (be->device == MODEL_DEVICE_CPU)
        model_cpu_kernels_describe(m, kernels, sizeof kernels);
    printf(", \"kernels\": ");
    bench_json_string(stdout, kernels);
    printf(", \"backend\": \"%s\", \"pp_tflop_s\": %.3f}\n", be->ops->name,
           best_pp > 0 ? 2.0 * (double)model_n_params_active(m) * (double)n_pp / best_pp * 1e-12
                       : 0.0);
    status = 0;
out:
    free(ids);
    sched_setup_free(&st); /* the cache, the backend, the model */
    kern_pool_free(pool);
    return status;
}
