/*
 * proxy_main.c - `kvd grpc-proxy start`: flags, the loop, signals (proxy.h).
 * main()'s state for the subcommand lives in kv_proxy_main's frame.
 */
#include "proxy/proxy.h"
#include "proxy/proxy_run.h"

#include <stdio.h>
#include <string.h>

typedef struct proxy_main {
    uv_loop_t loop;
    kv_proxy_config cfg;
    kv_proxy proxy;
    uv_signal_t sigint, sigterm;
} proxy_main;

static void on_signal(uv_signal_t *s, int signum)
{
    (void)signum;
    uv_stop(s->loop);
}

int kv_proxy_main(int argc, char **argv)
{
    proxy_main m;
    char err[512];
    memset(&m, 0, sizeof m);
    if (argc < 2 || strcmp(argv[1], "start") != 0) {
        fprintf(stderr, "%s", kv_proxy_config_usage());
        return 2;
    }
    kv_proxy_config_default(&m.cfg);
    int rc = kv_proxy_config_parse(&m.cfg, argc - 1, argv + 1, err, sizeof err);
    if (rc == 1) {
        printf("%s", kv_proxy_config_usage());
        return 0;
    }
    if (rc < 0) {
        fprintf(stderr, "kvd grpc-proxy: %s\n", err);
        return 2;
    }
    if (kv_proxy_config_discover(&m.cfg, err, sizeof err) < 0) {
        fprintf(stderr, "kvd grpc-proxy: %s\n", err);
        return 1;
    }
    if (uv_loop_init(&m.loop) < 0) {
        fprintf(stderr, "kvd grpc-proxy: cannot create the loop\n");
        return 2;
    }
    int code = 0;
    rc = kv_proxy_start(&m.proxy, &m.loop, &m.cfg, err, sizeof err);
    if (rc < 0) {
        fprintf(stderr, "kvd grpc-proxy: error: %s\n", err);
        code = 2;
        goto stop;
    }
    uv_signal_init(&m.loop, &m.sigint);
    uv_signal_init(&m.loop, &m.sigterm);
    uv_signal_start(&m.sigint, on_signal, SIGINT);
    uv_signal_start(&m.sigterm, on_signal, SIGTERM);
    fprintf(stderr,
            "kvd grpc-proxy: listening for gRPC on %s:%d, upstream %s%s (%zu endpoint%s); "
            "ready to proxy client requests\n",
            m.cfg.listen_host, kv_proxy_port(&m.proxy), m.cfg.endpoints[0],
            m.cfg.n_endpoints > 1 ? ",..." : "", m.cfg.n_endpoints,
            m.cfg.n_endpoints > 1 ? "s" : "");
    if (m.cfg.has_metrics)
        fprintf(stderr, "kvd grpc-proxy: serving /metrics on %s:%d\n", m.cfg.metrics_host,
                m.cfg.metrics_port);
    /* etcd's line once the listener is up: scripts and etcd's e2e harness wait for it */
    fprintf(stderr, "kvd grpc-proxy: started gRPC proxy on %s:%d\n", m.cfg.listen_host,
            kv_proxy_port(&m.proxy));
    uv_run(&m.loop, UV_RUN_DEFAULT);
    fprintf(stderr, "kvd grpc-proxy: stopping\n");
    uv_close((uv_handle_t *)&m.sigint, NULL);
    uv_close((uv_handle_t *)&m.sigterm, NULL);
stop:
    kv_proxy_stop(&m.proxy);
    uv_run(&m.loop, UV_RUN_DEFAULT);
    if (uv_loop_close(&m.loop) != 0)
        fprintf(stderr, "kvd grpc-proxy: warning: handles left open at exit\n");
    return code;
}
