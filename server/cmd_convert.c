/* cmd_convert.c - `brisk convert-llama2c`: llama2.c checkpoint -> GGUF. */
#include <stdio.h>
#include <string.h>

#include "models/llama2c.h"
#include "server/cli.h"

int cmd_convert_llama2c(int argc, char **argv) {
    const char *model_path = NULL, *tok_path = NULL, *out_path = NULL;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        const char **dst = !strcmp(a, "--model") ? &model_path
                           : !strcmp(a, "--tokenizer") ? &tok_path
                           : !strcmp(a, "--out") ? &out_path
                           : NULL;
        if (!dst) {
            cli_error("convert-llama2c: unknown option '%s'", a);
            fprintf(stderr, "usage: brisk convert-llama2c --model X.bin --tokenizer tok.bin --out X.gguf\n");
            return 2;
        }
        if (!(*dst = cli_value(argc, argv, &i))) return 2;
    }
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
