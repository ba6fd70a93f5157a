/* srv_gen_audit.c - the audit line of a finished request under /v1/
 * (srv_audit.h), from its generation state when it had one. Loop thread. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/brisk_alloc.h"
#include "common/brisk_log.h"
#include "server/app/srv_app.h"
#include "server/app/srv_gen_int.h"
#include "server/ops/srv_audit.h"

/* ---- the audit line ------------------------------------------------------------ */

/* The finish field: how the request ended, from the client's point of view. */
static const char *audit_finish(const srv_app *app, const gen_req *g, const srv_req *r,
                                int status) {
    /* At shutdown (a second signal, the drain timeout) the server cut it off. */
    if (srv_req_aborted(r))
        return app->shutting_down ? "shutdown" : "client_abort";
    if (!g || status >= 400)
        return NULL; /* the status says it */
    if (g->failed || g->n_live > 0)
        return "error"; /* a stream that ended with an error event */
    for (int i = 0; i < g->n_choices; i++)
        if (g->choices[i].deadline)
            return "deadline";
    for (int i = 0; i < g->n_choices; i++)
        if (g->choices[i].finish == SCHED_FINISH_LENGTH)
            return "length";
    return "stop";
}

void srv_gen_audit(srv_app *app, const srv_req *r, int status) {
    const gen_req *g = srv_req_user(r);
    srv_audit_rec rec;
    memset(&rec, 0, sizeof rec);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    rec.wall_s = (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
    rec.request_id = srv_req_id(r);
    rec.api_key_id = srv_req_key_id(r);
    rec.endpoint = srv_req_path(r);
    rec.status = status;
    rec.finish = audit_finish(app, g, r, status);
    rec.duration_ms = (brisk_now() - srv_req_t_start(r)) * 1000.0;
    rec.remote_addr = srv_req_remote(r, &rec.remote_port);
    rec.prompt_tokens = rec.completion_tokens = -1;
    srv_audit_prompt *prompts = NULL;
    srv_audit_text *outs = NULL;
    if (g) {
        rec.model = app->served_name;
        rec.prompt_tokens = g->prompt_tokens;
        rec.completion_tokens = 0;
        for (int i = 0; i < g->n_choices; i++)
            rec.completion_tokens += g->choices[i].completion_len;
    }
    if (g && g->audit_keep) {
        rec.content = 1;
        prompts = brisk_calloc((size_t)g->n_prompts + 1, sizeof *prompts);
        outs = brisk_calloc((size_t)g->n_choices + 1, sizeof *outs);
        if (!prompts || !outs)
            rec.content = 0;
        if (g->is_chat) {
            rec.msgs = g->a_msgs;
            rec.n_msgs = g->a_n_msgs;
        } else if (prompts) {
            for (int i = 0; i < g->n_prompts; i++) {
                if (g->p_is_tokens[i]) {
                    prompts[i].ids = g->pids[i];
                    prompts[i].n_ids = g->n_pids[i];
                } else {
                    prompts[i].text = g->ptext[i] ? g->ptext[i] : "";
                    prompts[i].len = g->ptext[i] ? g->ptext_len[i] : 0;
                }
            }
            rec.prompts = prompts;
            rec.n_prompts = g->n_prompts;
        }
        for (int i = 0; outs && i < g->n_choices; i++) {
            const gen_choice *c = &g->choices[i];
            const brisk_buf *b = g->stream ? &c->atext : &c->text;
            outs[i].text = b->p;
            outs[i].len = b->len;
        }
        rec.completions = outs;
        rec.n_completions = g->n_choices;
    }
    size_t len;
    char *line = srv_audit_format(&rec, &len);
    if (line)
        srv_audit_write(app->audit, line, len);
    else
        srv_audit_write(app->audit, NULL, 0); /* counted as dropped */
    free(line);
    free(prompts);
    free(outs);
}
