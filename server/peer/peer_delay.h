/*
 * peer_delay.h - failpoint: delays this member's peer frames (functional DELAY_PEER_PORT_TX_RX_*
 * and RANDOM_DELAY_* cases on kvd, whose TCP proxy cannot see the pairs a member dials).
 *
 * While on, every frame sent with kv_peer_net_send is held D (+-J uniformly) ms before it is
 * queued for the wire, and every received frame is held D (+-J) ms before it reaches the
 * handler's on_message. Order per peer and direction is kept (a frame is never released before
 * the one queued ahead of it). Priority frames of types KV_PEER_DELAY_BYPASS_MIN and up
 * (kv_peer_net_send_prio: lease renewals), transport control frames and snapshot streams
 * bypass the delay; the node's raft heartbeats, sent on the priority queue, do not (held,
 * they are released onto the ordinary queue).
 * Bounds: a peer's delayed outgoing bytes count against its send queue bound (max_queue_bytes:
 * past it the frame is dropped, -EAGAIN, kvd_peer_frames_dropped_total); delayed incoming bytes
 * are bounded by max_queue_bytes per peer as well (past it: dropped, counted). Metrics:
 * kvd_peer_frames_delayed_total (frames held), kvd_peer_delayed_bytes (bytes held now).
 * Turning it off releases the held frames at their due times; new frames of a peer queue behind
 * them until its queue is empty.
 * Threads: loop thread of the net only.
 */
#ifndef KV_PEER_DELAY_H
#define KV_PEER_DELAY_H

#include <stddef.h>
#include <stdint.h>

#include "peer/peer_net.h"

/* Priority frames of these types (the node's users: lease forwarding) are never delayed. */
#define KV_PEER_DELAY_BYPASS_MIN 16u

/* Parses "D" or "D,J" (milliseconds, D in 1..600000, J in 0..D). 0 or -EINVAL. */
int kv_peer_delay_parse(const char *s, uint32_t *delay_ms, uint32_t *jitter_ms);
/* Switches the delay on (delay_ms > 0) or off (delay_ms == 0). 0, -EINVAL (NULL net, closing,
 * jitter > delay) or -ENOMEM. Loop thread. */
int kv_peer_net_set_delay(kv_peer_net *n, uint32_t delay_ms, uint32_t jitter_ms);

/* ---- inside server/peer/ only ---- */
struct kv_peer;
/* Takes the outgoing frame into the delay queue when the delay is on (or frames of this peer
 * are still held): returns 1 and sets *rc (0 held, -EAGAIN bound, -ENOMEM); else 0. */
int kv_peer_delay_tx(struct kv_peer *p, uint32_t type, const uint8_t *buf, size_t len, int *rc);
/* Same for a received (non-control) frame: 1 taken (held or dropped), 0 deliver now. */
int kv_peer_delay_rx(struct kv_peer *p, uint32_t type, const uint8_t *buf, size_t len);
/* Drops every held frame and closes the timer (kv_peer_net_close; counts as a net handle). */
void kv_peer_delay_close(kv_peer_net *n);
/* Held bytes towards peer id (counted against its send queue bound). */
size_t kv_peer_delay_tx_bytes(const kv_peer_net *n, uint64_t id);
/* peer_net.c: the send path past the delay (isolation, connection, bound, enqueue) and the
 * delivery to on_message past the delay. */
int kv_peer_send_now(struct kv_peer *p, uint32_t type, const uint8_t *buf, size_t len);
void kv_peer_deliver_now(struct kv_peer *p, uint32_t type, const uint8_t *buf, size_t len);

#endif
