/* cmd_convert.c - `brisk convert-llama2c`: llama2.c checkpoint -> GGUF. */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/cli_opts.h"
#include "models/llama2c.h"

int cmd_convert_llama2c(int argc, char **argv) {
    cli_vals v;
    int prc = cli_opts_parse(CLI_CONVERT, argc, argv, &v);
    if (prc != CLI_OK)
        return prc == CLI_HELP ? 0 : 2;
    const char *model_path = v.given[O_MODEL] ? v.s[O_MODEL] : NULL;
    const char *tok_path = v.given[O_TOKENIZER] ? v.s[O_TOKENIZER] : NULL;
    const char *out_path = v.given[O_OUT] ? v.s[O_OUT] : NULL;
    if (!model_path || !tok_path || !out_path) {
        cli_error("convert-llama2c: --model, --tokenizer and --out are required");
        return 2;
    }
    char err[512] = "";
    if (model_convert_llama2c(model_path, tok_path, out_path, err, sizeof err) < 0) {
        cli_error("%s", err);
        return 1;
    }
    fprintf(stderr, "brisk: wrote %s\n", out_path);
    return 0;
}
