/* main.c - the brisk command line: subcommand dispatch. */
#include <stdio.h>
#include <string.h>

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "--version") == 0) {
        printf("brisk\n");
        return 0;
    }
    fprintf(stderr, "usage: brisk <serve|generate|tokenize|convert-llama2c|bench> [options]\n");
    return 2;
}
