/* corrupt_check: periodic and initial HashKV comparison between members (etcd 3.4
 * etcdserver/corrupt.go). Contract and frame layout: corrupt_check.h. */
#include "corrupt/corrupt_check.h"

#include "apply/internal_req.h"
#include "common/byteorder.h"
#include "mvcc/members.h"
#include "node/read_pool.h"
#include "rpc.pb-c.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define REQ_LEN 16u  /* seq(8) revision(8) */
#define RESP_LEN 40u /* seq(8) revision(8) status(4) hash(4) compact(8) current(8) */
#define TICK_MS 100u

enum { JOB_LOCAL, JOB_SERVE };

typedef struct hash_job {
    kv_corrupt *c;
    int kind;
    uint64_t from, seq;
    int64_t rev;
    int rc;
    uint32_t hash;
    int64_t crev, cur;
} hash_job;

typedef struct round {
    int active;  /* waiting for peers */
    int initial; /* the start-up check */
    uint64_t seq;
    int64_t rev, crev;
    uint32_t hash;
    uint64_t deadline, resend_at;
    size_t n;
    kv_corrupt_answer a[KV_CORRUPT_MAX_PEERS];
    uint8_t sent[KV_CORRUPT_MAX_PEERS], answered[KV_CORRUPT_MAX_PEERS];
} round;

struct kv_corrupt {
    kv_corrupt_deps d;
    uv_timer_t timer;
    int timer_on, closed, timer_closed;
    uint32_t period_ms, timeout_ms;
    uint64_t next_check;
    unsigned jobs;    /* hash jobs on the reader pool (any kind) */
    unsigned serving; /* of them, for peers */
    int local_job;    /* a local hash for a round is running */
    uint64_t next_seq;
    round r;
    int init_done, init_rc; /* initial check result */
    int self_noted;         /* the CORRUPT alarm naming this member was logged */
    kv_metric *m_checks, *m_mismatches, *m_served, *m_refused;
};

/* ---- codec ---- */

/* ---- lifetime ---- */

static void maybe_free(kv_corrupt *c)
{
    if (c->closed && c->timer_closed && c->jobs == 0)
        free(c);
}

static void on_timer_closed(uv_handle_t *h)
{
    kv_corrupt *c = h->data;
    c->timer_closed = 1;
    maybe_free(c);
}

/* ---- judging ---- */

size_t kv_corrupt_judge(uint64_t self, uint32_t hash, int64_t compact_rev,
                        const kv_corrupt_answer *a, size_t n, uint64_t *bad, size_t bad_cap)
{
    size_t agree = 0, disagree = 0, nb = 0;
    for (size_t i = 0; i < n; i++) {
        if (a[i].status != 0 || a[i].compact_rev != compact_rev)
            continue;
        if (a[i].hash == hash)
            agree++;
        else
            disagree++;
    }
    if (disagree == 0)
        return 0;
    if (disagree >= 2 && disagree > agree) { /* the leader is the odd one out */
        if (bad_cap)
            bad[nb++] = self;
        return nb;
    }
    for (size_t i = 0; i < n && nb < bad_cap; i++)
        if (a[i].status == 0 && a[i].compact_rev == compact_rev && a[i].hash != hash)
            bad[nb++] = a[i].id;
    return nb;
}

/* ---- raising the alarm (etcd checkHashKV's mismatch()) ---- */

static int alarm_is_active(void *arg, uint64_t member, int type)
{
    return (member == *(uint64_t *)arg && type == KV_ALARM_CORRUPT) ? 1 : 0;
}

static void raise_corrupt(kv_corrupt *c, uint64_t id)
{
    const kv_corrupt_deps *s = &c->d;
    if (kv_store_alarm_list(s->store, alarm_is_active, &id) == 1)
        return; /* already raised */
    Etcdserverpb__AlarmRequest ar = ETCDSERVERPB__ALARM_REQUEST__INIT;
    ar.action = ETCDSERVERPB__ALARM_REQUEST__ALARM_ACTION__ACTIVATE;
    ar.memberid = id;
    ar.alarm = ETCDSERVERPB__ALARM_TYPE__CORRUPT;
    uint8_t buf[32];
    size_t len = etcdserverpb__alarm_request__pack(&ar, buf);
    uint8_t *req = NULL;
    size_t rlen = 0;
    int rc = kv_internal_wrap(KV_IREQ_ALARM, 0, buf, len, &req, &rlen);
    if (rc == 0)
        rc = kv_node_propose(s->node, req, rlen, NULL, NULL, NULL); /* takes req */
    if (rc < 0)
        fprintf(stderr, "kvd: corruption check: cannot propose the CORRUPT alarm: %s\n",
                strerror(-rc));
    else
        fprintf(stderr, "kvd: corruption check: raising the CORRUPT alarm for member %016llx\n",
                (unsigned long long)id);
}

/* ---- rounds ---- */

static const char *status_text(int st)
{
    switch (st) {
    case KV_STORE_ERR_FUTURE_REV:
        return "the peer is behind (mvcc: required revision is a future revision)";
    case KV_STORE_ERR_COMPACTED:
        return "this member is behind (mvcc: required revision has been compacted)";
    case -ETIMEDOUT:
        return "no answer in time";
    default:
        return strerror(st < 0 ? -st : st);
    }
}

static void finish_round(kv_corrupt *c)
{
    round *r = &c->r;
    const kv_corrupt_deps *s = &c->d;
    uint64_t self = s->member_id;
    r->active = 0;
    size_t mism = 0, checked = 0, agree = 0;
    for (size_t i = 0; i < r->n; i++) {
        kv_corrupt_answer *a = &r->a[i];
        if (!r->answered[i])
            a->status = -ETIMEDOUT;
        if (a->status != 0) {
            fprintf(stderr,
                    "kvd: corruption check: cannot fetch the hash of member %016llx at "
                    "revision %lld: %s\n",
                    (unsigned long long)a->id, (long long)r->rev, status_text(a->status));
            continue;
        }
        checked++;
        if (a->hash == r->hash) {
            if (a->compact_rev == r->crev)
                agree++;
            continue;
        }
        if (a->compact_rev != r->crev) {
            fprintf(stderr,
                    "kvd: corruption check: found different compact revision values from "
                    "member %016llx (%lld, local %lld); not compared\n",
                    (unsigned long long)a->id, (long long)a->compact_rev, (long long)r->crev);
            continue;
        }
        mism++;
        fprintf(stderr,
                "kvd: corruption check: HASH MISMATCH at revision %lld (compact revision %lld): "
                "member %016llx has hash %u, member %016llx (this member) has hash %u\n",
                (long long)r->rev, (long long)r->crev, (unsigned long long)a->id, a->hash,
                (unsigned long long)self, r->hash);
    }
    if (r->initial) {
        /* etcd refuses on any mismatch; kvd refuses when more peers disagree with this member
         * than agree with it, so a healthy member still restarts next to a corrupt one (the
         * periodic check names that one). */
        c->init_done = 1;
        c->init_rc = mism > agree ? -EILSEQ : 0;
        if (mism && mism <= agree)
            fprintf(stderr,
                    "kvd: initial corruption check: %zu peer(s) differ from this member, %zu "
                    "agree with it: starting (the differing members are suspect)\n",
                    mism, agree);
        else if (mism == 0)
            fprintf(stderr,
                    "kvd: initial corruption checking passed; no corruption (%zu of %zu peers "
                    "compared at revision %lld)\n",
                    checked, r->n, (long long)r->rev);
        return;
    }
    kv_metric_inc(c->m_checks);
    uint64_t bad[KV_CORRUPT_MAX_PEERS];
    size_t nb = kv_corrupt_judge(self, r->hash, r->crev, r->a, r->n, bad, KV_CORRUPT_MAX_PEERS);
    if (nb)
        kv_metric_add(c->m_mismatches, (int64_t)nb);
    for (size_t i = 0; i < nb; i++) {
        fprintf(stderr,
                "kvd: corruption check: member %016llx is corrupt (revision %lld): the "
                "cluster refuses requests while its CORRUPT alarm is active\n",
                (unsigned long long)bad[i], (long long)r->rev);
        if (!c->closed)
            raise_corrupt(c, bad[i]);
    }
}

static void send_reqs(kv_corrupt *c)
{
    round *r = &c->r;
    uint8_t f[REQ_LEN];
    kv_put_be64(f, r->seq);
    kv_put_be64(f + 8, (uint64_t)r->rev);
    for (size_t i = 0; i < r->n; i++) {
        if (r->sent[i] || r->answered[i])
            continue;
        if (kv_node_peer_send(c->d.node, r->a[i].id, KV_CORRUPT_HASH_REQ, f, REQ_LEN) == 0)
            r->sent[i] = 1;
    }
}

static int round_complete(const round *r)
{
    for (size_t i = 0; i < r->n; i++)
        if (!r->answered[i])
            return 0;
    return 1;
}

/* The local hash is known: ask every other member at the same revision. */
static void start_peers(kv_corrupt *c, uint32_t hash, int64_t crev, int64_t cur)
{
    round *r = &c->r;
    const kv_corrupt_deps *s = &c->d;
    r->seq = ++c->next_seq;
    r->rev = cur;
    r->crev = crev;
    r->hash = hash;
    r->n = 0;
    memset(r->sent, 0, sizeof(r->sent));
    memset(r->answered, 0, sizeof(r->answered));
    Kvdpb__Member **m = NULL;
    size_t nm = 0;
    if (kv_store_members_list(s->store, &m, &nm) == 0) {
        for (size_t i = 0; i < nm; i++) {
            if (m[i]->id != s->member_id && r->n < KV_CORRUPT_MAX_PEERS) {
                memset(&r->a[r->n], 0, sizeof(r->a[0]));
                r->a[r->n++].id = m[i]->id;
            }
            kvdpb__member__free_unpacked(m[i], NULL);
        }
        free(m);
    }
    r->active = 1;
    /* etcd asks the peers one after the other, each within the request timeout; the initial
     * check also waits for the peers' transport to (re)connect to this restarted member */
    uint64_t wait = c->timeout_ms;
    if (r->initial && r->n > 1)
        wait *= r->n;
    r->deadline = uv_now(s->loop) + wait;
    r->resend_at = uv_now(s->loop) + 1000;
    send_reqs(c);
    if (round_complete(r))
        finish_round(c);
}

/* ---- hashing on the reader pool ---- */

static void job_work(void *arg)
{
    hash_job *j = arg;
    j->rc = kv_store_hash_kv_cur(j->c->d.store, j->rev, &j->hash, &j->crev, &j->cur);
}

static void send_resp(kv_corrupt *c, uint64_t to, uint64_t seq, int64_t rev, int status,
                      uint32_t hash, int64_t crev, int64_t cur)
{
    uint8_t f[RESP_LEN];
    kv_put_be64(f, seq);
    kv_put_be64(f + 8, (uint64_t)rev);
    kv_put_be32(f + 16, (uint32_t)status);
    kv_put_be32(f + 20, hash);
    kv_put_be64(f + 24, (uint64_t)crev);
    kv_put_be64(f + 32, (uint64_t)cur);
    (void)kv_node_peer_send(c->d.node, to, KV_CORRUPT_HASH_RESP, f, RESP_LEN);
}

static void job_done(void *arg, int status)
{
    hash_job *j = arg;
    kv_corrupt *c = j->c;
    c->jobs--;
    int rc = status ? status : j->rc;
    if (j->kind == JOB_SERVE) {
        c->serving--;
        if (!c->closed) {
            send_resp(c, j->from, j->seq, j->rev, rc, j->hash, j->crev, j->cur);
            kv_metric_inc(c->m_served);
        }
    } else {
        c->local_job = 0;
        if (!c->closed) {
            if (rc != 0) {
                fprintf(stderr, "kvd: corruption check: cannot hash the local store: %s\n",
                        status_text(rc));
                if (c->r.initial) {
                    c->init_done = 1;
                    c->init_rc = rc < -10000 ? -EIO : rc;
                }
            } else {
                start_peers(c, j->hash, j->crev, j->cur);
            }
        }
    }
    free(j);
    maybe_free(c);
}

static int submit(kv_corrupt *c, hash_job *j)
{
    const kv_corrupt_deps *s = &c->d;
    c->jobs++;
    if (s->read_pool == NULL) { /* no pool (tests): inline */
        job_work(j);
        job_done(j, 0);
        return 0;
    }
    int rc = kv_read_pool_submit(s->read_pool, job_work, job_done, j);
    if (rc < 0)
        c->jobs--;
    return rc;
}

static int start_round(kv_corrupt *c, int initial)
{
    hash_job *j = calloc(1, sizeof(*j));
    if (j == NULL)
        return -ENOMEM;
    j->c = c;
    j->kind = JOB_LOCAL;
    j->rev = 0;
    c->r.initial = initial;
    c->local_job = 1;
    int rc = submit(c, j);
    if (rc < 0) {
        c->local_job = 0;
        free(j);
    }
    return rc;
}

/* ---- peer frames ---- */

static void on_req(void *arg, uint64_t from, const uint8_t *buf, size_t len)
{
    kv_corrupt *c = arg;
    if (c->closed || len != REQ_LEN)
        return;
    uint64_t seq = kv_be64(buf);
    int64_t rev = (int64_t)kv_be64(buf + 8);
    if (c->serving >= KV_CORRUPT_MAX_SERVING) {
        kv_metric_inc(c->m_refused);
        send_resp(c, from, seq, rev, -EBUSY, 0, 0, 0);
        return;
    }
    hash_job *j = calloc(1, sizeof(*j));
    int rc = j ? 0 : -ENOMEM;
    if (j) {
        j->c = c;
        j->kind = JOB_SERVE;
        j->from = from;
        j->seq = seq;
        j->rev = rev;
        c->serving++;
        rc = submit(c, j);
        if (rc < 0) {
            c->serving--;
            free(j);
        }
    }
    if (rc < 0) {
        kv_metric_inc(c->m_refused);
        send_resp(c, from, seq, rev, rc, 0, 0, 0);
    }
}

static void on_resp(void *arg, uint64_t from, const uint8_t *buf, size_t len)
{
    kv_corrupt *c = arg;
    round *r = &c->r;
    if (c->closed || len != RESP_LEN || !r->active || kv_be64(buf) != r->seq ||
        (int64_t)kv_be64(buf + 8) != r->rev)
        return;
    for (size_t i = 0; i < r->n; i++) {
        if (r->a[i].id != from || r->answered[i])
            continue;
        r->answered[i] = 1;
        r->a[i].status = (int)kv_be32(buf + 16);
        r->a[i].hash = kv_be32(buf + 20);
        r->a[i].compact_rev = (int64_t)kv_be64(buf + 24);
        r->a[i].cur_rev = (int64_t)kv_be64(buf + 32);
        break;
    }
    if (round_complete(r))
        finish_round(c);
}

static void on_frame_ignored(void *arg, uint64_t from, const uint8_t *buf, size_t len)
{
    (void)arg;
    (void)from;
    (void)buf;
    (void)len;
}

/* ---- timer ---- */

static void note_self_corrupt(kv_corrupt *c);

static void on_timer(uv_timer_t *t)
{
    kv_corrupt *c = t->data;
    const kv_corrupt_deps *s = &c->d;
    if (c->closed)
        return;
    uint64_t now = uv_now(s->loop);
    note_self_corrupt(c);
    if (c->r.active) {
        if (now >= c->r.deadline)
            finish_round(c);
        else {
            if (c->r.initial && now >= c->r.resend_at) {
                /* a frame queued on a connection that then died is lost: ask again */
                memset(c->r.sent, 0, sizeof(c->r.sent));
                c->r.resend_at = now + 1000;
            }
            send_reqs(c); /* peers whose frame could not be queued yet */
        }
        return;
    }
    if (c->period_ms == 0 || c->local_job || now < c->next_check)
        return;
    c->next_check = now + c->period_ms;
    if (!kv_node_is_leader(s->node) || !s->has_peers)
        return; /* etcd: only the leader checks */
    int rc = start_round(c, 0);
    if (rc < 0)
        fprintf(stderr, "kvd: corruption check: cannot start: %s\n", strerror(-rc));
}

/* One clear line on the member the CORRUPT alarm names, once per raise. */
static void note_self_corrupt(kv_corrupt *c)
{
    const kv_corrupt_deps *s = &c->d;
    if (!(kv_store_alarms(s->store) & (1u << KV_ALARM_CORRUPT))) {
        c->self_noted = 0;
        return;
    }
    uint64_t self = s->member_id;
    if (c->self_noted || kv_store_alarm_list(s->store, alarm_is_active, &self) != 1)
        return;
    c->self_noted = 1;
    fprintf(stderr,
            "kvd: THIS MEMBER (%016llx) IS CORRUPT: its HashKV differs from the other members' "
            "(CORRUPT alarm); the cluster refuses requests until the member is replaced and "
            "the alarm disarmed (docs/corruption.md)\n",
            (unsigned long long)self);
}

static void timer_on(kv_corrupt *c)
{
    if (c->timer_on)
        return;
    uv_timer_start(&c->timer, on_timer, TICK_MS, TICK_MS);
    c->timer_on = 1;
}

/* ---- start / stop ---- */

int kv_corrupt_start(kv_corrupt **out, const kv_corrupt_deps *d, uint32_t period_ms)
{
    kv_corrupt *c = calloc(1, sizeof(*c));
    if (c == NULL)
        return -ENOMEM;
    c->d = *d;
    const kv_corrupt_deps *s = &c->d;
    c->period_ms = period_ms;
    c->timeout_ms = 5000u + 2u * (s->election_ms ? s->election_ms : 1000);
    uv_timer_init(s->loop, &c->timer);
    c->timer.data = c;
    if (s->metrics) {
        c->m_checks = kv_metrics_counter(s->metrics, "kvd_corrupt_checks_total",
                                         "Periodic corruption checks completed by this member "
                                         "as leader (--experimental-corrupt-check-time).",
                                         NULL);
        c->m_mismatches = kv_metrics_counter(
            s->metrics, "kvd_corrupt_mismatches_total",
            "Members found with a different HashKV at the same revision (CORRUPT raised).", NULL);
        c->m_served = kv_metrics_counter(s->metrics, "kvd_corrupt_hash_served_total",
                                         "HashKV requests of peers answered.", NULL);
        c->m_refused =
            kv_metrics_counter(s->metrics, "kvd_corrupt_hash_refused_total",
                               "HashKV requests of peers refused (more than 4 at once, or the "
                               "reader pool full).",
                               NULL);
    }
    kv_node_set_peer_handler(s->node, KV_CORRUPT_HASH_REQ, on_req, c);
    kv_node_set_peer_handler(s->node, KV_CORRUPT_HASH_RESP, on_resp, c);
    *out = c;
    if (period_ms > 0 && s->has_peers) {
        c->next_check = uv_now(s->loop) + period_ms;
        timer_on(c);
        fprintf(stderr, "kvd: enabled corruption checking every %u ms (leader only)\n", period_ms);
    }
    return 0;
}

void kv_corrupt_stop(kv_corrupt *c)
{
    if (c == NULL)
        return;
    c->closed = 1;
    c->r.active = 0;
    if (c->d.node) {
        kv_node_set_peer_handler(c->d.node, KV_CORRUPT_HASH_REQ, on_frame_ignored, NULL);
        kv_node_set_peer_handler(c->d.node, KV_CORRUPT_HASH_RESP, on_frame_ignored, NULL);
    }
    uv_close((uv_handle_t *)&c->timer, on_timer_closed);
}

int kv_corrupt_initial_check(kv_corrupt *c, char *err, size_t errlen)
{
    if (c == NULL)
        return -EINVAL;
    const kv_corrupt_deps *s = &c->d;
    fprintf(stderr, "kvd: starting initial corruption check (member %016llx, timeout %u ms)\n",
            (unsigned long long)s->member_id, c->timeout_ms);
    c->init_done = 0;
    c->init_rc = 0;
    /* a periodic round cannot be running yet: the timer's first period has not passed */
    int rc = start_round(c, 1);
    if (rc < 0) {
        snprintf(err, errlen, "%016llx failed to fetch hash (%s)", (unsigned long long)s->member_id,
                 strerror(-rc));
        return rc;
    }
    timer_on(c);
    while (!c->init_done)
        uv_run(s->loop, UV_RUN_ONCE);
    c->r.initial = 0;
    if (c->period_ms == 0 && c->timer_on) {
        uv_timer_stop(&c->timer);
        c->timer_on = 0;
    }
    if (c->init_rc == -EILSEQ)
        snprintf(err, errlen, "%016llx found data inconsistency with peers",
                 (unsigned long long)s->member_id);
    else if (c->init_rc < 0)
        snprintf(err, errlen, "%016llx failed to fetch hash (%s)", (unsigned long long)s->member_id,
                 strerror(-c->init_rc));
    return c->init_rc;
}
