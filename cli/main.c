/* main.c - the brisk command line: version and subcommand dispatch. */
#include <stdio.h>
#include <string.h>

#include "brisk_config.h"
#include "common/brisk_alloc.h"
#include "common/brisk_error.h"
#include "common/brisk_log.h"
#include "kernels/cpu/kern_cpu.h"
#if BRISK_HAVE_CUDA
#include "kernels/cuda/kern_cuda.h"
#endif
#include "cli/cli.h"

static void print_version(void) {
    char cpu[256];
    kern_cpu_describe(cpu, sizeof cpu);
    printf("brisk %s (commit %s)\n", BRISK_VERSION, BRISK_GIT_COMMIT);
    printf("backends: %s", cpu);
#if BRISK_HAVE_CUDA
    char cuda[256];
    if (kern_cuda_describe(cuda, sizeof cuda) == 0)
        printf(" %s", cuda);
#endif
    printf("\n");
    if (brisk_fault_compiled())
        printf("fault injection: compiled in (BRISK_FAULT_ALLOC=nth:N|rate:P:SEED, SIGUSR2 "
               "toggles it in serve)\n");
}

static void print_usage(FILE *f) {
    fprintf(f, "usage: brisk <command> [options]\n"
               "commands:\n"
               "  serve             start the OpenAI-compatible HTTP server\n"
               "  generate          generate text from a prompt\n"
               "  tokenize          print the token ids of a text\n"
               "  convert-llama2c   convert a llama2.c checkpoint + tokenizer to GGUF\n"
               "  bench             measure prompt and generation speed (pp/tg)\n"
               "  --version         print the version, commit and compiled backends\n"
               "Run 'brisk <command> --help' for a command's options.\n");
}

int main(int argc, char **argv) {
    if (argc < 2) {
        print_usage(stderr);
        return 2;
    }
    char err[256];
    int rc = brisk_alloc_init(err, sizeof err);
    if (rc == BRISK_EINVAL) {
        cli_error("%s", err);
        return 2;
    }
    if (rc < 0) /* set in a build without the injector: nothing to inject */
        BRISK_WARN("%s", err);
    const char *cmd = argv[1];
    int sub_argc = argc - 2;
    char **sub_argv = argv + 2;
    if (!strcmp(cmd, "--version") || !strcmp(cmd, "version")) {
        print_version();
        return 0;
    }
    if (!strcmp(cmd, "--help") || !strcmp(cmd, "-h") || !strcmp(cmd, "help")) {
        print_usage(stdout);
        return 0;
    }
    if (!strcmp(cmd, "generate"))
        return cmd_generate(sub_argc, sub_argv);
    if (!strcmp(cmd, "tokenize"))
        return cmd_tokenize(sub_argc, sub_argv);
    if (!strcmp(cmd, "convert-llama2c"))
        return cmd_convert_llama2c(sub_argc, sub_argv);
    if (!strcmp(cmd, "bench"))
        return cmd_bench(sub_argc, sub_argv);
    if (!strcmp(cmd, "serve"))
        return cmd_serve(sub_argc, sub_argv);
    cli_error("unknown command '%s'", cmd);
    print_usage(stderr);
    return 2;
}
