/* bench_fake_main.c - bench_fake_server: the fake OpenAI streaming server of
 * tests/tools/bench_fake.h as a program, for pytest and
 * bench/client_overhead.sh.
 *
 *   bench_fake_server [--host 127.0.0.1] [--port 0]
 *
 * Prints "listening on http://HOST:PORT" on stdout once it accepts; SIGTERM
 * or SIGINT stop it and print its counters on stderr. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <uv.h>

#include "tests/tools/bench_fake.h"

static bench_fake *g_fake;

static void on_signal(uv_signal_t *h, int signum) {
    (void)signum;
    bench_fake_stats st;
    bench_fake_get_stats(g_fake, &st);
    fprintf(stderr, "bench_fake_server: %llu connections, %llu requests, %llu tokens\n",
            (unsigned long long)st.connections, (unsigned long long)st.requests,
            (unsigned long long)st.tokens);
    bench_fake_free(g_fake);
    uv_close((uv_handle_t *)h, NULL);
    uv_stop(h->loop);
}

int main(int argc, char **argv) {
    const char *host = "127.0.0.1";
    int port = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--host") && i + 1 < argc) {
            host = argv[++i];
        } else if (!strcmp(argv[i], "--port") && i + 1 < argc) {
            port = atoi(argv[++i]);
        } else {
            fprintf(stderr, "usage: bench_fake_server [--host 127.0.0.1] [--port 0]\n");
            return 2;
        }
    }
    signal(SIGPIPE, SIG_IGN);
    uv_loop_t *loop = uv_default_loop();
    g_fake = bench_fake_create(loop, host, port);
    if (!g_fake) {
        fprintf(stderr, "bench_fake_server: cannot listen on %s:%d\n", host, port);
        return 1;
    }
    uv_signal_t sterm, sint;
    uv_signal_init(loop, &sterm);
    uv_signal_init(loop, &sint);
    uv_signal_start(&sterm, on_signal, SIGTERM);
    uv_signal_start(&sint, on_signal, SIGINT);
    printf("listening on http://%s:%d\n", host, bench_fake_port(g_fake));
    fflush(stdout);
    uv_run(loop, UV_RUN_DEFAULT);
    return 0;
}
