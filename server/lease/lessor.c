/*
 * lessor.c: see lessor.h for the contract.
 *
 * Memory per lease: the map (lease_map.h) holds 40 bytes + 8-byte index cells at 3/8..3/4
 * load (11..21 bytes); on the primary the heap adds 16 bytes. ~67..77 bytes in steady state,
 * at most ~133 right after array doublings. kv_lessor_metrics.mem_bytes reports it.
 */
#include "lease/lessor.h"
#include "common/clock.h"
#include "common/mix64.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "lease/lease_heap.h"
#include "lease/lease_map.h"

#define NONE KV_LEASE_NONE
_Static_assert(KV_LEASE_NONE == KV_LEASE_HEAP_NONE, "one 'no position' value");
#define FLAG_CLEAR_PENDING 1u
/* Slots a checkpoint round examines per tick before yielding to the loop. */
#define CP_SCAN_BUDGET 65536u
/* Most lease ids handed to one propose_revoke call (a bigger burst takes several calls). */
#define REVOKE_BATCH_MAX 1000u

typedef struct bucket {
    int64_t milli; /* tokens * 1000 */
    int64_t last_ms;
    int64_t cap_milli;
    uint32_t rate; /* tokens per second == milli-tokens per ms */
} bucket;

struct kv_lessor {
    kv_lessor_config cfg;
    kv_lessor_ops ops;
    void *arg;
    uv_loop_t *loop;
    uv_timer_t *timer; /* owned; freed in its close callback */
    int64_t armed_ms;  /* due time the timer is set for; INT64_MAX = stopped */

    kv_lease_map map;

    kv_lease_heap heap;
    int primary;
    int in_tick;

    uint64_t rng;
    uint64_t id_next; /* kv_lessor_new_id's counter: last one used (47 bits) */

    bucket rv, cp;
    int64_t *rv_buf;
    uint32_t rv_buf_cap;
    kv_lease_checkpoint *cp_buf;

    int cp_in_round;
    uint32_t cp_cursor;
    int64_t cp_round_start_ms;
    int64_t cp_next_round_ms;

    uint64_t keepalives_total, expired_total, revoked_total, checkpoints_total;
};

/* ---------- small helpers ---------- */

/* Server-chosen lease ids (kv_lessor_new_id, lessor.h): a 47-bit counter, then the member. */
#define ID_EPOCH_MS 1735689600000ULL /* 2025-01-01T00:00:00Z */
#define ID_COUNT_BITS 7              /* ids per ms before the counter runs ahead */
#define ID_COUNTER_MASK ((1ULL << 47) - 1)

static uint64_t rng_next(kv_lessor *l)
{
    l->rng += 0x9e3779b97f4a7c15ULL;
    return kv_mix64(l->rng);
}

static uint64_t default_now_ms(void *arg)
{
    (void)arg;
    return kv_mono_ms();
}

static int64_t now_ms(const kv_lessor *l)
{
    return (int64_t)l->ops.now_ms(l->arg);
}

/* Seconds to ms, saturating at etcd's MaxLeaseTTL so no TTL from the table can overflow. */
static int64_t s_to_ms(int64_t s)
{
    if (s > KV_LEASE_MAX_TTL_S)
        s = KV_LEASE_MAX_TTL_S;
    return s * 1000;
}

static int64_t base_ms(const kv_lease *e)
{
    return s_to_ms(e->remaining_s > 0 ? e->remaining_s : e->ttl_s);
}

static void bucket_init(bucket *b, uint32_t rate, int64_t now)
{
    b->rate = rate;
    b->cap_milli = (int64_t)(rate / 2 ? rate / 2 : 1) * 1000;
    b->milli = b->cap_milli;
    b->last_ms = now;
}

static void bucket_refill(bucket *b, int64_t now)
{
    if (now > b->last_ms) {
        int64_t dt = now - b->last_ms;
        if (dt >= b->cap_milli / (int64_t)b->rate + 1)
            b->milli = b->cap_milli;
        else if ((b->milli += dt * (int64_t)b->rate) > b->cap_milli)
            b->milli = b->cap_milli;
        b->last_ms = now;
    }
}

/* Milliseconds until the bucket holds a useful batch (a tenth of a second's worth, at most
 * the burst), so a rate-limited backlog is proposed in ~10 batches per second. */
static int64_t bucket_wait_ms(const bucket *b)
{
    int64_t want = (int64_t)(b->rate / 10 ? b->rate / 10 : 1) * 1000;
    if (want > b->cap_milli)
        want = b->cap_milli;
    if (b->milli >= want)
        return 0;
    return (want - b->milli + b->rate - 1) / b->rate;
}

static void heap_moved(void *arg, uint32_t ref, uint32_t pos)
{
    kv_lessor *l = arg;
    kv_lease_map_at(&l->map, ref)->heap_idx = pos;
}

static kv_lease *find(const kv_lessor *l, int64_t id)
{
    return kv_lease_map_find(&l->map, id);
}

/* Inserts a new lease (not in the map) without expiry state. */
static int insert_new(kv_lessor *l, int64_t id, int64_t ttl_s, int64_t rem_s, kv_lease **out)
{
    int rc = kv_lease_map_insert(&l->map, id, out);
    if (rc)
        return rc;
    (*out)->ttl_s = ttl_s;
    (*out)->remaining_s = rem_s;
    return 0;
}

/* ---------- timer ---------- */

static void on_timer(uv_timer_t *t)
{
    kv_lessor *l = t->data;
    if (l)
        kv_lessor_tick(l);
}

static void on_timer_close(uv_handle_t *h)
{
    free(h);
}

static int64_t next_due(const kv_lessor *l, int64_t now)
{
    if (!l->primary)
        return INT64_MAX;
    int64_t due = INT64_MAX;
    const kv_lease_heap_item *top = kv_lease_heap_top(&l->heap);
    if (top) {
        if (top->key > now) {
            due = top->key;
        } else { /* backlog: held back by the rate limit (or a full batch) */
            bucket b = l->rv;
            bucket_refill(&b, now);
            due = now + bucket_wait_ms(&b);
        }
    }
    if (l->ops.propose_checkpoint) {
        int64_t cd;
        if (l->cp_in_round) {
            bucket b = l->cp;
            bucket_refill(&b, now);
            cd = now + bucket_wait_ms(&b);
        } else {
            cd = l->cp_next_round_ms;
        }
        if (cd < due)
            due = cd;
    }
    return due;
}

static void rearm(kv_lessor *l, int64_t now)
{
    if (!l->timer || l->in_tick)
        return;
    int64_t due = next_due(l, now);
    if (due == INT64_MAX) {
        uv_timer_stop(l->timer);
        l->armed_ms = INT64_MAX;
        return;
    }
    if (due == l->armed_ms)
        return;
    uv_timer_start(l->timer, on_timer, due > now ? (uint64_t)(due - now) : 0, 0);
    l->armed_ms = due;
}

/* A heap key became key: arm earlier if needed. */
static void maybe_rearm(kv_lessor *l, int64_t key, int64_t now)
{
    if (l->timer && key < l->armed_ms)
        rearm(l, now);
}

/* ---------- lifecycle ---------- */

void kv_lessor_config_default(kv_lessor_config *cfg)
{
    memset(cfg, 0, sizeof(*cfg));
    cfg->min_ttl_s = 1;
    cfg->max_ttl_s = KV_LEASE_MAX_TTL_S;
    cfg->revoke_rate = 1000;
    cfg->checkpoint_rate = 1000;
    cfg->checkpoint_batch = 1000;
    cfg->checkpoint_interval_ms = 5 * 60 * 1000;
    cfg->revoke_retry_ms = 3000;
    cfg->propose_fail_retry_ms = 500;
    cfg->max_leases = 1u << 24;
    cfg->seed = 0;
}

int kv_lessor_create(kv_lessor **out, uv_loop_t *loop, const kv_lessor_config *cfg,
                     const kv_lessor_ops *ops, void *arg)
{
    if (!out || !cfg || !ops || !ops->propose_revoke)
        return -EINVAL;
    int cp_on = ops->propose_checkpoint && cfg->checkpoint_interval_ms > 0;
    if (cfg->min_ttl_s < 1 || cfg->max_ttl_s < cfg->min_ttl_s || cfg->revoke_rate == 0 ||
        (cp_on && (cfg->checkpoint_rate == 0 || cfg->checkpoint_batch == 0)) ||
        cfg->revoke_retry_ms <= 0 || cfg->propose_fail_retry_ms <= 0 || cfg->max_leases == 0)
        return -EINVAL;
    kv_lessor *l = calloc(1, sizeof(*l));
    if (!l)
        return -ENOMEM;
    l->cfg = *cfg;
    l->ops = *ops;
    if (!cp_on) { /* checkpoints disabled: keep the unused limits harmless */
        l->ops.propose_checkpoint = NULL;
        l->cfg.checkpoint_rate = 1;
        l->cfg.checkpoint_batch = 1;
        l->cfg.checkpoint_interval_ms = INT64_MAX / 4;
    }
    if (!l->ops.now_ms)
        l->ops.now_ms = default_now_ms;
    l->arg = arg;
    l->loop = loop;
    l->armed_ms = INT64_MAX;
    kv_lease_heap_init(&l->heap, heap_moved, l);

    uint64_t seed = cfg->seed;
    if (!seed) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        seed = kv_mix64((uint64_t)ts.tv_nsec ^ (uint64_t)ts.tv_sec << 30 ^ (uint64_t)(uintptr_t)l);
    }
    l->rng = seed;
    kv_lease_map_init(&l->map, rng_next(l));
    l->id_next = cfg->seed << ID_COUNT_BITS; /* seeded (tests): a plain counter */

    int64_t now = now_ms(l);
    bucket_init(&l->rv, cfg->revoke_rate, now);
    bucket_init(&l->cp, l->cfg.checkpoint_rate, now);
    l->rv_buf_cap = (uint32_t)(l->rv.cap_milli / 1000);
    if (l->rv_buf_cap > REVOKE_BATCH_MAX)
        l->rv_buf_cap = REVOKE_BATCH_MAX;
    int rc = -ENOMEM;
    l->rv_buf = malloc((size_t)l->rv_buf_cap * sizeof(*l->rv_buf));
    l->cp_buf = malloc((size_t)l->cfg.checkpoint_batch * sizeof(*l->cp_buf));
    if (!l->rv_buf || !l->cp_buf)
        goto fail;
    if (loop) {
        l->timer = malloc(sizeof(*l->timer));
        if (!l->timer)
            goto fail;
        rc = uv_timer_init(loop, l->timer);
        if (rc) {
            free(l->timer); /* never initialised: no close needed */
            l->timer = NULL;
            goto fail;
        }
        l->timer->data = l;
    }
    *out = l;
    return 0;
fail:
    free(l->rv_buf);
    free(l->cp_buf);
    free(l);
    return rc;
}

void kv_lessor_free(kv_lessor *l)
{
    if (!l)
        return;
    if (l->timer) {
        uv_timer_stop(l->timer);
        l->timer->data = NULL;
        uv_close((uv_handle_t *)l->timer, on_timer_close);
    }
    kv_lease_heap_free(&l->heap);
    kv_lease_map_free(&l->map);
    free(l->rv_buf);
    free(l->cp_buf);
    free(l);
}

/* ---------- primary state ---------- */

static void clear_primary_state(kv_lessor *l)
{
    l->primary = 0;
    kv_lease_heap_free(&l->heap);
    for (uint32_t s = 0; s < l->map.slots_used; s++) {
        kv_lease *e = kv_lease_map_at(&l->map, s);
        if (e->id) {
            e->heap_idx = NONE;
            e->deadline_ms = 0;
            e->flags = 0;
        }
    }
    l->cp_in_round = 0;
    if (l->timer)
        uv_timer_stop(l->timer);
    l->armed_ms = INT64_MAX;
}

void kv_lessor_demote(kv_lessor *l)
{
    clear_primary_state(l);
}

int kv_lessor_is_primary(const kv_lessor *l)
{
    return l->primary;
}

/* As etcd's recovery: a stored TTL below today's minimum is raised to it (in memory). */
static int load_cb(void *arg, const kv_lease_rec *rec)
{
    kv_lessor *l = arg;
    int64_t ttl = rec->ttl < l->cfg.min_ttl_s ? l->cfg.min_ttl_s : rec->ttl;
    if (rec->id == 0)
        return 0;
    kv_lease *e = find(l, rec->id);
    if (!e) {
        int rc = kv_lease_map_insert(&l->map, rec->id, &e);
        if (rc)
            return rc;
    }
    e->ttl_s = ttl;
    e->remaining_s = rec->remaining_ttl;
    return 0;
}

static int reload(kv_lessor *l, MDB_txn *txn, const kv_lease_table *table)
{
    kv_lease_heap_free(&l->heap);
    kv_lease_map_free(&l->map);
    l->cp_cursor = 0;
    return kv_lease_table_each(table, txn, load_cb, l);
}

static int cmp_item(const void *a, const void *b)
{
    const kv_lease_heap_item *x = a, *y = b;
    return x->key < y->key ? -1 : x->key > y->key;
}

/* etcd's Promote: spread expiries so piled-up leases do not exceed 3/4 of the revoke rate per
 * second. items[] is sorted by deadline; keys and deadlines are pushed back in place. */
static void spread(kv_lessor *l, int64_t now)
{
    kv_lease_heap_item *it = l->heap.items;
    uint32_t n = l->heap.len;
    if (n < l->cfg.revoke_rate)
        return;
    int64_t target = (3 * (int64_t)l->cfg.revoke_rate) / 4;
    if (target < 1)
        target = 1;
    int64_t base = it[0].key - now, next_window = base + 1000, expires = 0;
    for (uint32_t i = 0; i < n; i++) {
        int64_t remaining = it[i].key - now;
        if (remaining > next_window) {
            base = remaining;
            next_window = base + 1000;
            expires = 1;
            continue;
        }
        expires++;
        if (expires <= target)
            continue;
        int64_t delay = 1000 * expires / target - (remaining - base);
        if (delay < 0)
            delay = 0;
        next_window = base + delay;
        it[i].key += delay;
        kv_lease_map_at(&l->map, it[i].ref)->deadline_ms = it[i].key;
    }
}

int kv_lessor_promote(kv_lessor *l, int64_t extend_ms, MDB_txn *txn, const kv_lease_table *table)
{
    clear_primary_state(l);
    int rc = 0;
    if (txn && table) {
        rc = reload(l, txn, table);
        if (rc)
            return rc;
    }
    int64_t now = now_ms(l);
    for (uint32_t s = 0; s < l->map.slots_used; s++) {
        kv_lease *e = kv_lease_map_at(&l->map, s);
        if (!e->id)
            continue;
        e->deadline_ms = now + base_ms(e) + extend_ms;
        rc = kv_lease_heap_append(&l->heap, e->deadline_ms, s);
        if (rc) {
            clear_primary_state(l);
            return rc;
        }
    }
    if (l->heap.len >= l->cfg.revoke_rate) {
        qsort(l->heap.items, l->heap.len, sizeof(*l->heap.items), cmp_item);
        spread(l, now);
    }
    kv_lease_heap_heapify(&l->heap);
    kv_lease_heap_reindex(&l->heap);
    l->primary = 1;
    bucket_init(&l->rv, l->cfg.revoke_rate, now);
    bucket_init(&l->cp, l->cfg.checkpoint_rate, now);
    l->cp_in_round = 0;
    l->cp_next_round_ms = now + l->cfg.checkpoint_interval_ms;
    rearm(l, now);
    return 0;
}

int kv_lessor_recover(kv_lessor *l, MDB_txn *txn, const kv_lease_table *table)
{
    if (l->primary)
        return kv_lessor_promote(l, 0, txn, table);
    return reload(l, txn, table);
}

/* ---------- observers ---------- */

int kv_lessor_on_granted(kv_lessor *l, int64_t id, int64_t ttl_s, int64_t remaining_ttl_s)
{
    if (id == 0)
        return -EINVAL;
    kv_lease *e = find(l, id);
    if (!e) {
        int rc = insert_new(l, id, ttl_s, remaining_ttl_s, &e);
        if (rc)
            return rc;
    }
    e->ttl_s = ttl_s;
    e->remaining_s = remaining_ttl_s;
    e->flags = 0;
    if (!l->primary)
        return 0;
    int64_t now = now_ms(l);
    e->deadline_ms = now + base_ms(e);
    if (e->heap_idx != NONE) {
        kv_lease_heap_update(&l->heap, e->heap_idx, e->deadline_ms);
    } else {
        /* On -ENOMEM the lease has no expiry until the next promote; it is reported. */
        int rc = kv_lease_heap_push(&l->heap, e->deadline_ms, kv_lease_map_slot(&l->map, e));
        if (rc)
            return rc;
    }
    maybe_rearm(l, e->deadline_ms, now);
    return 0;
}

void kv_lessor_on_revoked(kv_lessor *l, int64_t id)
{
    kv_lease *e = find(l, id);
    if (!e)
        return;
    if (l->primary && e->heap_idx != NONE)
        kv_lease_heap_remove(&l->heap, e->heap_idx);
    kv_lease_map_remove(&l->map, id);
    l->revoked_total++;
}

void kv_lessor_on_checkpointed(kv_lessor *l, int64_t id, int64_t remaining_ttl_s)
{
    kv_lease *e = find(l, id);
    if (e) {
        e->remaining_s = remaining_ttl_s;
        e->flags &= ~FLAG_CLEAR_PENDING;
    }
}

/* ---------- queries ---------- */

static int still_leader(kv_lessor *l)
{
    return l->primary && (!l->ops.is_leader || l->ops.is_leader(l->arg));
}

int kv_lessor_renew(kv_lessor *l, int64_t id, int64_t *ttl_out)
{
    l->keepalives_total++;
    if (!l->primary)
        return -EAGAIN;
    kv_lease *e = find(l, id);
    if (!e)
        return -ENOENT;
    int64_t now = now_ms(l);
    if (e->deadline_ms <= now)
        return -ENOENT; /* expired; its revoke is (or will be) proposed */
    e->deadline_ms = now + s_to_ms(e->ttl_s);
    if (e->heap_idx != NONE) {
        kv_lease_heap_update(&l->heap, e->heap_idx, e->deadline_ms);
    } else {
        int rc = kv_lease_heap_push(&l->heap, e->deadline_ms, kv_lease_map_slot(&l->map, e));
        if (rc)
            return rc;
    }
    maybe_rearm(l, e->deadline_ms, now);
    *ttl_out = e->ttl_s;
    if (e->remaining_s > 0 && !(e->flags & FLAG_CLEAR_PENDING) && l->ops.propose_checkpoint &&
        still_leader(l)) {
        kv_lease_checkpoint cp = {.id = id, .remaining_ttl = 0};
        e->flags |= FLAG_CLEAR_PENDING;
        int rc = l->ops.propose_checkpoint(l->arg, &cp, 1);
        if (rc < 0) {
            e = find(l, id); /* the callback may have applied anything */
            if (e)
                e->flags &= ~FLAG_CLEAR_PENDING;
        } else {
            l->checkpoints_total++;
        }
    }
    return 0;
}

int kv_lessor_time_to_live(kv_lessor *l, int64_t id, int64_t *remaining_s, int64_t *granted_s)
{
    if (!l->primary)
        return -EAGAIN;
    const kv_lease *e = find(l, id);
    if (!e)
        return -ENOENT;
    int64_t left = e->deadline_ms - now_ms(l);
    *remaining_s = left > 0 ? left / 1000 : 0;
    *granted_s = e->ttl_s;
    return 0;
}

int kv_lessor_exists(const kv_lessor *l, int64_t id)
{
    return find(l, id) != NULL;
}

int kv_lessor_lookup(const kv_lessor *l, int64_t id, int64_t *ttl_s, int64_t *remaining_ttl_s)
{
    const kv_lease *e = find(l, id);
    if (!e)
        return -ENOENT;
    if (ttl_s)
        *ttl_s = e->ttl_s;
    if (remaining_ttl_s)
        *remaining_ttl_s = e->remaining_s;
    return 0;
}

int kv_lessor_deadline_ms(const kv_lessor *l, int64_t id, int64_t *deadline_ms)
{
    if (!l->primary)
        return -EAGAIN;
    const kv_lease *e = find(l, id);
    if (!e)
        return -ENOENT;
    *deadline_ms = e->deadline_ms;
    return 0;
}

int kv_lessor_each(const kv_lessor *l, int (*fn)(void *arg, int64_t id, int64_t ttl_s), void *arg)
{
    for (uint32_t s = 0; s < l->map.slots_used; s++) {
        const kv_lease *e = kv_lease_map_at(&l->map, s);
        if (e->id) {
            int rc = fn(arg, e->id, e->ttl_s);
            if (rc)
                return rc;
        }
    }
    return 0;
}

int64_t kv_lessor_clamp_ttl(const kv_lessor *l, int64_t ttl_s)
{
    if (ttl_s > l->cfg.max_ttl_s)
        return -ERANGE;
    return ttl_s < l->cfg.min_ttl_s ? l->cfg.min_ttl_s : ttl_s;
}

/* The id counter's floor: wall-clock ms since ID_EPOCH_MS, << ID_COUNT_BITS. */
static uint64_t id_floor(const kv_lessor *l)
{
    if (l->cfg.seed)
        return 0;
    struct timespec wall;
    clock_gettime(CLOCK_REALTIME, &wall);
    uint64_t ms = (uint64_t)wall.tv_sec * 1000u + (uint64_t)wall.tv_nsec / 1000000u;
    return (ms > ID_EPOCH_MS ? ms - ID_EPOCH_MS : 0) << ID_COUNT_BITS;
}

int64_t kv_lessor_new_id(kv_lessor *l)
{
    uint64_t floor = id_floor(l);
    for (;;) {
        uint64_t next = l->id_next + 1;
        l->id_next = (next > floor ? next : floor) & ID_COUNTER_MASK;
        int64_t id = (int64_t)(l->id_next << 16 | l->cfg.id_member);
        if (id != 0 && !find(l, id))
            return id;
    }
}

int kv_lessor_check_grant(const kv_lessor *l, int64_t id)
{
    if (id == 0)
        return -EINVAL;
    if (find(l, id))
        return -EEXIST;
    if (kv_lease_map_count(&l->map) >= l->cfg.max_leases)
        return -ENOSPC;
    return 0;
}

/* ---------- tick ---------- */

static void expire_step(kv_lessor *l, int64_t now)
{
    bucket_refill(&l->rv, now);
    uint32_t n = 0;
    const kv_lease_heap_item *top;
    while (n < l->rv_buf_cap && l->rv.milli >= 1000 && (top = kv_lease_heap_top(&l->heap)) &&
           top->key <= now) {
        kv_lease *e = kv_lease_map_at(&l->map, top->ref);
        if (e->deadline_ms > now) { /* stale key (cannot happen: renew updates it) */
            kv_lease_heap_update(&l->heap, 0, e->deadline_ms);
            continue;
        }
        l->rv_buf[n++] = e->id;
        l->rv.milli -= 1000;
        /* Not proposed again before revoke_retry_ms unless its revoke is applied first. */
        kv_lease_heap_update(&l->heap, 0, now + l->cfg.revoke_retry_ms);
    }
    if (!n)
        return;
    /* Re-check just before proposing: still primary, still expired (not renewed). */
    uint32_t m = 0;
    for (uint32_t i = 0; i < n; i++) {
        const kv_lease *e = find(l, l->rv_buf[i]);
        if (e && e->deadline_ms <= now)
            l->rv_buf[m++] = l->rv_buf[i];
    }
    if (!m)
        return;
    if (!still_leader(l)) {
        l->rv.milli += (int64_t)m * 1000; /* nothing proposed: refund */
        return;
    }
    int rc = l->ops.propose_revoke(l->arg, l->rv_buf, m);
    if (rc < 0) {
        for (uint32_t i = 0; i < m; i++) {
            kv_lease *e = find(l, l->rv_buf[i]);
            if (e && l->primary && e->heap_idx != NONE)
                kv_lease_heap_update(&l->heap, e->heap_idx, now + l->cfg.propose_fail_retry_ms);
        }
        l->rv.milli += (int64_t)m * 1000;
        if (l->rv.milli > l->rv.cap_milli)
            l->rv.milli = l->rv.cap_milli;
        return;
    }
    l->expired_total += m;
}

/* Proposes the gathered checkpoints; failures are dropped until the next round. */
static void cp_flush(kv_lessor *l, uint32_t n)
{
    if (!n || !still_leader(l))
        return;
    if (l->ops.propose_checkpoint(l->arg, l->cp_buf, n) >= 0)
        l->checkpoints_total += n;
}

static void checkpoint_step(kv_lessor *l, int64_t now)
{
    if (!l->ops.propose_checkpoint)
        return;
    if (!l->cp_in_round) {
        if (now < l->cp_next_round_ms)
            return;
        l->cp_in_round = 1;
        l->cp_cursor = 0;
        l->cp_round_start_ms = now;
    }
    bucket_refill(&l->cp, now);
    uint32_t n = 0, scanned = 0;
    int64_t interval = l->cfg.checkpoint_interval_ms;
    while (l->primary && l->cp_cursor < l->map.slots_used && scanned < CP_SCAN_BUDGET &&
           l->cp.milli >= 1000) {
        const kv_lease *e = kv_lease_map_at(&l->map, l->cp_cursor++);
        scanned++;
        if (!e->id || s_to_ms(e->ttl_s) <= interval || e->deadline_ms <= now)
            continue;
        int64_t rem = (e->deadline_ms - now + 999) / 1000;
        if (rem >= e->ttl_s)
            continue;
        l->cp_buf[n++] = (kv_lease_checkpoint){.id = e->id, .remaining_ttl = rem};
        l->cp.milli -= 1000;
        if (n == l->cfg.checkpoint_batch) {
            cp_flush(l, n);
            n = 0;
        }
    }
    cp_flush(l, n);
    if (l->primary && l->cp_cursor >= l->map.slots_used) {
        l->cp_in_round = 0;
        l->cp_next_round_ms = l->cp_round_start_ms + interval;
        if (l->cp_next_round_ms <= now)
            l->cp_next_round_ms = now + interval;
    }
}

void kv_lessor_tick(kv_lessor *l)
{
    if (!l->primary || l->in_tick)
        return;
    l->in_tick = 1;
    int64_t now = now_ms(l);
    expire_step(l, now);
    if (l->primary)
        checkpoint_step(l, now);
    l->in_tick = 0;
    if (l->primary) {
        l->armed_ms = INT64_MAX; /* a one-shot timer that fired (or a manual tick) */
        rearm(l, now);
    }
}

int64_t kv_lessor_next_due_ms(const kv_lessor *l)
{
    return next_due(l, now_ms(l));
}

/* ---------- metrics ---------- */

void kv_lessor_metrics_get(const kv_lessor *l, kv_lessor_metrics *m)
{
    m->active_leases = kv_lease_map_count(&l->map);
    m->heap_size = l->heap.len;
    m->keepalives_total = l->keepalives_total;
    m->expired_total = l->expired_total;
    m->revoked_total = l->revoked_total;
    m->checkpoints_total = l->checkpoints_total;
    m->is_primary = (uint64_t)l->primary;
    m->mem_bytes = (uint64_t)kv_lease_map_bytes(&l->map) +
                   (uint64_t)l->heap.cap * sizeof(kv_lease_heap_item) +
                   (uint64_t)l->rv_buf_cap * sizeof(int64_t) +
                   (uint64_t)l->cfg.checkpoint_batch * sizeof(kv_lease_checkpoint) + sizeof(*l);
}

uint32_t kv_lessor_heap_size(const kv_lessor *l)
{
    return l->heap.len;
}

size_t kv_lessor_count(const kv_lessor *l)
{
    return kv_lease_map_count(&l->map);
}

void kv_lessor_heap_stats(const kv_lessor *l, uint64_t *cmps, uint64_t *swaps)
{
    *cmps = l->heap.stats.cmps;
    *swaps = l->heap.stats.swaps;
}
