/*
 * proxy_watch_int.h - the state of the proxy's watch coalescing, shared by proxy_watch.c (the
 * client streams and their watchers) and proxy_watch_up.c (the upstream watchers, their
 * stream, the fan-out and the failover). Design: docs/proxy.md, "Watch".
 *
 * Objects (all owned by the proxy's loop thread; libkvclient's I/O thread only posts bridge
 * events whose target is a pw_up):
 * - pw_cs: one client Watch stream. Owns its pw_w watchers and its queue of requests held
 *   while one of its creates waits for the upstream's Created (creates are answered in order).
 * - pw_w: one client watcher (its own watch_id), a receiver of exactly one pw_bc.
 * - pw_bc: one upstream watcher, shared by every pw_w of the same key and range that
 *   could join it without missing or repeating an event. Freed when its last receiver goes.
 * - pw_up: one upstream Watch stream (a kvc_bidi) carrying up to
 *   --max-watchers-per-upstream-stream pw_bc (usually one stream in all). Freed on its
 *   KV_PROXY_EV_WATCH_FREE event, posted right after kvc_bidi_free.
 * Auth: a client stream with a "token" shares upstream watchers and streams only with
 * client streams of the same token, and those upstream streams carry it, so the member
 * checks each watch against that user's permissions (docs/proxy.md, "Watch", Auth). Streams
 * without a token share the token-less upstream streams. The same holds for "hasleader":
 * such client streams share upstream streams opened with it, which a member without a
 * leader ends with "etcdserver: no leader", and so are those client streams.
 * Bounds: --max-watch-streams client streams, --max-watchers client watchers plus held
 * requests (kvd_proxy_watchers); the pw_bc count is at most the watcher count.
 */
#ifndef KV_PROXY_WATCH_INT_H
#define KV_PROXY_WATCH_INT_H

#include "proxy/proxy_int.h"

#include "common/list.h"

#include "rpc.pb-c.h"

#include <stdint.h>

typedef struct pw_up pw_up;
typedef struct pw_bc pw_bc;

typedef struct pw_cs {
    struct kv_proxy_watch *s;
    kv_grpc_call *call;   /* NULL once finished or cancelled */
    kv_list watchers;     /* pw_w.slink */
    kv_list held;         /* pw_msg.link: requests held behind `blocked` */
    int paused;           /* the call's input is paused while requests are held: the rest
                           * waits in the transport, under its window and buffer bounds */
    struct pw_w *blocked; /* a watcher whose Created is not sent yet */
    int64_t next_id, max_id;
    kv_list dlink; /* on s->dead or s->ready (deferred work), else on no list */
    int dead;
    char *token;   /* the client's "token" metadata (etcd auth), owned; NULL: none */
    int hasleader; /* the client asked "hasleader: true" (clientv3.WithRequireLeader) */
} pw_cs;

typedef struct pw_w {
    kv_list slink; /* cs->watchers */
    kv_list blink; /* bc->rcv */
    pw_cs *cs;
    pw_bc *bc;
    int64_t id;
    int64_t nextrev; /* events below it are not this watcher's (0: every event) */
    int created;     /* its Created response was sent */
    /* its options, applied by the fan-out (the shared upstream watcher asks prev_kv and
     * progress notifications, and no filter) */
    uint8_t prev_kv, noput, nodelete, progress, fragment;
} pw_w;

struct pw_bc {
    kv_list link;  /* s->bcasts */
    kv_list clink; /* up->creating: waiting for the upstream Created, in send order */
    pw_bc *knext;  /* s->ktab chain (joinable ones) */
    pw_bc *inext;  /* up's id table chain */
    uint8_t *okey; /* key, range_end and options: what receivers must share */
    size_t oklen;
    uint64_t khash;
    int in_ktab;
    char *token;   /* its receivers' auth token (part of okey), owned; NULL: none */
    int hasleader; /* its receivers' hasleader (part of okey) */
    /* the create request: key and range_end; always prev_kv and progress_notify, no filter,
     * no fragment (each receiver gets its own view, fragmented if it asked: fan_out) */
    uint8_t *key, *end;
    size_t klen, elen;
    int64_t start; /* the first client's start_revision */
    /* a client watcher from the current revision may join: it began there (start 0), or it
     * began in the history and has shown it caught up (on_response: a progress notification,
     * which a member sends only to a synced watcher, or an event at the response's header
     * revision, the member's current one: every event up to it was sent) */
    int current;
    /* upstream state */
    pw_up *up; /* the stream its create was sent on (NULL: not sent) */
    int has_id;
    int64_t up_id;
    int established;  /* an upstream Created was received once: last_rev is valid */
    int orphan;       /* no receivers, its Created is awaited only to cancel it */
    int64_t last_rev; /* every event up to last_rev delivered */
    uint64_t cluster_id, member_id, raft_term;
    kv_list rcv; /* pw_w.blink */
    uint32_t n_rcv;
};

struct pw_up {
    kv_list link; /* s->ups while not ended */
    struct kv_proxy_watch *s;
    kvc_bidi *b;
    int ended;
    char *token;      /* opened with this auth token (its pw_bc all have it), owned; NULL: none.
                         A stream with a token is closed when its last upstream watcher goes. */
    int hasleader;    /* opened with "hasleader: true" (its pw_bc all have it) */
    kv_list creating; /* pw_bc.clink */
    pw_bc **itab;     /* by upstream watch id */
    size_t icap, n_ids;
    uint64_t opened_ms;
    uint32_t n_bc; /* upstream watchers sent on it (bound: cap) */
    uint32_t cap;  /* --max-watchers-per-upstream-stream, or less: the member's own limit
                      learned from a refused create (kv_proxy_watch.up_cap) */
    int learned;   /* cap was set from the member's first refusal on this stream */
};

typedef struct kv_proxy_watch {
    kv_proxy *p;
    kv_list ups; /* pw_up.link: the open upstream streams */
    uint32_t n_ups;
    uv_timer_t retry;
    uint32_t retry_ms;
    kv_list bcasts; /* pw_bc.link */
    pw_bc **ktab;
    size_t kcap, n_k;
    uint32_t n_streams, n_watchers, n_held, n_bcasts;
    uint32_t up_cap;     /* watchers per upstream stream for new streams: the flag, lowered to
                            what a member took when it refused one more ("kvd: too many
                            watchers on this stream", its --max-watchers-per-stream), back to
                            the flag when an upstream stream ends (failover: cap_reset) */
    kv_list dead, ready; /* pw_cs.dlink: deferred ends and unblocked streams */
    int depth;           /* nesting of entry points; deferred work runs at depth 0 */
    kv_metric *m_streams, *m_watchers, *m_bcasts, *m_coalesced, *m_up_opened, *m_up_streams,
        *m_resumed, *m_up_cap, *m_merged;
} kv_proxy_watch;

/* proxy_watch_up.c */
/* Finds a pw_bc that w (start revision `start`, options of req) can join without a gap or a
 * repeat, or makes one (and sends its create upstream). Sets w->bc, w->nextrev, and sends
 * w's Created at once when the upstream watcher is established (else w->created stays 0 and
 * the Created goes out with the upstream's). 0 or -ENOMEM. */
int pw_bc_attach(kv_proxy_watch *s, pw_w *w, const Etcdserverpb__WatchCreateRequest *req);
/* Removes w from its pw_bc; the last receiver's leaving cancels the upstream watcher. */
void pw_bc_detach(kv_proxy_watch *s, pw_w *w);
void pw_up_on_event(kv_proxy_watch *s, kv_proxy_ev *ev);
/* Loop stop: frees the upstream stream (its events still come through the bridge). */
void pw_up_stop(kv_proxy_watch *s);
void pw_up_free_all(kv_proxy_watch *s);

/* proxy_watch.c */
/* Sends msg to w's client (a slow client's stream is ended and freed later). */
void pw_cs_send(pw_cs *cs, const uint8_t *msg, size_t len);
/* Packs r (watch_id and header set by the caller) and sends it to cs. */
void pw_cs_send_resp(pw_cs *cs, const Etcdserverpb__WatchResponse *r);
/* w's Created was sent: its stream's held requests run (deferred). */
void pw_cs_unblock(pw_cs *cs, pw_w *w);
/* Ends cs's call (if still open) with code/msg, or refused for `why` when why >= 0 (a
 * kv_proxy_refused), and queues cs's release (deferred work). */
void pw_cs_kill(pw_cs *cs, int code, const char *msg, int why);
/* Runs the deferred work (held requests of unblocked streams, releases) unless an entry point
 * is still on the stack (s->depth > 0). */
void pw_run_deferred(kv_proxy_watch *s);
/* The upstream ended w (canceled, compacted): w is freed, its stream goes on. */
void pw_w_end(pw_w *w);

#endif
