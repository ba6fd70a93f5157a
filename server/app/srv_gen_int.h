/* srv_gen_int.h - the state of one generation request (srv_gen.c): its
 * choices, what streaming and the audit line (srv_gen_audit.c) read.
 * Server-internal; loop thread only. */
#ifndef SRV_GEN_INT_H
#define SRV_GEN_INT_H

#include <stddef.h>
#include <stdint.h>

#include "models/chat_template.h"
#include "models/grammar.h"
#include "scheduler/engine.h"
#include "server/api/srv_reason.h"
#include "server/app/srv_app.h"
#include "server/ops/srv_audit.h"

#define GEN_MAX_CHOICES 128

typedef struct gen_choice {
    gen_req *req;
    int index;
    int prompt_idx;
    int live; /* submitted, final event not yet seen */
    sched_finish finish;
    char *text; /* the whole output (non-streaming responses, echo included) */
    size_t len, cap;
    sched_token *toks; /* every output token, for logprobs */
    int n_toks;
    size_t cap_toks;
    sched_token *ptoks; /* prompt log-probs (echo) */
    int n_ptoks;
    int completion_len;
    int cached_tokens; /* of its prompt, found in the prefix cache */
    char *atext;       /* streaming with --audit-log-content: the output sent so far */
    size_t alen, acap;
    int started;   /* streaming: first chunk sent */
    size_t lp_off; /* streaming: text bytes of the tokens sent so far */
    int lp_strip;  /* streaming: no text token sent yet, and the text starts afresh */
    double t_last;
    srv_reason reason; /* streaming with reasoning: the <think> splitter (zeroed = initial) */
    int deadline;      /* its deadline ended it (finish LENGTH or EXPIRED) */
    float *emb;        /* embeddings: the pooled vector from the final event (owned), [n_emb] */
    int n_emb;
} gen_choice;

struct gen_req {
    gen_req *next, *prev;
    srv_app *app;
    srv_req *http; /* NULL once answered or aborted */
    int is_chat, stream, include_usage, logprobs, echo;
    int reason;            /* chat: split <think>...</think> off as reasoning_content */
    int include_reasoning; /* with reason: send the reasoning (else drop it) */
    char id[64];
    int64_t created;
    int n_choices, n_live;
    gen_choice *choices;
    int n_prompts;
    int32_t **pids; /* per prompt token ids (echo, usage) */
    int *n_pids;
    char **ptext; /* per prompt text for echo (and for the audit log's content) */
    size_t *ptext_len;
    int *p_is_tokens;      /* per prompt: given as token ids */
    int audit_keep;        /* --audit-log-content: keep the prompts, messages and output */
    srv_audit_msg *a_msgs; /* chat messages (contents owned, roles static) */
    int a_n_msgs;
    int prompt_tokens;
    double t_start, t_first, t_admit;
    int failed;
    char err[160];
    int streamed_ok;
    model_grammar *grammar; /* the request's constraint (a reference), or NULL */
    int tools_on;           /* chat with tools offered: answers are parsed for calls */
    srv_gen_out out;        /* the Responses API's state (owned), or zeroed */
    int embed;              /* /v1/embeddings: SCHED_POOL_LAST or _MEAN (0: a generation) */
    char key_id[72];        /* the API key's id ("" when none): its limits (srv_quota.h) */
    int quota_admitted;     /* holds a concurrency slot of key_id, released at gen_free */
    int priority;           /* the engine priority (request, else the key's default; floored) */
    double deadline;        /* brisk_now() time its sequences end (0: none) */
    int emb_base64, emb_normalize;
    model_chat_kind tools_kind;
};

/* srv_gen.c's request lifecycle, shared with srv_embed.c: a new request
 * for n_prompts prompts (NULL: out of memory), its start (context checks,
 * limits, submission; answers r on failure and frees g), and its freeing. */
gen_req *srv_gen_new(srv_app *app, srv_req *r, int is_chat, const srv_gen_params *p, int n_prompts);
void srv_gen_start(srv_app *app, srv_req *r, gen_req *g, srv_gen_params *p, int max_tokens_default);
void srv_gen_free(gen_req *g);
/* srv_embed.c: answers a finished /v1/embeddings request (clears g->http). */
void srv_embed_respond(gen_req *g);

#endif
