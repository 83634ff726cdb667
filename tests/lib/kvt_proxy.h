/*
 * kvt_proxy: a TCP relay in front of one member's peer port, with faults (blackhole, delay,
 * jitter, and blocking every connection dialed by a given member).
 *
 * Ownership: kvt_proxy_start() returns an object owned by the caller, released with
 * kvt_proxy_stop(). Threads: each proxy runs one thread of its own (poll()); the setters and
 * kvt_proxy_stats() may be called from any thread (they take the proxy's mutex).
 * Bounds: at most 64 connection pairs (more are refused) and 8 MiB queued per direction
 * (reads pause beyond that).
 */
#ifndef KVT_PROXY_H
#define KVT_PROXY_H

#include <stdint.h>

typedef struct kvt_proxy kvt_proxy;

#define KVT_PROXY_ID_LEN 24 /* a member id in hex, NUL-terminated */
#define KVT_PROXY_MAX_BLOCK 8

/* Listens on 127.0.0.1:listen_port and relays every connection to 127.0.0.1:to_port.
 * seed drives the jitter. 0 or a negative errno (bind failure: -EADDRINUSE, ...). */
int kvt_proxy_start(kvt_proxy **out, uint16_t listen_port, uint16_t to_port, uint64_t seed);
/* Closes every connection, joins the thread and frees p (NULL is allowed). */
void kvt_proxy_stop(kvt_proxy *p);

/* Connections accepted from now on are relayed to 127.0.0.1:to_port (the member moved). */
void kvt_proxy_set_target(kvt_proxy *p, uint16_t to_port);

/* Fault settings, applied to traffic from now on. tx = bytes leaving the member (to the
 * dialer), rx = bytes entering it. blackhole: bytes are read and dropped (connections stay
 * open, as etcd's functional proxy does); a connection that lost bytes is closed as soon as
 * no blackhole applies to it any more (TCP never loses bytes inside a live stream, so the
 * peers must redial and resynchronise their framing). delay: each chunk is held delay_ms +-
 * jitter_ms (order preserved). */
void kvt_proxy_set(kvt_proxy *p, int blackhole_tx, int blackhole_rx, uint32_t delay_ms,
                   uint32_t jitter_ms);
void kvt_proxy_stats(kvt_proxy *p, uint64_t *bytes, uint64_t *dropped, uint32_t *conns);

/* Blackholes both directions of every connection whose first request carries
 * "X-Server-From: <from_id>" (etcd's peer requests do: the dialing member's id in hex), so a
 * member's own outgoing peer connections through OTHER members' proxies can be cut too.
 * on=0 lifts it. -ENOSPC if KVT_PROXY_MAX_BLOCK ids are already blocked. */
int kvt_proxy_block_from(kvt_proxy *p, const char *from_id, int on);

#endif
