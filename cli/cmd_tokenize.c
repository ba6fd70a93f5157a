/* cmd_tokenize.c - `brisk tokenize`: text -> token ids (space separated). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/cli_opts.h"
#include "models/gguf.h"
#include "models/hf_folder.h"
#include "models/tokenizer.h"

int cmd_tokenize(int argc, char **argv) {
    cli_tokenize_opts o = {0};
    cli_vals v;
    int prc = cli_opts_parse(CLI_TOKENIZE, argc, argv, &v);
    if (prc != CLI_OK)
        return prc == CLI_HELP ? 0 : 2;
    if (cli_opts_fill(CLI_TOKENIZE, &v, &o, sizeof o) < 0)
        return 1;
    const char *model_path = o.model ? o.model : cli_default_model();
    const char *text = o.text;
    if (!model_path || !text) {
        cli_error("tokenize: --model and --text are required");
        return 2;
    }
    /* Only the vocabulary is needed: open the GGUF, skip the weights. */
    char err[512] = "";
    gguf_file *gf = NULL;
    tok_vocab *vocab = NULL;
    int32_t *ids = NULL;
    uint8_t *image = NULL; /* a Hugging Face folder's metadata as GGUF */
    size_t image_len = 0;
    int status = 1;
    int hf = model_hf_is_folder(model_path);
    if ((hf && model_hf_open(model_path, 1, &image, &image_len, NULL, err, sizeof err) < 0) ||
        (hf ? gguf_open_memory(image, image_len, &gf, err, sizeof err)
            : gguf_open(model_path, &gf, err, sizeof err)) < 0 ||
        tok_vocab_create_from_gguf(gf, &vocab, err, sizeof err) < 0) {
        cli_error("%s", err);
        goto out;
    }
    int flags = (o.special ? TOK_PARSE_SPECIAL : 0) |
                (!o.no_bos && tok_add_bos_default(vocab) ? TOK_ADD_BOS : 0);
    size_t len = strlen(text);
    int need = tok_encode(vocab, text, len, flags, NULL, 0);
    if (need < 0) {
        cli_error("tokenize: cannot encode the text");
        goto out;
    }
    ids = malloc((size_t)(need > 0 ? need : 1) * sizeof *ids);
    if (!ids)
        goto out;
    int n = tok_encode(vocab, text, len, flags, ids, need);
    for (int i = 0; i < n; i++)
        printf(i ? " %d" : "%d", ids[i]);
    printf("\n");
    status = 0;
out:
    free(ids);
    tok_vocab_free(vocab);
    gguf_close(gf);
    free(image);
    return status;
}
