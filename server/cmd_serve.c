/* cmd_serve.c - `brisk serve`: the HTTP server arrives with the server issue;
 * until then the subcommand says so plainly instead of pretending. */
#include "server/cli.h"

int cmd_serve(int argc, char **argv) {
    cli_error("serve: the HTTP server is not part of this build yet; use 'brisk generate'");
    return 1;
}
