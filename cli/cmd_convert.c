/* cmd_convert.c - `brisk convert-llama2c`: llama2.c checkpoint -> GGUF. */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/cli_opts.h"
#include "models/llama2c.h"

int cmd_convert_llama2c(int argc, char **argv) {
    cli_convert_opts o = {0};
    cli_vals v;
    int prc = cli_opts_parse(CLI_CONVERT, argc, argv, &v);
    if (prc != CLI_OK)
        return prc == CLI_HELP ? 0 : 2;
    if (cli_opts_fill(CLI_CONVERT, &v, &o, sizeof o) < 0)
        return 1;
    if (!o.model || !o.tokenizer || !o.out) {
        cli_error("convert-llama2c: --model, --tokenizer and --out are required");
        return 2;
    }
    char err[512] = "";
    if (model_convert_llama2c(o.model, o.tokenizer, o.out, err, sizeof err) < 0) {
        cli_error("%s", err);
        return 1;
    }
    fprintf(stderr, "brisk: wrote %s\n", o.out);
    return 0;
}
