/*
 * proxy_run.h - starting and stopping one proxy on a caller's loop (proxy.c); used by
 * kv_proxy_main (proxy_main.c).
 *
 * kv_proxy_start: p is caller-owned (zeroed here), cfg borrowed until kv_proxy_stop. Opens the
 * upstream client (libkvclient, its own I/O thread), listens on cfg->listen_addr and, with
 * --metrics-addr, serves /metrics. Returns 0, or a negative errno / libuv code with a reason
 * in err; after a failure kv_proxy_stop still releases what was started.
 * kv_proxy_stop: ends every client call, frees the upstream streams and client, handles the
 * events left in the bridge, runs the loop until its handles are closed. Not from inside a
 * callback of the proxy's loop other than a signal or timer handler.
 */
#ifndef KV_PROXY_RUN_H
#define KV_PROXY_RUN_H

#include "proxy/proxy_int.h"

#include <stddef.h>

int kv_proxy_start(kv_proxy *p, uv_loop_t *loop, const kv_proxy_config *cfg, char *err, size_t cap);
/* The bound client port, or a negative error. */
int kv_proxy_port(kv_proxy *p);
void kv_proxy_stop(kv_proxy *p);

#endif
