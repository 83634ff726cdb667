/*
 * accept_gate: a listener's fair share of the event loop.
 *
 * libuv accepts in a loop: it calls a listener's connection callback again and again until
 * accept(2) says EAGAIN. A party that reconnects as fast as kvd closes its connections (a
 * flood of strangers on the peer port, a client stampede) keeps the accept queue non-empty,
 * so the loop never leaves that callback: raft ticks, peer reads, client requests and timers
 * all starve (server/peer/README.md, "Who may connect"). The gate lets a set of listeners
 * accept at most `burst` connections per loop iteration. Past it, the owner's callback returns
 * without uv_accept(); libuv then stops watching that listener, keeping the pending socket,
 * and the gate's check handle calls the owner's callback again after the iteration's other
 * I/O has run, which accepts it and re-arms the listener.
 *
 * Use, in the owner's connection callback, after its own status/closing checks:
 *     if (!kv_accept_gate_admit(&owner->gate, server)) return;
 *     ... uv_accept(server, ...) ...
 *
 * Thread: the loop's thread only. Ownership: the gate is embedded in its owner; its check
 * handle is closed by kv_accept_gate_close with the owner's close callback (h->data is the
 * `data` given to init), so the owner counts it among its open handles.
 */
#ifndef KV_NET_ACCEPT_GATE_H
#define KV_NET_ACCEPT_GATE_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

/* Accepts per loop iteration and gate: enough for any real burst of members or clients
 * (each accept is a few syscalls), small enough that a flood costs an iteration well under
 * a millisecond of other work's latency. */
#define KV_ACCEPT_BURST 32
#define KV_ACCEPT_GATE_MAX_LISTENERS 8

typedef struct kv_accept_gate {
    uv_check_t check;    /* first member: the check callback finds the gate from it */
    uv_connection_cb cb; /* the owner's connection callback, re-called for deferred listeners */
    unsigned burst;      /* accepts allowed per loop iteration */
    unsigned n;          /* accepts admitted in the current iteration */
    size_t n_deferred;
    uv_stream_t *deferred[KV_ACCEPT_GATE_MAX_LISTENERS];
    uint64_t deferrals; /* times a listener was paused for the rest of an iteration */
} kv_accept_gate;

/* Initialises g on loop; cb is the owner's connection callback and data becomes the check
 * handle's data (for the owner's close callback). burst 0 means KV_ACCEPT_BURST. The check
 * handle is unreferenced: it never keeps the loop alive. Returns 0 or a libuv error. */
int kv_accept_gate_init(kv_accept_gate *g, uv_loop_t *loop, unsigned burst, uv_connection_cb cb,
                        void *data);

/* 1: the caller may accept on server now. 0: this iteration's burst is spent; the caller
 * must return without calling uv_accept, and the gate calls cb(server, 0) again later. */
int kv_accept_gate_admit(kv_accept_gate *g, uv_stream_t *server);

/* Closes the gate's handle; close_cb is called with it (its data is the init's data). */
void kv_accept_gate_close(kv_accept_gate *g, uv_close_cb close_cb);

#endif
