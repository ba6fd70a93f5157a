/* cmd_tokenize.c - `brisk tokenize`: text -> token ids (space separated). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/gguf.h"
#include "models/tokenizer.h"
#include "server/cli.h"

int cmd_tokenize(int argc, char **argv) {
    const char *model_path = NULL, *text = NULL;
    int special = 0, no_bos = 0;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--model") || !strcmp(a, "-m")) {
            if (!(model_path = cli_value(argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--text") || !strcmp(a, "--prompt") || !strcmp(a, "-p")) {
            if (!(text = cli_value(argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--special")) {
            special = 1;
        } else if (!strcmp(a, "--no-bos")) {
            no_bos = 1;
        } else {
            cli_error("tokenize: unknown option '%s'", a);
            fprintf(stderr, "usage: brisk tokenize --model PATH --text TEXT [--special] [--no-bos]\n");
            return 2;
        }
    }
    if (!model_path) model_path = cli_default_model();
    if (!model_path || !text) {
        cli_error("tokenize: --model and --text are required");
        return 2;
    }
    /* Only the vocabulary is needed: open the GGUF, skip the weights. */
    char err[512] = "";
    gguf_file *gf = NULL;
    tok_vocab *v = NULL;
    int32_t *ids = NULL;
    int status = 1;
    if (gguf_open(model_path, &gf, err, sizeof err) < 0 ||
        tok_vocab_create_from_gguf(gf, &v, err, sizeof err) < 0) {
        cli_error("%s", err);
        goto out;
    }
    int flags = (special ? TOK_PARSE_SPECIAL : 0) | (!no_bos && tok_add_bos_default(v) ? TOK_ADD_BOS : 0);
    size_t len = strlen(text);
    int need = tok_encode(v, text, len, flags, NULL, 0);
    if (need < 0) {
        cli_error("tokenize: cannot encode the text");
        goto out;
    }
    ids = malloc((size_t)(need > 0 ? need : 1) * sizeof *ids);
    if (!ids) goto out;
    int n = tok_encode(v, text, len, flags, ids, need);
    for (int i = 0; i < n; i++) printf(i ? " %d" : "%d", ids[i]);
    printf("\n");
    status = 0;
out:
    free(ids);
    tok_vocab_free(v);
    gguf_close(gf);
    return status;
}
