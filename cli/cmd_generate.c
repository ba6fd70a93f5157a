/* cmd_generate.c - `brisk generate`: prompt in, continuation out, on the CPU
 * engine directly (no server). Also the numerical hook the tests use:
 * --dump-logits writes the logits of every prompt position. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli/cli.h"
#include "cli/cli_opts.h"
#include "common/brisk_error.h"
#include "common/brisk_log.h"
#include "kernels/cpu/kern_pool.h"
#include "models/backend.h"
#include "models/model.h"
#include "models/sampler.h"
#include "scheduler/sched_setup.h"

static int generate_parse(int argc, char **argv, cli_generate_opts *o) {
    memset(o, 0, sizeof *o);
    o->prompt = "";
    o->n_predict = 128;
    o->cuda_graphs = 1;
    o->kv_dtype = KERN_KV_N_DTYPES; /* not given: the device's default (cmd_generate) */
    o->sampling = model_sampling_default();
    /* Defaults as llama.cpp's CLI: mildly creative, reproducible with --seed. */
    o->sampling.temperature = 0.8f;
    o->sampling.top_k = 40;
    o->sampling.top_p = 0.95f;
    o->sampling.min_p = 0.05f;
    o->sampling.penalty_last_n = 64;
    o->sampling.seed = (uint64_t)time(NULL);
    cli_vals v;
    int prc = cli_opts_parse(CLI_GENERATE, argc, argv, &v);
    if (prc != CLI_OK)
        return prc == CLI_HELP ? -1 : 2;
    if (cli_opts_fill(CLI_GENERATE, &v, o, sizeof *o) < 0)
        return 1;
    if (cli_check_dummy(o->dummy, o->tokenizer, o->model) < 0)
        return 2;
    if (o->dummy)
        o->model = o->dummy;
    if (!o->model)
        o->model = cli_default_model();
    if (!o->model) {
        cli_error("generate: --model is required (or run scripts/fetch-model.sh for the default)");
        return 2;
    }
    return 0;
}

/* Parses --prompt-ids: space-separated token ids, each in [0, n_vocab). */
static int generate_parse_ids(const char *s, int n_vocab, int32_t **ids, int *n) {
    size_t cap = strlen(s) / 2 + 1;
    *ids = malloc(cap * sizeof **ids);
    if (!*ids)
        return BRISK_ENOMEM;
    *n = 0;
    const char *p = s;
    while (*p) {
        while (*p == ' ' || *p == ',')
            p++;
        if (!*p)
            break;
        char *end;
        long id = strtol(p, &end, 10);
        if (end == p || id < 0 || id >= n_vocab || (size_t)*n >= cap) {
            free(*ids);
            *ids = NULL;
            return BRISK_EINVAL;
        }
        (*ids)[(*n)++] = (int32_t)id;
        p = end;
    }
    if (*n == 0) {
        free(*ids);
        *ids = NULL;
        return BRISK_EINVAL;
    }
    return 0;
}

/* Encodes the prompt into a malloc'ed array; an empty prompt is BOS alone. */
static int generate_encode(const tok_vocab *v, const cli_generate_opts *o, int32_t **ids, int *n) {
    int flags = (o->special ? TOK_PARSE_SPECIAL : 0) |
                (!o->no_bos && tok_add_bos_default(v) ? TOK_ADD_BOS : 0);
    size_t len = strlen(o->prompt);
    if (len == 0) {
        *ids = malloc(sizeof **ids);
        if (!*ids)
            return BRISK_ENOMEM;
        if (tok_bos(v) < 0) {
            free(*ids);
            return BRISK_EINVAL;
        }
        (*ids)[0] = tok_bos(v);
        *n = 1;
        return 0;
    }
    int need = tok_encode(v, o->prompt, len, flags, NULL, 0);
    if (need < 0)
        return need;
    *ids = malloc((size_t)(need > 0 ? need : 1) * sizeof **ids);
    if (!*ids)
        return BRISK_ENOMEM;
    int got = tok_encode(v, o->prompt, len, flags, *ids, need);
    if (got < 0) {
        free(*ids);
        return got;
    }
    *n = got;
    return 0;
}

/* Evaluates the prompt in chunks of the backend's batch size; with dump
 * set, every position's logits are appended to it. Afterwards the last
 * prompt position's logits are row *last_row of the backend's last forward. */
static int generate_prefill(model_backend *be, kv_cache *kv, const int32_t *ids, int n, int chunk,
                            FILE *dump, int *last_row) {
    int n_vocab = model_get_config(be->m)->n_vocab;
    int32_t *pos = malloc((size_t)chunk * sizeof *pos);
    int32_t *seq = calloc((size_t)chunk, sizeof *seq);
    uint8_t *want = malloc((size_t)chunk);
    int rc = (pos && seq && want) ? 0 : BRISK_ENOMEM;
    for (int off = 0; rc == 0 && off < n; off += chunk) {
        int c = n - off < chunk ? n - off : chunk;
        for (int i = 0; i < c; i++) {
            pos[i] = off + i;
            want[i] = dump != NULL || off + i == n - 1;
        }
        model_batch b = {c, ids + off, pos, seq, want, NULL};
        int n_out;
        rc = model_backend_forward(be, kv, &b, &n_out);
        for (int r = 0; rc == 0 && dump && r < n_out; r++) {
            const float *row;
            rc = model_backend_logits(be, r, &row);
            if (rc == 0 && fwrite(row, sizeof(float), (size_t)n_vocab, dump) != (size_t)n_vocab)
                rc = BRISK_EIO;
        }
        *last_row = n_out - 1;
    }
    free(pos);
    free(seq);
    free(want);
    return rc;
}

int cmd_generate(int argc, char **argv) {
    cli_generate_opts o;
    int prc = generate_parse(argc, argv, &o);
    if (prc)
        return prc < 0 ? 0 : prc; /* -1: --help */

    char err[512] = "";
    int status = 1;
    kern_pool *pool = kern_pool_create((int)o.threads);
    sched_setup st = {0};
    model *m = NULL;          /* st.m */
    model_backend *be = NULL; /* st.be */
    kv_cache *kv = NULL;      /* st.kv */
    model_sampler *smp = NULL;
    int32_t *ids = NULL;
    FILE *dump = NULL;
    if (!pool) {
        cli_error("cannot start the thread pool");
        goto out;
    }
    /* One slot holding the whole context; without --kv-cache-dtype f32 K/V
     * on the CPU (the golden outputs are checked there), f16 on the GPU. The
     * context and the chunk depend on the prompt, so the model comes first. */
    sched_setup_opts so = {.model_path = o.model,
                           .dummy = o.dummy,
                           .tokenizer = o.tokenizer,
                           .weights = o.weights,
                           .device = o.device,
                           .pool = pool,
                           .max_seqs = 1,
                           .cuda_graphs = o.cuda_graphs,
                           .kv_dtype = o.kv_dtype,
                           .kv_dtype_by_device = o.kv_dtype == KERN_KV_N_DTYPES,
                           .kv_exact = 1};
    double t_load = brisk_now();
    if (sched_setup_load(&so, &st, err, sizeof err) < 0) {
        cli_error("%s", err);
        goto out;
    }
    m = st.m;
    t_load = brisk_now() - t_load;
    const model_config *c = model_get_config(m);
    const tok_vocab *v = model_get_vocab(m);
    int n_prompt = 0;
    if (o.prompt_ids) {
        if (generate_parse_ids(o.prompt_ids, c->n_vocab, &ids, &n_prompt) < 0) {
            cli_error("--prompt-ids: want space-separated token ids in [0, %d)", c->n_vocab);
            goto out;
        }
    } else if (generate_encode(v, &o, &ids, &n_prompt) < 0) {
        cli_error("cannot encode the prompt");
        goto out;
    }
    long n_ctx = o.ctx ? o.ctx : (long)n_prompt + o.n_predict;
    if (n_ctx < n_prompt + o.n_predict) {
        cli_error("prompt (%d tokens) + -n %ld exceeds --ctx %ld", n_prompt, o.n_predict, n_ctx);
        goto out;
    }
    if (n_ctx > c->n_ctx_train)
        BRISK_WARN("context %ld exceeds the model's training context %d", n_ctx, c->n_ctx_train);
    int chunk = n_prompt < 512 ? n_prompt : 512;
    if (chunk < 1)
        chunk = 1;
    so.max_batch_tokens = chunk;
    so.max_ctx = (int)n_ctx;
    if (sched_setup_finish(&so, &st, err, sizeof err) < 0) {
        m = NULL;
        cli_error("%s", err);
        goto out;
    }
    be = st.be;
    kv = st.kv;
    if (kv_cache_seq_grow(kv, 0, (int)n_ctx) < 0) {
        cli_error("out of memory for a KV cache of %ld positions", n_ctx);
        goto out;
    }
    smp = model_sampler_create(&o.sampling, c->n_vocab);
    int32_t *hist = realloc(ids, sizeof(int32_t) * (size_t)(n_prompt + o.n_predict + 1));
    if (hist)
        ids = hist;
    if (!smp || !hist) {
        cli_error("out of memory for a context of %ld tokens", n_ctx);
        goto out;
    }
    if (o.dump_logits && !(dump = fopen(o.dump_logits, "wb"))) {
        cli_error("cannot write '%s'", o.dump_logits);
        goto out;
    }

    double t0 = brisk_now();
    int row = 0;
    int rc = generate_prefill(be, kv, ids, n_prompt, chunk, dump, &row);
    if (rc < 0) {
        cli_error("prompt evaluation failed: %s", brisk_strerror(rc));
        goto out;
    }
    if (dump && fclose(dump) != 0) {
        dump = NULL;
        cli_error("cannot write '%s'", o.dump_logits);
        goto out;
    }
    dump = NULL;
    double t_prompt = brisk_now() - t0;

    tok_decoder dec;
    /* SentencePiece drops the space that starts a text; a continuation of
     * a prompt keeps it ("a cat" + " named" must not print "catnamed"). */
    int continues = n_prompt > 1 || (n_prompt == 1 && ids[0] != tok_bos(v));
    tok_decoder_init(&dec, v, continues ? TOK_CONTINUATION : 0);
    char piece[512];
    int n_gen = 0, n_hist = n_prompt;
    double t1 = brisk_now();
    const int32_t seq0 = 0;
    for (long i = 0; i < o.n_predict; i++) {
        model_sample_job job = {.row = row, .sampler = smp, .hist = ids, .n_hist = n_hist};
        int32_t tok;
        if ((rc = model_backend_sample(be, &job, 1, &tok)) < 0) {
            cli_error("sampling failed: %s", brisk_strerror(rc));
            goto out;
        }
        n_gen++;
        if (!o.ignore_eos && tok_is_eog(v, tok))
            break;
        ids[n_hist++] = tok;
        int len = tok_decoder_push(&dec, tok, piece, sizeof piece);
        if (len > 0) {
            fwrite(piece, 1, (size_t)len, stdout);
            fflush(stdout);
        }
        if (i + 1 == o.n_predict)
            break;
        int32_t pos = n_hist - 1;
        model_batch b = {1, &tok, &pos, &seq0, NULL, NULL};
        int n_out;
        if ((rc = model_backend_forward(be, kv, &b, &n_out)) < 0) {
            cli_error("decode failed: %s", brisk_strerror(rc));
            goto out;
        }
        row = 0;
    }
    int len = tok_decoder_flush(&dec, piece, sizeof piece);
    if (len > 0)
        fwrite(piece, 1, (size_t)len, stdout);
    fflush(stdout);
    double t_gen = brisk_now() - t1;
    char devdesc[200];
    be->ops->describe(be, devdesc, sizeof devdesc);
    fprintf(stderr,
            "\nbrisk: load %.2f s | prompt %d tokens, %.1f tok/s | generated %d tokens, %.1f tok/s "
            "| weights %s | %s\n",
            t_load, n_prompt, t_prompt > 0 ? n_prompt / t_prompt : 0.0, n_gen,
            t_gen > 0 ? n_gen / t_gen : 0.0, model_weights_fmt_name(o.weights), devdesc);
    status = 0;
out:
    if (dump)
        fclose(dump);
    free(ids);
    model_sampler_free(smp);
    sched_setup_free(&st); /* the cache, the backend, the model */
    kern_pool_free(pool);
    return status;
}
