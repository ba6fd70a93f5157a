/* cmd_serve.c - `brisk serve`: parses the server's options and runs it
 * (server/app/srv_app.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/cli_opts.h"
#include "cli/cli_spec.h"
#include "common/brisk_log.h"
#include "server/app/srv_app.h"
#include "server/ops/srv_keys.h"

/* --api-key and --api-key-file into the key set: each key is checked (a bad
 * one is a usage error, 2) and the file read (1 when it cannot be). The
 * configuration keeps both for the reloads (srv_app.c). */
static int serve_keys(const srv_app_config *c, srv_keys *keys) {
    char kerr[256];
    for (int k = 0; k < c->n_cli_keys; k++)
        if (srv_keys_add(keys, NULL, c->cli_keys[k], strlen(c->cli_keys[k]), kerr, sizeof kerr) <
            0) {
            cli_error("--api-key: %s", kerr);
            return 2;
        }
    if (c->key_file && srv_keys_load_file(keys, c->key_file, kerr, sizeof kerr) < 0) {
        cli_error("--api-key-file: %s", kerr);
        return 1;
    }
    return 0;
}

int cmd_serve(int argc, char **argv) {
    srv_app_config c;
    memset(&c, 0, sizeof c);
    c.host = "127.0.0.1";
    c.port = 8080;
    c.drain_timeout_s = 30;
    c.audit_flush_ms = 1000;
    c.engine = sched_engine_config_default();
    c.http = srv_http_config_default();
    c.draft_max = c.draft_min = -1;
    char *spec_model = NULL; /* the draft's path out of --speculative-config */
    cli_vals v;
    int prc = cli_opts_parse(CLI_SERVE, argc, argv, &v);
    if (prc != CLI_OK)
        return prc == CLI_HELP ? 0 : 2;
    srv_keys *keys = srv_keys_create();
    if (!keys) {
        cli_error("serve: out of memory");
        return 1;
    }
    /* The options given over the defaults of srv_app, the engine and the
     * HTTP layer (the table in cli_opts.c says where each goes). */
    int rc = cli_opts_fill(CLI_SERVE, &v, &c, sizeof c) < 0 ? 1 : serve_keys(&c, keys);
    if (rc)
        goto done;
    rc = 2;
    if (cli_check_dummy(c.dummy, c.tokenizer, c.model_path) < 0)
        goto done;
    if (c.dummy)
        c.model_path = c.dummy; /* the engine's name for it; nothing is opened */
    if (!c.model_path)
        c.model_path = cli_default_model();
    if (!c.model_path) {
        cli_error("serve: no model: pass --model PATH or run scripts/fetch-model.sh");
        goto done;
    }
    if (c.engine.max_batch_tokens < c.engine.max_seqs) {
        cli_error("--max-num-batched-tokens (%d) must be >= --max-num-seqs (%d)",
                  c.engine.max_batch_tokens, c.engine.max_seqs);
        goto done;
    }
    char serr[300];
    if (cli_spec_resolve(c.spec_json, c.draft_model, c.draft_max, c.draft_min, &c.engine.spec,
                         &spec_model, serr, sizeof serr) < 0 ||
        sched_spec_config_check(&c.engine.spec, serr, sizeof serr) < 0) {
        cli_error("%s", serr);
        goto done;
    }
    if (c.audit_content && !c.audit_log) {
        cli_error("--audit-log-content needs --audit-log FILE");
        goto done;
    }
    c.http.api_keys = srv_keys_count(keys) > 0 ? keys : NULL;
    rc = srv_app_run(&c);
done:
    free(spec_model);
    srv_keys_free(keys);
    return rc;
}
