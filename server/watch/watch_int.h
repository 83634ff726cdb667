/*
 * watch_int: private structures shared by watch_hub.c (groups, delivery, catch-up) and
 * watch_stream.c (the per-stream protocol). Not for use outside server/watch/.
 */
#ifndef KV_WATCH_INT_H
#define KV_WATCH_INT_H

#include "common/list.h"
#include "kv.pb-c.h"
#include "rpc.pb-c.h"
#include "watch/watch_hub.h"
#include "watch/watch_index.h"

#include <stdbool.h>

enum { W_SYNCED = 0, W_UNSYNCED = 1, W_DEAD = 2 };
enum { R_SINGLE = 0, R_RANGE = 1, R_FROM = 2 };

typedef struct kv_watcher kv_watcher;
struct kv_watcher {
    kv_watch_stream *st;
    int64_t id;
    uint8_t *key, *end; /* key (>= 1 byte); end for R_RANGE */
    size_t klen, elen;
    int kind;         /* R_* */
    int state;        /* W_* */
    int64_t next_rev; /* first revision not yet sent; while synced, revisions below
                         hub->synced_next were offered too (advanced lazily) */
    bool noput, nodelete, prev_kv, progress, fragment;
    bool progress_due; /* etcd sws.progress[id] */
    bool in_set;       /* live delivery: already in hub->set for this slice */
    uint32_t set_ix;   /* its index there (valid while in_set) */
    kv_list glink;     /* hub->synced / hub->unsynced */
    kv_list slink;     /* st->watchers */
    kv_widx_link ix;   /* hub->idx while synced (watch_index.h) */
    uint64_t ixv;      /* index: key hash (single key) or treap priority (range) */
    uint64_t added_ns; /* uv_hrtime() when added to the hub (delivery lag) */
};

struct kv_watch_stream {
    kv_watch_hub *hub;
    const kv_watch_sink_ops *ops;
    void *sink;
    uint64_t conn_id;
    kv_list watchers; /* kv_watcher.slink, newest first */
    size_t n_watchers;
    int64_t next_id; /* next auto id candidate */
    int64_t max_id;  /* largest id in use or used so far (-1 none) */
    bool broken;     /* a send failed for good: deliver nothing more */
    bool fail_due;   /* on hub->failed: ops->failed not yet called */
    int fail_err;    /* the failed send's error */
    kv_list link;    /* hub->streams */
    kv_list flink;   /* hub->failed while fail_due */
};

/* A group of watchers (kv_watcher.glink), oldest first. */
typedef struct wlist {
    kv_list list;
    size_t n;
} wlist;

/* One event of the slice being delivered. */
typedef struct slice_ev {
    Mvccpb__KeyValue *kv;
    Mvccpb__Event ev;  /* without prev_kv */
    Mvccpb__Event evp; /* with prev_kv (loaded on first use) */
    bool prev_loaded;
    int64_t main;
    uint8_t *wire, *wirep; /* field 11 of WatchResponse (tag, length, packed Event), packed
                              once per slice and copied into every watcher's response */
    size_t wire_len, wirep_len;
} slice_ev;

#define KV_WATCH_LAG_NOTES 512

struct kv_watch_hub {
    uv_loop_t *loop;
    kv_store *store;
    kv_watch_config cfg;
    const kv_header_info *hdr;
    int64_t cur_rev;
    int64_t acked_rev;   /* kv_watch_hub_acked: may be above cur_rev until the commit notifies */
    int64_t synced_next; /* every synced watcher was offered the revisions below this: cur_rev+1
                            outside live delivery (docs/ARCHITECTURE.md, Watch) */
    kv_widx idx;         /* the synced watchers by key */
    kv_list streams;     /* kv_watch_stream.link, newest first */
    kv_list failed;      /* kv_watch_stream.flink, oldest first: ops->failed owed */
    size_t n_streams, n_watchers;
    wlist synced, unsynced;
    uv_timer_t sync_timer, progress_timer;
    uv_idle_t sync_idle; /* catch-up on the next loop turn */
    int handles_open;
    bool closing;
    bool sync_armed;
    uint64_t poll_ms;     /* catch-up back-off while no stream has room */
    uint64_t deadline_ns; /* uv_hrtime() bound of the current delivery turn (0 = none) */
    bool over_budget;     /* the turn ran out of time: remaining watchers go unsynced */
    size_t turn_bytes;    /* response bytes queued in the current turn */
    size_t turn_bytes_max;
    /* scratch (grown, kept) */
    slice_ev *ev;
    size_t n_ev, cap_ev;
    bool cache_valid; /* ev holds the catch-up slice [cache_from, cache_last] read for
                         [cache_from, cache_to] */
    int64_t cache_from, cache_to, cache_last;
    kv_watcher **set;
    uint32_t *set_lo, *set_hi; /* live delivery: first and last slice event matching set[i] */
    size_t cap_set;
    Mvccpb__Event **out;
    slice_ev **outs; /* out[i] is outs[i]->ev or ->evp */
    size_t cap_out;
    uint8_t *obuf; /* response being built */
    size_t cap_obuf;
    kv_watch_stats st;
    kv_metrics *metrics;
    kv_metric *m_events, *m_slow;
    /* kvd_watch_event_delivery_lag_seconds (docs/metrics.md "Watch"): when each of the last
     * LAG_NOTES revisions became visible here (kv_watch_hub_notify), oldest first, a ring */
    kv_metric *m_lag;
    struct {
        int64_t rev;
        uint64_t t_ns;
    } lag_notes[KV_WATCH_LAG_NOTES];
    size_t lag_head, lag_n;
    uint64_t fp_events; /* failpoint (watch_failpoint.c): events counted so far */
    bool fp_dropped;
};

/* watch_hub.c */
void kv_wlist_push(wlist *l, kv_watcher *w);
void kv_wlist_remove(wlist *l, kv_watcher *w);
/* Puts a new watcher in the right group (synced if start >= cur+1) and kicks catch-up. */
void kv_watch_hub_add(kv_watch_hub *h, kv_watcher *w);
/* Takes the watcher out of its group (not out of its stream). */
void kv_watch_hub_detach(kv_watch_hub *h, kv_watcher *w);
/* Takes st off the hub's list of streams whose owner is still to hear of a failed send
 * (st is being closed). */
void kv_watch_stream_unfail(kv_watch_stream *st);
/* Packs and sends a response header + fields. Control responses are allowed up to twice
 * the stream's send buffer bound. 0, -ENOBUFS, or another error. */
int kv_watch_send_ctrl(kv_watch_stream *st, Etcdserverpb__WatchResponse *r, int64_t hdr_rev);
bool kv_watch_match(const kv_watcher *w, const uint8_t *key, size_t klen);

/* watch_failpoint.c: with cfg.fp_drop_event_at = N > 0, removes the Nth event this hub sends
 * (counted over every watcher) from out/outs[0..n) once; returns the new count. */
size_t kv_watch_fp_filter(kv_watch_hub *h, size_t n);

#endif
